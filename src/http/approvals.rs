//! The approvals source's HTTP surface: records, approval definitions, the
//! approval lifecycle, and the replay status endpoint for operators.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiQuery, MaybeViewer};
use super::idempotency::IdempotencyKeyHeader;
use super::state::AppState;
use crate::approvals::model::{Definition, DefinitionSpec};
use crate::service::approvals::{
    ApprovalDetail, ApprovalView, Decision, ReplayStatus, SubmitRequest,
};
use crate::service::records::{RecordInput, RecordView};

/// Routes under `/api/v1`.
pub fn api_router() -> Router<AppState> {
    Router::new()
        .route("/records/{object}", get(list_records).post(create_record))
        .route(
            "/records/{object}/{id}",
            get(get_record).patch(update_record),
        )
        .route(
            "/approval-definitions",
            get(list_definitions).post(put_definition),
        )
        .route("/approvals", get(list_approvals).post(submit))
        .route("/approvals/{id}", get(get_approval))
        .route("/approvals/{id}/{decision}", post(decide))
}

/// Routes under `/admin/api`.
pub fn admin_router() -> Router<AppState> {
    Router::new().route("/approval-action-replay", get(replay_status))
}

/// A records page's cursor and size.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListParams {
    /// Keyset cursor: the last record id of the previous page.
    after: Option<String>,
    /// Records a page (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

#[utoipa::path(
    get, path = "/api/v1/records/{object}", tag = "records",
    description = "An object's records in id order, keyset-paged. Needs `records:read` and `data:read`.",
    params(("object" = String, Path, description = "The object's API name, e.g. `Account`",
        pattern = "^[A-Za-z][A-Za-z0-9_]{0,63}$"), ListParams),
    responses((status = 200, description = "One page of records", body = Vec<RecordView>))
)]
async fn list_records(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(object): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<Vec<RecordView>>, ApiError> {
    let limit = params.limit.unwrap_or(100);
    if limit == 0 || limit > 500 {
        return Err(ApiError::invalid("limit", "limit: must be 1 to 500"));
    }
    Ok(Json(
        state
            .records
            .list(viewer.as_ref(), &object, params.after.as_deref(), limit)
            .await?,
    ))
}

#[utoipa::path(
    post, path = "/api/v1/records/{object}", tag = "records",
    description = "Creates a record. Needs `records:write`. With an `Idempotency-Key`, a repeat gets \
        the original record and creates nothing.",
    params(("object" = String, Path, description = "The object's API name, e.g. `Account`",
        pattern = "^[A-Za-z][A-Za-z0-9_]{0,63}$"), IdempotencyKeyHeader),
    request_body = RecordInput,
    responses(
        (status = 201, description = "The record", body = RecordView,
            headers(("Idempotent-Replayed" = String, description = "`true` on a keyed repeat"))),
        (status = 422, description = "The key was used with another request", body = ErrorBody),
    )
)]
/// `POST /api/v1/records/{object}`; with an `Idempotency-Key`, a repeat gets the
/// original record and creates nothing.
async fn create_record(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(object): Path<String>,
    headers: axum::http::HeaderMap,
    ApiJson(body): ApiJson<RecordInput>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let Some(key) = super::idempotency::key_of(&headers)? else {
        let record = state.records.create(viewer.as_ref(), &object, body).await?;
        return Ok((StatusCode::CREATED, Json(record)).into_response());
    };
    Ok(super::idempotency::respond(
        state
            .records
            .create_once(viewer.as_ref(), &object, body, &key)
            .await?,
    ))
}

#[utoipa::path(
    get, path = "/api/v1/records/{object}/{id}", tag = "records",
    description = "One record. Needs `records:read` and `data:read`.",
    params(("object" = String, Path, description = "The object's API name, e.g. `Account`",
        pattern = "^[A-Za-z][A-Za-z0-9_]{0,63}$"), ("id" = String, Path, description = "The record's id")),
    responses(
        (status = 200, description = "The record", body = RecordView),
        (status = 404, description = "No such record", body = ErrorBody),
    )
)]
async fn get_record(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path((object, id)): Path<(String, String)>,
) -> Result<Json<RecordView>, ApiError> {
    Ok(Json(
        state.records.get(viewer.as_ref(), &object, &id).await?,
    ))
}

#[utoipa::path(
    patch, path = "/api/v1/records/{object}/{id}", tag = "records",
    description = "Sets fields of a record (the fields not named keep their values). Needs `records:write`.",
    params(("object" = String, Path, description = "The object's API name, e.g. `Account`",
        pattern = "^[A-Za-z][A-Za-z0-9_]{0,63}$"), ("id" = String, Path, description = "The record's id")),
    request_body = RecordInput,
    responses(
        (status = 200, description = "The record as updated", body = RecordView),
        (status = 404, description = "No such record", body = ErrorBody),
    )
)]
async fn update_record(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path((object, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<RecordInput>,
) -> Result<Json<RecordView>, ApiError> {
    Ok(Json(
        state
            .records
            .update(viewer.as_ref(), &object, &id, body)
            .await?,
    ))
}

#[utoipa::path(
    get, path = "/api/v1/approval-definitions", tag = "approvals",
    description = "Every approval definition's latest version. Needs `records:read`.",
    responses((status = 200, description = "The definitions", body = Vec<Definition>))
)]
async fn list_definitions(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
) -> Result<Json<Vec<Definition>>, ApiError> {
    Ok(Json(state.approvals.definitions(viewer.as_ref()).await?))
}

