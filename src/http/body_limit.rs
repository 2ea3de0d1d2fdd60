//! The body limit of the console's server functions. Their framework reads the
//! body itself and answers an oversize one with a 500; this layer refuses it
//! first, with a 413 that says the limit, and never buffers more than the limit.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;

/// Where the console's server functions are served.
pub const SERVER_FN_PREFIX: &str = "/console-api/";

pub async fn limit_server_fn_bodies(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if !request.uri().path().starts_with(SERVER_FN_PREFIX) {
        return next.run(request).await;
    }
    let max = state.settings.max_body_bytes;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max as u64) {
        return too_large(max);
    }
    // A body without a length (chunked) is read up to the limit, no further.
    let (parts, body) = request.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, max).await {
        Ok(bytes) => bytes,
        Err(_) => return too_large(max),
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn too_large(max: usize) -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the request body is larger than the limit of {max} bytes"),
    )
    .into_response()
}
