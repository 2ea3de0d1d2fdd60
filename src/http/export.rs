//! Exports as HTTP answers: the outbox (`/admin/api/notification-outbox/export`,
//! and the Deliveries page's `/deliveries/export`) and the audit trail
//! (`/admin/api/audit/export`, the Audit page's `/audit/export`), as NDJSON or
//! CSV, streamed a page at a time. The console's addresses sit under their
//! pages, so a signed-out browser is sent to sign in and brought back.

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiQuery, MaybeViewer};
use super::state::AppState;
use crate::service::export::{AuditExportQuery, Export, ExportQuery, ExportRow, RowPages};

/// `GET /admin/api/notification-outbox/export` (and `/deliveries/export`):
/// every matching event as NDJSON or CSV (`runs:read`; payloads with
/// `data:read`). A bad filter or a store that cannot be read is an error
/// before any row; a store lost midway cuts the body short (an incomplete
/// chunked transfer), so a partial export never passes for a whole one.
#[utoipa::path(
    get, path = "/admin/api/notification-outbox/export", tag = "admin",
    description = "Every matching event of every store, newest first, streamed (seed 003's \
        reconciliation): NDJSON, one `ExportRow` a line, or with `format=csv` a CSV with a header \
        (cells a spreadsheet would run as a formula start with an apostrophe). Needs `runs:read`; \
        payloads only with `data:read`. A store lost midway cuts the body short (an incomplete \
        chunked transfer). The console serves the same at `/deliveries/export`.",
    params(ExportQuery),
    responses(
        (status = 200, description = "One JSON object (an ExportRow) a line, or with format=csv a CSV",
            content(
                (ExportRow = "application/x-ndjson"),
                (String = "text/csv"),
            )),
        (status = 400, description = "A filter or the format is not valid", body = ErrorBody),
    )
)]
pub async fn events(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    ApiQuery(query): ApiQuery<ExportQuery>,
) -> Result<Response, ApiError> {
    let export = state.deliveries.export(viewer.as_ref(), &query)?;
    stream(export, "events").await
}

/// `GET /admin/api/audit/export` (and `/audit/export`): the whole audit trail.
#[utoipa::path(
    get, path = "/admin/api/audit/export", tag = "admin",
    description = "The operators' audit trail of every store, newest first, streamed as NDJSON \
        (one AuditEntry a line) or with `format=csv` as CSV. Needs `runs:write`. The console \
        serves the same at `/audit/export`.",
    params(AuditExportQuery),
    responses(
        (status = 200, description = "One JSON object (an AuditEntry) a line, or with format=csv a CSV",
            content(
                (app::dto::AuditEntry = "application/x-ndjson"),
                (String = "text/csv"),
            )),
        (status = 400, description = "The format is not valid", body = ErrorBody),
    )
)]
pub async fn audit(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    ApiQuery(query): ApiQuery<AuditExportQuery>,
) -> Result<Response, ApiError> {
    let export = state.deliveries.export_audit(viewer.as_ref(), &query)?;
    stream(export, "audit").await
}

/// The export as a download: the first page is read before the answer starts
/// (so a store that cannot be read is a proper error status), the rest as the
/// client takes them.
async fn stream<P: RowPages + 'static>(
    mut export: Export<P>,
    table: &str,
) -> Result<Response, ApiError> {
    let format = export.format();
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
    let stamp = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[year][month][day]-[hour][minute][second]"
        ))
        .unwrap_or_default();
    let disposition = format!(
        "attachment; filename=\"herald-{table}-{stamp}.{}\"",
        format.extension()
    );
    Ok((
        [
            (header::CONTENT_TYPE, format.content_type().to_string()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        Body::from_stream(pages),
    )
        .into_response())
}
