//! The admin API of seed 003: the notification outbox of every source and kind,
//! redacted and keyset-paged, and its manual retry (the same service entry point as
//! the console and `/api/v1`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use app::dto::{DeliveryPage, DeliveryQuery};

use super::error::ApiError;
use super::extract::{ApiQuery, MaybeViewer};
use super::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/notification-outbox", get(list_outbox))
        .route(
            "/notification-outbox/{event_id}/retry",
            post(super::api::retry_delivery),
        )
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
