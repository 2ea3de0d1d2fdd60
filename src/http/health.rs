//! Liveness and readiness probes.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::AppState;

/// The process is up and serving.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The database is reachable and migrated.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    if state.store.is_ready().await {
        (StatusCode::OK, Json(json!({ "status": "ready" })))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(
                json!({ "status": "unavailable", "reason": "database unreachable or not migrated" }),
            ),
        )
    }
}

/// Prometheus text exposition.
pub async fn metrics(State(state): State<AppState>) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}
