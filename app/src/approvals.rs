//! The Approvals page's data and server functions: approvals with their timeline
//! and events, the lifecycle buttons, and the failed-replay shelf. The server
//! implements [`ApprovalsPort`] over the same service layer as the JSON API, so
//! every permission check stays there.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// One approval in the list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRow {
    pub id: String,
    pub definition_id: String,
    pub definition_version: i64,
    pub object: String,
    pub record_id: String,
    pub status: String,
    pub step: i64,
    pub submitted_by: String,
    pub decided_by: Option<String>,
    pub updated_at: String,
}

/// One entry of an approval's timeline: a step's node or a work item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimelineEntry {
    pub what: String,
    pub status: String,
    pub who: Option<String>,
}

/// An event the approval owes (prompt, alert, replay), without its payload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalEventRow {
    pub event_id: String,
    pub kind: String,
    pub status: String,
    pub attempts: i64,
    pub last_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalDetailView {
    pub approval: ApprovalRow,
    pub timeline: Vec<TimelineEntry>,
    pub events: Vec<ApprovalEventRow>,
    /// Whether the viewer is the approver of the step it waits on.
    pub can_decide: bool,
    /// Whether the viewer may recall it (the submitter or an admin).
    pub can_recall: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailedReplayRow {
    pub event_id: String,
    pub approval_id: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub failed_at: Option<String>,
}

/// Replay rows by status and the failed ones (the operators' shelf).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayShelfView {
    pub counts: Vec<(String, i64)>,
    pub failed: Vec<FailedReplayRow>,
    pub can_retry: bool,
    /// Why there is no shelf on this store (no durable outbox), or `None`.
    #[serde(default)]
    pub unavailable: Option<String>,
}

#[cfg(feature = "ssr")]
pub mod port {
    use async_trait::async_trait;

    use super::{ApprovalDetailView, ApprovalRow, ReplayShelfView};
    use crate::dto::Viewer;
    use crate::port::ConsoleError;

    /// What the Approvals page needs from the server.
    #[async_trait]
    pub trait ApprovalsPort: Send + Sync + 'static {
        async fn list(&self, viewer: Option<&Viewer>) -> Result<Vec<ApprovalRow>, ConsoleError>;
        async fn detail(
            &self,
            viewer: Option<&Viewer>,
            id: &str,
        ) -> Result<ApprovalDetailView, ConsoleError>;
        /// `action` is `approve`, `reject` or `recall`.
        async fn act(
            &self,
            viewer: Option<&Viewer>,
            id: &str,
            action: &str,
        ) -> Result<ApprovalRow, ConsoleError>;
        async fn shelf(&self, viewer: Option<&Viewer>) -> Result<ReplayShelfView, ConsoleError>;
        async fn retry_replay(
            &self,
            viewer: Option<&Viewer>,
            event_id: &str,
        ) -> Result<(), ConsoleError>;
    }
}

#[cfg(feature = "ssr")]
mod server {
    use std::sync::Arc;

    use leptos::prelude::*;

    use super::port::ApprovalsPort;
    use crate::api::server::set_status;
    pub use crate::api::server::viewer;
    use crate::port::ConsoleError;

    pub fn port() -> Result<Arc<dyn ApprovalsPort>, ServerFnError> {
        use_context::<Arc<dyn ApprovalsPort>>()
            .ok_or_else(|| ServerFnError::new("approvals port missing from context"))
    }

    pub fn fail(err: ConsoleError) -> ServerFnError {
        set_status(err.status);
        ServerFnError::new(err.message)
    }
}

#[server(prefix = "/console-api", endpoint = "approvals")]
pub async fn list_approvals() -> Result<Vec<ApprovalRow>, ServerFnError> {
    let viewer = server::viewer();
    server::port()?
        .list(viewer.as_ref())
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "approval")]
pub async fn approval_detail(id: String) -> Result<ApprovalDetailView, ServerFnError> {
    let viewer = server::viewer();
    server::port()?
        .detail(viewer.as_ref(), &id)
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "approval-action")]
pub async fn act_on_approval(id: String, action: String) -> Result<ApprovalRow, ServerFnError> {
    let viewer = server::viewer();
    server::port()?
        .act(viewer.as_ref(), &id, &action)
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "replay-shelf")]
pub async fn replay_shelf() -> Result<ReplayShelfView, ServerFnError> {
    let viewer = server::viewer();
    server::port()?
        .shelf(viewer.as_ref())
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "replay-retry")]
pub async fn retry_replay(event_id: String) -> Result<(), ServerFnError> {
    let viewer = server::viewer();
    server::port()?
        .retry_replay(viewer.as_ref(), &event_id)
        .await
        .map_err(server::fail)
}
