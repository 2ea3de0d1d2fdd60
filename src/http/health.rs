//! Liveness and readiness probes.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::state::AppState;
use crate::outbox::availability::StoreHealth;

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

/// One store the outbox's workers found out, naming the sources it holds.
fn outage_of(health: &StoreHealth) -> Option<Value> {
    let outage = health.outage()?;
    Some(json!({
        "sources": health.sources(),
        "fault": outage.fault.as_str(),
        "reason": format!(
            "store unavailable for {} s (the {} store): {}; its outbox is backing off and resumes when it answers",
            outage.for_how_long.as_secs(),
            health.sources().join(" and "),
            outage.fault.explain()
        ),
    }))
}

/// Ready when the outbox's stores answer its workers, and the database is reachable
/// and migrated; the answer lists the configuration's notices (`config_check`).
/// Each store out is named by the sources it holds: the jobs store out takes the
/// node out of service (503); the approvals database apart and out leaves it ready
/// but `degraded` (runs keep flowing; approvals wait), so a load balancer does not
/// drop every node for a database they all share.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let mut degraded = Vec::new();
    for health in &state.store_health {
        let Some(outage) = outage_of(health) else {
            continue;
        };
        if health.sources().contains(&"jobs") {
            let fault = outage["fault"].as_str().unwrap_or_default().to_string();
            let (status, Json(mut body)) = unavailable(
                &fault,
                outage["reason"].as_str().unwrap_or_default().to_string(),
            );
            body["unavailable"] = json!([outage]);
            return (status, Json(body));
        }
        degraded.push(outage);
    }
    match tokio::time::timeout(READY_CHECK_TIMEOUT, state.store.is_ready()).await {
        // Ready, with what the configuration keeps from working (a callback secret
        // that cannot be read): not a reason to take the node out of service.
        Ok(true) => {
            let mut body = json!({
                "status": if degraded.is_empty() { "ready" } else { "degraded" },
                "notices": crate::config_check::config_notices(&state.settings),
            });
            if !degraded.is_empty() {
                body["unavailable"] = json!(degraded);
            }
            (StatusCode::OK, Json(body))
        }
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
