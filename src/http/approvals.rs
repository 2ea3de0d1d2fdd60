//! The approvals source's HTTP surface: records, approval definitions, the
//! approval lifecycle, and the replay status endpoint for operators.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::{ApiJson, ApiQuery, MaybeViewer};
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
        .route("/approvals/{id}/approve", post(approve))
        .route("/approvals/{id}/reject", post(reject))
        .route("/approvals/{id}/recall", post(recall))
}

/// Routes under `/admin/api`.
pub fn admin_router() -> Router<AppState> {
    Router::new().route("/approval-action-replay", get(replay_status))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    after: Option<String>,
    limit: Option<u32>,
}

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

async fn get_record(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path((object, id)): Path<(String, String)>,
) -> Result<Json<RecordView>, ApiError> {
    Ok(Json(
        state.records.get(viewer.as_ref(), &object, &id).await?,
    ))
}

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

async fn list_definitions(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
) -> Result<Json<Vec<Definition>>, ApiError> {
    Ok(Json(state.approvals.definitions(viewer.as_ref()).await?))
}

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

async fn list_approvals(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
) -> Result<Json<Vec<ApprovalView>>, ApiError> {
    Ok(Json(state.approvals.list(viewer.as_ref()).await?))
}

async fn get_approval(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(id): Path<String>,
) -> Result<Json<ApprovalDetail>, ApiError> {
    Ok(Json(state.approvals.get(viewer.as_ref(), &id).await?))
}

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

async fn approve(
    state: State<AppState>,
    viewer: MaybeViewer,
    id: Path<String>,
    headers: axum::http::HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    decide(state, viewer, id, headers, Decision::Approve).await
}

async fn reject(
    state: State<AppState>,
    viewer: MaybeViewer,
    id: Path<String>,
    headers: axum::http::HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    decide(state, viewer, id, headers, Decision::Reject).await
}

async fn recall(
    state: State<AppState>,
    viewer: MaybeViewer,
    id: Path<String>,
    headers: axum::http::HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    decide(state, viewer, id, headers, Decision::Recall).await
}

/// `POST /api/v1/approvals/{id}/approve|reject|recall`; with an
/// `Idempotency-Key`, a repeat gets the original answer and decides nothing
/// (without one, a repeated approve could decide the next step).
async fn decide(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    decision: Decision,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
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

async fn replay_status(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
) -> Result<Json<ReplayStatus>, ApiError> {
    Ok(Json(state.approvals.replay_status(viewer.as_ref()).await?))
}
