//! Deliveries over HTTP: the one manual-retry handler, mounted on the JSON API
//! (`/api/v1/deliveries/{event_id}/retry`) and the admin API
//! (`/notification-outbox/{event_id}/retry`).

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};

use app::dto::DeliveryView;

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, MaybeViewer};
use super::state::AppState;
use crate::service::deliveries::RetryRequest;

pub fn api_router() -> Router<AppState> {
    Router::new().route("/deliveries/{event_id}/retry", post(retry_delivery))
}

/// Retries one delivery from the state the viewer saw.
#[utoipa::path(
    post, path = "/api/v1/deliveries/{event_id}/retry", tag = "deliveries",
    description = "Retries one failed, skipped or uncertain delivery from the state the caller saw \
        (a new cycle, audited in the same transaction). Needs `runs:write`; an `uncertain` one only \
        with `allow_uncertain` (it may have arrived: the receiver may get it twice).",
    params(("event_id" = String, Path, description = "The delivery's event id")),
    request_body = RetryRequest,
    responses(
        (status = 200, description = "The delivery, pending again", body = DeliveryView),
        (status = 404, description = "No such delivery of this kind", body = ErrorBody),
        (status = 409, description = "It changed since the caller saw it, or its state cannot be retried \
            (`current_status` says where it stands)", body = ErrorBody),
    )
)]
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
