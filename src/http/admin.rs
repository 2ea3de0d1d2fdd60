//! The admin API of seed 003: the notification outbox of every source and kind,
//! redacted and keyset-paged, and its manual retry (the same service entry point as
//! the console and `/api/v1`).

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use app::dto::{AuditPage, BreakerClosed, BreakerView, DeliveryPage, DeliveryQuery};

use super::error::ApiError;
use super::extract::{ApiQuery, MaybeViewer};
use super::state::AppState;
use crate::service::export::ExportQuery;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/notification-outbox", get(list_outbox))
        .route("/notification-outbox/export", get(export_outbox))
        .route(
            "/notification-outbox/{event_id}/retry",
            post(super::deliveries::retry_delivery),
        )
        .route("/audit", get(list_audit))
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

async fn list_outbox(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    ApiQuery(query): ApiQuery<DeliveryQuery>,
) -> Result<Json<DeliveryPage>, ApiError> {
    Ok(Json(state.deliveries.list(viewer.as_ref(), query).await?))
}

/// `GET /admin/api/notification-outbox/export?since=&until=&status=&kind=&source=&parent=`:
/// every matching event as NDJSON (`runs:read`; payloads with `data:read`),
/// streamed a page at a time. A bad filter or a store that cannot be read is an
/// error before any row; a store lost midway cuts the body short (an incomplete
/// chunked transfer), so a partial export never passes for a whole one.
async fn export_outbox(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    ApiQuery(query): ApiQuery<ExportQuery>,
) -> Result<Response, ApiError> {
    let mut export = state.deliveries.export(viewer.as_ref(), &query)?;
    let first = export.next_page().await?;
    let pages = futures_util::stream::unfold((first, export), |(ready, mut export)| async move {
        let page = match ready {
            Some(page) => Ok(Some(page)),
            None => export.next_page().await,
        };
        match page {
            Ok(Some(page)) => Some((Ok(page), (None, export))),
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(error = %err, exported = export.exported(), "an export stopped: a store could not be read");
                Some((Err(std::io::Error::other(err.to_string())), (None, export)))
            }
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"herald-events.ndjson\"",
            ),
        ],
        Body::from_stream(pages),
    )
        .into_response())
}

/// `GET /admin/api/audit?after=&limit=`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    #[serde(default)]
    pub after: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
}

/// The operators' audit trail of every store, newest first (`runs:write`).
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
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloseBreaker {
    pub destination: String,
}

/// Closes a destination's breaker by hand (`runs:write`, audited).
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
