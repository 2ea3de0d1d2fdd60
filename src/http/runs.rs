//! The JSON API's runs, version 1: create, list, read and move runs, and list a
//! run's deliveries.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use app::dto::{DeliveryView, RunPage, RunQuery};

use vocab::{DeliveryFilter, RunStatus};

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiQuery, MaybeViewer};
use super::idempotency::{key_of, respond, IdempotencyKeyHeader};
use super::state::AppState;
use crate::service::runs::{
    BatchTransitions, CreateRun, RunDetail, TransitionRequest, TransitionResponse,
};
use crate::service::ServiceError;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/runs", get(list_runs).post(create_run))
        .route("/runs/transitions", post(transition_runs))
        .route("/runs/{id}", get(get_run))
        .route("/runs/{id}/transitions", post(transition_run))
        .route("/runs/{id}/deliveries", get(run_deliveries))
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such API endpoint")
        })
}

/// `POST /api/v1/runs`; with an `Idempotency-Key` header, a repeat of the
/// request gets the original answer (`Idempotent-Replayed: true`) and creates
/// nothing.
#[utoipa::path(
    post, path = "/api/v1/runs", tag = "runs",
    description = "Records a run in `created`. Needs `runs:write`. With an `Idempotency-Key`, \
        a repeat gets the original answer (`Idempotent-Replayed: true`) and records nothing.",
    params(IdempotencyKeyHeader),
    request_body = CreateRun,
    responses(
        (status = 201, description = "The run, recorded (or, replayed, as first recorded)", body = RunDetail,
            headers(("Idempotent-Replayed" = String, description = "`true` on a keyed repeat"))),
        (status = 422, description = "The key was used with another request", body = ErrorBody),
    )
)]
async fn create_run(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CreateRun>,
) -> Result<Response, ApiError> {
    let Some(key) = key_of(&headers)? else {
        let run = state.runs.create(viewer.as_ref(), body).await?;
        return Ok((StatusCode::CREATED, Json(run)).into_response());
    };
    Ok(respond(
        state.runs.create_once(viewer.as_ref(), body, &key).await?,
    ))
}

#[utoipa::path(
    get, path = "/api/v1/runs/{id}", tag = "runs",
    description = "One run. Needs `runs:read`; `callback_url` and `result` only with `data:read`.",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run", body = RunDetail),
        (status = 404, description = "No such run", body = ErrorBody),
    )
)]
async fn get_run(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(id): Path<String>,
) -> Result<Json<RunDetail>, ApiError> {
    Ok(Json(state.runs.get(viewer.as_ref(), &id).await?))
}

/// The runs list's filters and cursor.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListParams {
    /// Runs of this type.
    #[serde(rename = "type")]
    run_type: Option<String>,
    /// Runs in this state.
    #[param(value_type = Option<RunStatusFilter>)]
    status: Option<String>,
    /// Runs of this tenant.
    tenant: Option<String>,
    /// Runs with a delivery in this state, or `needs_attention` (failed or uncertain).
    #[param(value_type = Option<DeliveryFilter>)]
    delivery: Option<String>,
    /// Created at or after this instant (RFC 3339, or a `YYYY-MM-DD` day in UTC).
    created_from: Option<String>,
    /// Created before the end of this instant or day.
    created_to: Option<String>,
    /// Keyset cursor: the previous page's `next_cursor`.
    after: Option<String>,
    /// Runs a page (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
}

/// The runs list's `status` parameter in the OpenAPI document: a state, or empty
/// for any (what a form's "any" sends).
pub struct RunStatusFilter;

impl utoipa::PartialSchema for RunStatusFilter {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let mut values = vec![""];
        values.extend(RunStatus::ALL.iter().map(|status| status.as_str()));
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(values))
            .description(Some("A run state, or empty for any"))
            .into()
    }
}

impl utoipa::ToSchema for RunStatusFilter {
    fn name() -> std::borrow::Cow<'static, str> {
        "RunStatusFilter".into()
    }
}

