//! Liveness and readiness probes.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::state::AppState;

/// How long readiness waits for the database before calling it unreachable.
const READY_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The process is up and serving.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

fn unavailable(store: &str, reason: String) -> (StatusCode, Json<Value>) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "status": "unavailable", "store": store, "reason": reason })),
    )
}

/// Ready when the outbox's stores answer its workers, and the database is reachable
/// and migrated; the answer lists the configuration's notices (`config_check`).
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    if let Some(outage) = state.store_health.iter().find_map(|h| h.outage()) {
        return unavailable(
            outage.fault.as_str(),
            format!(
                "store unavailable for {} s: {}; the outbox is backing off and resumes when it answers",
                outage.for_how_long.as_secs(),
                outage.fault.explain()
            ),
        );
    }
    match tokio::time::timeout(READY_CHECK_TIMEOUT, state.store.is_ready()).await {
        // Ready, with what the configuration keeps from working (a callback secret
        // that cannot be read): not a reason to take the node out of service.
        Ok(true) => (
            StatusCode::OK,
            Json(json!({
                "status": "ready",
                "notices": crate::config_check::config_notices(&state.settings),
            })),
        ),
        Ok(false) => unavailable(
            "not_ready",
            "database unreachable or not migrated".to_string(),
        ),
        Err(_) => unavailable(
            "unreachable",
            format!(
                "the database did not answer within {} s",
                READY_CHECK_TIMEOUT.as_secs()
            ),
        ),
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
