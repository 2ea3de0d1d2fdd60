//! The JSON API's runs, version 1: create, list, read and move runs, and list a
//! run's deliveries.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use app::dto::{DeliveryView, RunPage, RunQuery};

use vocab::{DeliveryFilter, RunStatus};

use super::error::ApiError;
use super::extract::{ApiJson, ApiQuery, MaybeViewer};
use super::idempotency::{key_of, respond};
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

async fn get_run(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(id): Path<String>,
) -> Result<Json<RunDetail>, ApiError> {
    Ok(Json(state.runs.get(viewer.as_ref(), &id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    #[serde(rename = "type")]
    run_type: Option<String>,
    status: Option<String>,
    tenant: Option<String>,
    delivery: Option<String>,
    created_from: Option<String>,
    created_to: Option<String>,
    after: Option<String>,
    limit: Option<u32>,
}

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

/// A batch's answer: each item's outcome with its own status.
fn batch_answer(results: Vec<Result<TransitionResponse, ServiceError>>) -> serde_json::Value {
    let items: Vec<serde_json::Value> = results
        .into_iter()
        .map(|result| match result {
            Ok(moved) => {
                let mut item = serde_json::to_value(moved).unwrap_or_default();
                item["status"] = serde_json::json!(StatusCode::OK.as_u16());
                item
            }
            Err(err) => {
                let err = ApiError::from(err);
                let mut item = err.body();
                item["status"] = serde_json::json!(err.status.as_u16());
                item
            }
        })
        .collect();
    serde_json::json!({ "results": items })
}

async fn run_deliveries(
    State(state): State<AppState>,
    MaybeViewer(viewer): MaybeViewer,
    Path(id): Path<String>,
) -> Result<Json<Vec<DeliveryView>>, ApiError> {
    Ok(Json(state.deliveries.for_run(viewer.as_ref(), &id).await?))
}