#[utoipa::path(
    post, path = "/api/v1/approval-definitions", tag = "approvals",
    description = "Stores a new version of a definition (pending approvals keep theirs). Needs `definitions:manage`.",
    request_body = DefinitionSpec,
    responses((status = 201, description = "The version stored", body = Definition))
)]
async fn put_definition(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    ApiJson(body): ApiJson<DefinitionSpec>,
) -> Result<(StatusCode, Json<Definition>), ApiError> {
    let definition = state
        .approvals
        .put_definition(viewer.as_ref(), body)
        .await?;
    Ok((StatusCode::CREATED, Json(definition)))
}

#[utoipa::path(
    get, path = "/api/v1/approvals", tag = "approvals",
    description = "Approvals, newest first. Needs `records:read`.",
    responses((status = 200, description = "The approvals", body = Vec<ApprovalView>))
)]
async fn list_approvals(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
) -> Result<Json<Vec<ApprovalView>>, ApiError> {
    Ok(Json(state.approvals.list(viewer.as_ref()).await?))
}

#[utoipa::path(
    get, path = "/api/v1/approvals/{id}", tag = "approvals",
    description = "An approval with its nodes, work items and events. Needs `records:read`.",
    params(("id" = String, Path, description = "The approval's id")),
    responses(
        (status = 200, description = "The approval", body = ApprovalDetail),
        (status = 404, description = "No such approval", body = ErrorBody),
    )
)]
async fn get_approval(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(id): Path<String>,
) -> Result<Json<ApprovalDetail>, ApiError> {
    Ok(Json(state.approvals.get(viewer.as_ref(), &id).await?))
}

#[utoipa::path(
    post, path = "/api/v1/approvals", tag = "approvals",
    description = "Submits a record for approval: the approval, its first step and every Submit action \
        commit in one transaction. Needs `approvals:submit`. With an `Idempotency-Key`, a repeat gets \
        the original answer and submits nothing.",
    params(IdempotencyKeyHeader),
    request_body = SubmitRequest,
    responses(
        (status = 201, description = "The approval, pending", body = ApprovalView,
            headers(("Idempotent-Replayed" = String, description = "`true` on a keyed repeat"))),
        (status = 409, description = "The record already has a pending approval", body = ErrorBody),
        (status = 422, description = "The key was used with another request", body = ErrorBody),
    )
)]
/// `POST /api/v1/approvals`; with an `Idempotency-Key`, a repeat gets the
/// original answer and submits nothing.
async fn submit(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    headers: axum::http::HeaderMap,
    ApiJson(body): ApiJson<SubmitRequest>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let Some(key) = super::idempotency::key_of(&headers)? else {
        let approval = state.approvals.submit(viewer.as_ref(), body).await?;
        return Ok((StatusCode::CREATED, Json(approval)).into_response());
    };
    Ok(super::idempotency::respond(
        state
            .approvals
            .submit_once(viewer.as_ref(), body, &key)
            .await?,
    ))
}

/// `POST /api/v1/approvals/{id}/approve|reject|recall`; with an
/// `Idempotency-Key`, a repeat gets the original answer and decides nothing
/// (without one, a repeated approve could decide the next step).
#[utoipa::path(
    post, path = "/api/v1/approvals/{id}/{decision}", tag = "approvals",
    description = "Approves the step the approval waits on (the last step approves it), rejects it, \
        or recalls it; the decision and every action it owes commit in one transaction. Needs \
        `approvals:submit`, as the step's approver (approve, reject) or as the submitter or an admin \
        (recall). With an `Idempotency-Key`, a repeat gets the original answer and decides nothing.",
    params(
        ("id" = String, Path, description = "The approval's id"),
        ("decision" = String, Path, description = "`approve`, `reject` or `recall`",
            pattern = "^(approve|reject|recall)$"),
        IdempotencyKeyHeader,
    ),
    responses(
        (status = 200, description = "The approval as decided", body = ApprovalView,
            headers(("Idempotent-Replayed" = String, description = "`true` on a keyed repeat"))),
        (status = 404, description = "No such approval, or no such decision", body = ErrorBody),
        (status = 409, description = "It is no longer pending (`current_status` says where it stands)", body = ErrorBody),
        (status = 422, description = "The key was used with another request", body = ErrorBody),
    )
)]
async fn decide(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path((id, decision)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let decision = Decision::parse(&decision).map_err(|_| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such API endpoint: an approval takes approve, reject or recall",
        )
    })?;
    let viewer = viewer.as_ref();
    let Some(key) = super::idempotency::key_of(&headers)? else {
        let approvals = &state.approvals;
        let view = match decision {
            Decision::Approve => approvals.approve(viewer, &id).await?,
            Decision::Reject => approvals.reject(viewer, &id).await?,
            Decision::Recall => approvals.recall(viewer, &id).await?,
        };
        return Ok(Json(view).into_response());
    };
    Ok(super::idempotency::respond(
        state
            .approvals
            .decide_once(viewer, &id, decision, &key)
            .await?,
    ))
}

#[utoipa::path(
    get, path = "/admin/api/approval-action-replay", tag = "admin",
    description = "Field-update replay rows (Submit, Approve, Reject and Recall FieldUpdates) counted by status, and the failed ones. Needs `records:read`; \
        the failed rows only with `data:read`.",
    responses((status = 200, description = "The replay shelf", body = ReplayStatus))
)]
async fn replay_status(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
) -> Result<Json<ReplayStatus>, ApiError> {
    Ok(Json(state.approvals.replay_status(viewer.as_ref()).await?))
}
