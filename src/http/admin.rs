//! The admin API of seed 003: the notification outbox of every source and kind,
//! redacted and keyset-paged, and its manual retry (the same service entry point as
//! the console and `/api/v1`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use app::dto::{DeliveryPage, DeliveryQuery, DeliveryView};

use super::error::ApiError;
use super::extract::{ApiJson, ApiQuery, MaybeViewer};
use super::AppState;
use crate::service::deliveries::RetryRequest;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/notification-outbox", get(list_outbox))
        .route("/notification-outbox/{event_id}/retry", post(retry))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such admin API endpoint",
            )
        })
}

async fn list_outbox(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    ApiQuery(query): ApiQuery<DeliveryQuery>,
) -> Result<Json<DeliveryPage>, ApiError> {
    Ok(Json(state.deliveries.list(viewer.as_ref(), query).await?))
}

async fn retry(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(event_id): Path<String>,
    ApiJson(body): ApiJson<RetryRequest>,
) -> Result<Json<DeliveryView>, ApiError> {
    Ok(Json(
        state
            .deliveries
            .retry(viewer.as_ref(), &event_id, body)
            .await?,
    ))
}
