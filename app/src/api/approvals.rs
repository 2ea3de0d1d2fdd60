//! The Approvals page's server functions: approvals with their timeline and
//! events, the lifecycle buttons, and the failed-replay shelf. The server
//! implements [`ApprovalsPort`](crate::port::ApprovalsPort) over the same service
//! layer as the JSON API, so every permission check stays there.

use leptos::prelude::*;

use super::Failure;
use crate::dto::{ApprovalDetailView, ApprovalRow, ReplayShelfView};

#[cfg(feature = "ssr")]
mod server {
    use std::sync::Arc;

    use leptos::prelude::*;

    use crate::api::server::fail as failure;
    pub use crate::api::server::{from_port as fail, viewer};
    use crate::api::Failure;
    use crate::port::ApprovalsPort;

    pub fn port() -> Result<Arc<dyn ApprovalsPort>, Failure> {
        use_context::<Arc<dyn ApprovalsPort>>()
            .ok_or_else(|| failure(500, "approvals port missing from context"))
    }
}

#[server(prefix = "/console-api", endpoint = "approvals")]
pub async fn list_approvals() -> Result<Vec<ApprovalRow>, Failure> {
    let viewer = server::viewer();
    server::port()?
        .list(viewer.as_ref())
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "approval")]
pub async fn approval_detail(id: String) -> Result<ApprovalDetailView, Failure> {
    let viewer = server::viewer();
    server::port()?
        .detail(viewer.as_ref(), &id)
        .await
        .map_err(server::fail)
}

/// A run's approvals (DESIGN §9), newest first: the run page's approval panel.
#[server(prefix = "/console-api", endpoint = "run-approvals")]
pub async fn run_approvals(run_id: String) -> Result<Vec<ApprovalDetailView>, Failure> {
    let viewer = server::viewer();
    server::port()?
        .of_run(viewer.as_ref(), &run_id)
        .await
        .map_err(server::fail)
}

/// `key` names the decision the operator saw the buttons for
/// ([`decision_key`]): a second click, or a resend after a lost answer, gets the
/// first answer instead of deciding the next step.
#[server(prefix = "/console-api", endpoint = "approval-action")]
pub async fn act_on_approval(
    id: String,
    action: String,
    key: String,
) -> Result<ApprovalRow, Failure> {
    let viewer = server::viewer();
    server::port()?
        .act(viewer.as_ref(), &id, &action, &key)
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "replay-shelf")]
pub async fn replay_shelf() -> Result<ReplayShelfView, Failure> {
    let viewer = server::viewer();
    server::port()?
        .shelf(viewer.as_ref())
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "replay-retry")]
pub async fn retry_replay(event_id: String, expected_cycle: i64) -> Result<(), Failure> {
    let viewer = server::viewer();
    server::port()?
        .retry_replay(viewer.as_ref(), &event_id, expected_cycle)
        .await
        .map_err(server::fail)
}

/// The idempotency key of one decision as the operator saw it: this action on this
/// step of this approval (a legitimate second decision is on another step, or
/// another action).
pub fn decision_key(approval_id: &str, step: i64, action: &str) -> String {
    format!("console:{action}:{approval_id}:step-{step}")
}
