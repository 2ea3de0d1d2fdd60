//! Deliveries over HTTP: the one manual-retry handler, mounted on the JSON API
//! (`/api/v1/deliveries/{event_id}/retry`) and the admin API
//! (`/notification-outbox/{event_id}/retry`).

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};

use app::dto::DeliveryView;

use super::error::ApiError;
use super::extract::{ApiJson, MaybeViewer};
use super::state::AppState;
use crate::service::deliveries::RetryRequest;

pub fn api_router() -> Router<AppState> {
    Router::new().route("/deliveries/{event_id}/retry", post(retry_delivery))
}

/// Retries one delivery from the state the viewer saw.
pub(super) async fn retry_delivery(
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
