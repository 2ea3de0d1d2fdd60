//! The Approvals page's views: approvals with their timeline and events, and the
//! failed-replay shelf.

use serde::{Deserialize, Serialize};

/// The object a run approval names (its record id is the run's id).
pub use vocab::approvals::RUN_OBJECT;

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

impl ApprovalRow {
    /// The run it pauses, if it is a run approval.
    pub fn run_id(&self) -> Option<&str> {
        (self.object == RUN_OBJECT).then_some(self.record_id.as_str())
    }
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
    /// Its retry cycle, sent back with a retry (compared with its status).
    pub cycle: i64,
    pub last_error: Option<String>,
    pub failed_at: Option<String>,
}

/// Replay rows by status and the failed ones (the operators' shelf).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayShelfView {
    pub counts: Vec<(String, i64)>,
    /// Only for viewers with `data:read`; others see the counts.
    pub failed: Vec<FailedReplayRow>,
    /// Whether the viewer may see the failed rows at all.
    #[serde(default)]
    pub rows_visible: bool,
    pub can_retry: bool,
    /// Why there is no shelf on this store (no durable outbox), or `None`.
    #[serde(default)]
    pub unavailable: Option<String>,
}
