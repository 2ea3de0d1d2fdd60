//! Run approvals (DESIGN §9): the two durable hops between the jobs store and the
//! approvals store, which may be different databases. Each hop is an outbox event
//! committed with the state that owes it; its handler applies it idempotently on
//! the other side (insert-if-absent, or an update guarded on the run's approval).

use serde::{Deserialize, Serialize};

/// The jobs kind that opens a run's approval in the approvals store.
pub const APPROVAL_REQUEST: &str = "approval_request";
/// The approvals kind that moves a run on once its approval is decided or recalled.
pub const RUN_CONTINUATION: &str = "run_continuation";

/// The approval a run's move to `awaiting_approval` opens: one per run and
/// transition, so a redelivered request opens nothing twice. It names the run's
/// transition sequence, so the run's approval id is also the guard its
/// continuation is applied under.
pub fn run_approval_id(run_id: &str, transition_seq: i64) -> String {
    format!("run-{run_id}-{transition_seq}")
}

/// The `approval_request` event's id.
pub fn approval_request_id(approval_id: &str) -> String {
    format!("approval_request_{approval_id}")
}

/// The `run_continuation` event's id: one per approval (it is decided or recalled
/// once).
pub fn continuation_id(approval_id: &str) -> String {
    format!("continuation_{approval_id}")
}

/// What the producer asks for with its move to `awaiting_approval`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAsk {
    pub definition_id: String,
}

/// The frozen payload of an `approval_request` event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRequest {
    pub approval_id: String,
    pub definition_id: String,
    /// The definition version checked when the run moved.
    pub definition_version: i64,
    pub run_id: String,
    pub run_type: String,
    pub tenant: String,
    /// Who moved the run (the approval's submitter: they may recall it).
    pub requested_by: String,
}

/// How a run approval ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunDecision {
    Approved,
    Rejected,
    Recalled,
}

impl RunDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            RunDecision::Approved => "approved",
            RunDecision::Rejected => "rejected",
            RunDecision::Recalled => "recalled",
        }
    }
}

/// The frozen payload of a `run_continuation` event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunContinuation {
    pub approval_id: String,
    pub run_id: String,
    pub decision: RunDecision,
    /// Who decided or recalled.
    pub by: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_ids_are_deterministic_from_the_run_and_its_transition() {
        let id = run_approval_id("r1", 3);
        assert_eq!(id, "run-r1-3");
        assert_ne!(id, run_approval_id("r1", 5));
        assert_eq!(approval_request_id(&id), "approval_request_run-r1-3");
        assert_eq!(continuation_id(&id), "continuation_run-r1-3");
    }
}
