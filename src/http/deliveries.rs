//! Deliveries over HTTP: the one manual-retry handler, mounted on the JSON API
//! (`/api/v1/deliveries/{event_id}/retry`) and the admin API
//! (`/notification-outbox/{event_id}/retry`); the skip of a failed or uncertain
//! one (`/api/v1/deliveries/{event_id}/skip`); the blocked ordered lanes
//! (`/api/v1/lanes/blocked`).

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};

use app::dto::{BlockedLanes, DeliveryView, SkipCommand};

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, MaybeViewer};
use super::state::AppState;
use crate::service::deliveries::RetryRequest;

pub fn api_router() -> Router<AppState> {
    Router::new()
        .route("/deliveries/{event_id}/retry", post(retry_delivery))
        .route("/deliveries/{event_id}/skip", post(skip_delivery))
        .route("/lanes/blocked", get(blocked_lanes))
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

/// Skips one failed or uncertain delivery for good, with a reason.
#[utoipa::path(
    post, path = "/api/v1/deliveries/{event_id}/skip", tag = "deliveries",
    description = "Skips one failed or uncertain delivery for good, from the state (and cycle) the caller \
        saw, with a reason kept in the audit trail (written in the same transaction). An ordered lane \
        blocked by it goes on with its next delivery. Needs `runs:write`; an `uncertain` one only with \
        `allow_uncertain` (it may never have arrived). A skipped delivery can be retried later, outside its lane.",
    params(("event_id" = String, Path, description = "The delivery's event id")),
    request_body = SkipCommand,
    responses(
        (status = 200, description = "The delivery, skipped", body = DeliveryView),
        (status = 404, description = "No such delivery of this kind", body = ErrorBody),
        (status = 409, description = "It changed since the caller saw it (`current_status` says where it stands)", body = ErrorBody),
        (status = 400, description = "No reason, a state that cannot be skipped, or an uncertain one without `allow_uncertain`", body = ErrorBody),
    )
)]
pub(super) async fn skip_delivery(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(event_id): Path<String>,
    ApiJson(body): ApiJson<SkipCommand>,
) -> Result<Json<DeliveryView>, ApiError> {
    Ok(Json(
        state
            .deliveries
            .skip(viewer.as_ref(), &event_id, body)
            .await?,
    ))
}

/// The ordered lanes whose head waits for an operator.
#[utoipa::path(
    get, path = "/api/v1/lanes/blocked", tag = "deliveries",
    description = "The ordered lanes whose head is failed or uncertain, longest blocked first (at most 50; \
        `more` says when there are others): the head (redacted as every delivery), and how many wait \
        behind it. Retry the head (`/deliveries/{event_id}/retry`) or skip it (`/deliveries/{event_id}/skip`) \
        to let the lane go on. Needs `runs:read`.",
    responses((status = 200, description = "The blocked lanes", body = BlockedLanes))
)]
pub(super) async fn blocked_lanes(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
) -> Result<Json<BlockedLanes>, ApiError> {
    Ok(Json(state.deliveries.blocked_lanes(viewer.as_ref()).await?))
}
