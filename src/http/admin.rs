//! The admin API of seed 003: the notification outbox of every source and kind,
//! redacted and keyset-paged, and its manual retry (the same service entry point as
//! the console and `/api/v1`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use app::dto::{AuditPage, BreakerClosed, BreakerView, DeliveryPage, DeliveryQuery, DeliveryView};

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiQuery, MaybeViewer};
use super::state::AppState;
use crate::service::deliveries::RetryRequest;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/notification-outbox", get(list_outbox))
        .route("/notification-outbox/export", get(super::export::events))
        .route(
            "/notification-outbox/{event_id}/retry",
            post(retry_outbox_event),
        )
        .route("/audit", get(list_audit))
        .route("/audit/export", get(super::export::audit))
        .route("/destination-breakers", get(list_breakers))
        .route("/destination-breakers/close", post(close_breaker))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such admin API endpoint",
            )
        })
}

#[utoipa::path(
    get, path = "/admin/api/notification-outbox", tag = "admin",
    description = "The notification outbox of every source and kind, newest first, redacted \
        (no payloads, destinations as origins) and keyset-paged. Needs `runs:read`.",
    params(DeliveryQuery),
    responses((status = 200, description = "One page of events", body = DeliveryPage))
)]
async fn list_outbox(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    ApiQuery(query): ApiQuery<DeliveryQuery>,
) -> Result<Json<DeliveryPage>, ApiError> {
    Ok(Json(state.deliveries.list(viewer.as_ref(), query).await?))
}

/// The admin API's name for a delivery's manual retry: the same handler as
/// `POST /api/v1/deliveries/{event_id}/retry`.
#[utoipa::path(
    post, path = "/admin/api/notification-outbox/{event_id}/retry", tag = "admin",
    description = "Retries one failed, skipped or uncertain event from the state the caller saw \
        (as `POST /api/v1/deliveries/{event_id}/retry`). Needs `runs:write`; audited.",
    params(("event_id" = String, Path, description = "The event's id")),
    request_body = RetryRequest,
    responses(
        (status = 200, description = "The event, pending again", body = DeliveryView),
        (status = 404, description = "No such event of this kind", body = ErrorBody),
        (status = 409, description = "It changed since the caller saw it, or cannot be retried", body = ErrorBody),
    )
)]
async fn retry_outbox_event(
    state: State<AppState>,
    viewer: MaybeViewer,
    event_id: axum::extract::Path<String>,
    body: super::extract::ApiJson<RetryRequest>,
) -> Result<Json<DeliveryView>, ApiError> {
    super::deliveries::retry_delivery(state, viewer, event_id, body).await
}

/// `GET /admin/api/audit?after=&limit=`.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Keyset cursor: the previous page's `next_cursor`.
    #[serde(default)]
    pub after: Option<String>,
    /// Entries a page (default 50).
    #[serde(default)]
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// The operators' audit trail of every store, newest first (`runs:write`).
#[utoipa::path(
    get, path = "/admin/api/audit", tag = "admin",
    description = "The operators' audit trail of every store, newest first. Needs `runs:write`.",
    params(AuditQuery),
    responses((status = 200, description = "One page of the trail", body = AuditPage))
)]
async fn list_audit(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = query.limit.unwrap_or(50);
    Ok(Json(
        state
            .deliveries
            .audit(viewer.as_ref(), query.after, limit)
            .await?,
    ))
}

/// The header naming the stores whose breakers are missing from the list (the
/// approvals database apart and out): the body stays the plain list.
pub const UNAVAILABLE_STORES_HEADER: &str = "herald-unavailable-stores";

/// Every destination breaker (open and half-open first), `runs:read`.
#[utoipa::path(
    get, path = "/admin/api/destination-breakers", tag = "admin",
    description = "Every destination's circuit breaker, open and half-open first. Needs `runs:read`.",
    responses((status = 200, description = "The breakers", body = Vec<BreakerView>,
        headers(("herald-unavailable-stores" = String,
            description = "The stores whose breakers are missing (could not be read)"))))
)]
async fn list_breakers(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    let list = state.destinations.breakers(viewer.as_ref()).await?;
    let mut headers = axum::http::HeaderMap::new();
    if !list.unavailable.is_empty() {
        let text = list.unavailable.join("; ").replace(['\r', '\n'], " ");
        if let Ok(value) = axum::http::HeaderValue::from_str(&text) {
            headers.insert(UNAVAILABLE_STORES_HEADER, value);
        }
    }
    Ok((headers, Json::<Vec<BreakerView>>(list.breakers)))
}

/// The body of a manual close: the destination's origin as listed.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseBreaker {
    pub destination: String,
}

/// Closes a destination's breaker by hand (`runs:write`, audited).
#[utoipa::path(
    post, path = "/admin/api/destination-breakers/close", tag = "admin",
    description = "Closes a destination's breaker by hand and makes its waiting events due. \
        Needs `runs:write`; audited in the same transaction.",
    request_body = CloseBreaker,
    responses(
        (status = 200, description = "What the close did", body = BreakerClosed),
        (status = 404, description = "No breaker for that destination", body = ErrorBody),
    )
)]
async fn close_breaker(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    super::extract::ApiJson(body): super::extract::ApiJson<CloseBreaker>,
) -> Result<Json<BreakerClosed>, ApiError> {
    Ok(Json(
        state
            .destinations
            .close(viewer.as_ref(), &body.destination)
            .await?,
    ))
}