#[utoipa::path(
    get, path = "/api/v1/runs", tag = "runs",
    description = "Runs, newest first, keyset-paged, with every status's count. Needs `runs:read`.",
    params(ListParams),
    responses((status = 200, description = "One page of runs", body = RunPage))
)]
async fn list_runs(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<RunPage>, ApiError> {
    let status = match params.status.as_deref() {
        None | Some("") => None,
        Some(value) => Some(RunStatus::parse(value).ok_or_else(|| {
            let known: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::invalid(
                "status",
                format!(
                    "status: unknown status {value:?}; expected one of {}",
                    known.join(", ")
                ),
            )
        })?),
    };
    if let Some(limit) = params.limit {
        if limit == 0 || limit > RunQuery::MAX_LIMIT {
            return Err(ApiError::invalid(
                "limit",
                format!("limit: must be 1 to {}", RunQuery::MAX_LIMIT),
            ));
        }
    }
    let delivery = match params.delivery.as_deref() {
        None | Some("") => None,
        Some(value) => Some(DeliveryFilter::parse(value).ok_or_else(|| {
            ApiError::invalid(
                "delivery",
                format!("delivery: unknown delivery state {value:?}; expected needs_attention or a state"),
            )
        })?),
    };
    let query = RunQuery {
        run_type: params.run_type,
        status,
        tenant: params.tenant,
        delivery,
        created_from: params.created_from,
        created_to: params.created_to,
        after: params.after,
        limit: params.limit,
    };
    Ok(Json(state.runs.list(viewer.as_ref(), query).await?))
}

/// `POST /api/v1/runs/{id}/transitions`; with an `Idempotency-Key`, a repeat
/// gets the original answer (`Idempotent-Replayed: true`).
#[utoipa::path(
    post, path = "/api/v1/runs/{id}/transitions", tag = "runs",
    description = "Moves a run and commits, in the same transaction, every notification the move owes. \
        Needs `runs:write` (`approvals:submit` too with an `approval` ask). Repeating a move to where \
        the run stands answers `replayed: true` and commits nothing.",
    params(("id" = String, Path, description = "The run's id"), IdempotencyKeyHeader),
    request_body = TransitionRequest,
    responses(
        (status = 200, description = "The run as moved, with the event ids committed", body = TransitionResponse,
            headers(("Idempotent-Replayed" = String, description = "`true` on a keyed repeat"))),
        (status = 404, description = "No such run, or no such approval definition", body = ErrorBody),
        (status = 409, description = "The move is illegal from the run's state (`current_status` says it)", body = ErrorBody),
        (status = 422, description = "The key was used with another request", body = ErrorBody),
    )
)]
async fn transition_run(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<TransitionRequest>,
) -> Result<Response, ApiError> {
    let Some(key) = key_of(&headers)? else {
        let moved = state.runs.transition(viewer.as_ref(), &id, body).await?;
        return Ok(Json::<TransitionResponse>(moved).into_response());
    };
    Ok(respond(
        state
            .runs
            .transition_once(viewer.as_ref(), &id, body, &key)
            .await?,
    ))
}

/// `200` with one result per item, in order: `{"status": 200, "run", "notifications",
/// "replayed"}` or `{"status": <its own code>, "error", "message", …}`. With an
/// `Idempotency-Key`, the whole batch and its answer commit together and a repeat
/// gets that answer (`Idempotent-Replayed: true`).
#[utoipa::path(
    post, path = "/api/v1/runs/transitions", tag = "runs",
    description = "Moves up to 500 runs in one request, each item with its own outcome and status. \
        Needs `runs:write`. With an `Idempotency-Key`, the moves and the answer commit together.",
    params(IdempotencyKeyHeader),
    request_body = BatchTransitions,
    responses(
        (status = 200, description = "One result per item, in order", body = BatchAnswer,
            headers(("Idempotent-Replayed" = String, description = "`true` on a keyed repeat"))),
        (status = 422, description = "The key was used with another request", body = ErrorBody),
    )
)]
async fn transition_runs(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    headers: HeaderMap,
    ApiJson(body): ApiJson<BatchTransitions>,
) -> Result<Response, ApiError> {
    let Some(key) = key_of(&headers)? else {
        let results = state.runs.transition_batch(viewer.as_ref(), body).await?;
        return Ok(Json(batch_answer(results)).into_response());
    };
    Ok(respond(
        state
            .runs
            .transition_batch_once(viewer.as_ref(), body, &key, batch_answer)
            .await?,
    ))
}

/// A batch's answer: each item's outcome, in order.
#[derive(Serialize, utoipa::ToSchema)]
pub struct BatchAnswer {
    results: Vec<BatchOutcome>,
}

/// One item's outcome: the move with status 200, or its error with its own status.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
enum BatchOutcome {
    Moved(Box<MovedItem>),
    Refused(RefusedItem),
}

#[derive(Serialize, utoipa::ToSchema)]
struct MovedItem {
    /// 200.
    status: u16,
    #[serde(flatten)]
    moved: TransitionResponse,
}

#[derive(Serialize, utoipa::ToSchema)]
struct RefusedItem {
    /// The status this item alone would have been answered with.
    status: u16,
    #[serde(flatten)]
    error: ErrorBody,
}

/// A batch's answer as JSON (what a keyed batch stores with its key).
fn batch_answer(results: Vec<Result<TransitionResponse, ServiceError>>) -> serde_json::Value {
    let results = results
        .into_iter()
        .map(|result| match result {
            Ok(moved) => BatchOutcome::Moved(Box::new(MovedItem {
                status: StatusCode::OK.as_u16(),
                moved,
            })),
            Err(err) => {
                let err = ApiError::from(err);
                BatchOutcome::Refused(RefusedItem {
                    status: err.status.as_u16(),
                    error: err.error_body(),
                })
            }
        })
        .collect();
    serde_json::to_value(BatchAnswer { results }).unwrap_or_default()
}

#[utoipa::path(
    get, path = "/api/v1/runs/{id}/deliveries", tag = "runs",
    description = "The run's deliveries (no payloads). Needs `runs:read`.",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "Its deliveries", body = Vec<DeliveryView>),
        (status = 404, description = "No such run", body = ErrorBody),
    )
)]
async fn run_deliveries(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(id): Path<String>,
) -> Result<Json<Vec<DeliveryView>>, ApiError> {
    Ok(Json(state.deliveries.for_run(viewer.as_ref(), &id).await?))
}
