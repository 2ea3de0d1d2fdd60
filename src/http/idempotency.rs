//! The `Idempotency-Key` header of the JSON API's creates (issue 21): read and
//! checked here, and a keyed answer written back (`Idempotent-Replayed: true` on
//! a repeat).

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use crate::service::idempotency::{Answered, IdempotencyKey};

/// The request's key, if it sent one (a malformed one is `400`).
/// The `Idempotency-Key` header as the OpenAPI document describes it (what
/// [`IdempotencyKey::parse`] takes).
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // read by key_of from the raw headers; this is its description
pub struct IdempotencyKeyHeader {
    /// Makes the request safe to repeat: a repeat within the key's lifetime (24 h by
    /// default) gets the original answer with `Idempotent-Replayed: true`.
    #[serde(rename = "Idempotency-Key")]
    #[param(min_length = 1, max_length = 255, pattern = "^[!-~]+$")]
    key: Option<String>,
}

pub fn key_of(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    // Not visible ASCII: refused by the same check, with the same message.
    let text = value.to_str().unwrap_or("\u{0}");
    Ok(Some(IdempotencyKey::parse(text)?))
}

/// A keyed create's answer as it was first given.
pub fn respond(answered: Answered) -> Response {
    let status = StatusCode::from_u16(answered.status).unwrap_or(StatusCode::OK);
    let mut response = (status, Json(answered.body)).into_response();
    if answered.replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}
