//! The outbox port's data: events to enqueue, events as claimed, and how an
//! attempt settles (re-exported as `outbox::model`).

use serde::Serialize;
use vocab::DeliveryStatus;

/// Which store owns an event (DESIGN §1). Fixed per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Jobs,
    Approvals,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Jobs => "jobs",
            Source::Approvals => "approvals",
        }
    }
}

pub const MAX_EVENT_ID_LEN: usize = 191;
/// Errors are bounded so a chatty receiver cannot bloat the store.
pub const MAX_ERROR_LEN: usize = 1000;

/// An owed side effect, written in the producer's transaction.
#[derive(Clone, Debug)]
pub struct NewEvent {
    /// Deterministic identity (DESIGN §2): enqueue is insert-if-absent on it.
    pub event_id: String,
    pub source: Source,
    pub kind: String,
    pub parent_type: String,
    pub parent_id: String,
    /// The frozen payload (JSON text).
    pub payload: String,
    /// Whether an expired in-flight lease may be delivered again. Native channels
    /// that cannot deduplicate are not: their expired leases become `uncertain`.
    pub redeliverable: bool,
    /// Sending attempts allowed per automatic cycle.
    pub max_attempts: u32,
    /// Delay before the first attempt, in milliseconds (0: due now).
    pub delay_ms: i64,
    /// The origin the event is sent to, filled by its planner (none: no
    /// destination's caps or breaker apply).
    pub destination: Option<String>,
    /// The W3C `traceparent` of the request that owed it (traces on), so its
    /// delivery continues that trace.
    pub trace_parent: Option<String>,
    /// The ordered lane it joins (docs/ORDERING.md): events of one lane are
    /// delivered one at a time, in the order their transactions committed.
    /// `None`: unordered.
    pub lane: Option<String>,
}

/// An event as a worker holds it under a lease.
#[derive(Clone, Debug)]
pub struct ClaimedEvent {
    pub event_id: String,
    pub source: String,
    pub kind: String,
    pub parent_type: String,
    pub parent_id: String,
    pub payload: String,
    pub redeliverable: bool,
    /// Cumulative attempts, including the one this claim started.
    pub attempts: i64,
    pub cycle: i64,
    /// Attempts in the current automatic cycle, including this one.
    pub cycle_attempts: i64,
    pub max_attempts: i64,
    pub lease_token: String,
    /// The origin stored with the event (see [`NewEvent::destination`]).
    pub destination: Option<String>,
    /// See [`NewEvent::trace_parent`].
    pub trace_parent: Option<String>,
    /// See [`NewEvent::lane`].
    pub lane: Option<String>,
}

/// A whole event row, for operators and tests.
#[derive(Clone, Debug, Serialize)]
pub struct EventRecord {
    pub event_id: String,
    pub source: String,
    pub kind: String,
    pub parent_type: String,
    pub parent_id: String,
    #[serde(skip)]
    pub payload: String,
    pub redeliverable: bool,
    pub status: DeliveryStatus,
    pub attempts: i64,
    pub cycle: i64,
    pub cycle_attempts: i64,
    pub max_attempts: i64,
    pub next_attempt_at: i64,
    pub lease_token: Option<String>,
    pub lease_holder: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub last_error: Option<String>,
    pub last_status_code: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub completed_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub alerted_at: Option<i64>,
    pub uncertain_at: Option<i64>,
    pub dead_letter_id: Option<String>,
}

/// One row of the attempt log.
#[derive(Clone, Debug, Serialize)]
pub struct AttemptRecord {
    pub attempt: i64,
    pub cycle: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub outcome: String,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    pub worker: String,
}

/// The state an attempt moves its event to.
#[derive(Clone, Debug, PartialEq)]
pub enum Settle {
    Completed,
    /// Back to `pending`, due after `delay_ms`.
    Retry {
        delay_ms: i64,
    },
    /// `failed`, with a dead letter; `exhausted` says whether the cycle ran out.
    Failed {
        exhausted: bool,
    },
    Skipped,
    Uncertain,
    /// Not attempted: its destination was at its in-flight cap or behind an open
    /// breaker. Back to `pending`, due after `delay_ms`, with the claim's attempt
    /// given back and nothing logged.
    Deferred {
        delay_ms: i64,
    },
}

impl Settle {
    pub fn outcome_label(&self) -> &'static str {
        match self {
            Settle::Completed => "completed",
            Settle::Retry { .. } => "retry",
            Settle::Failed { exhausted: true } => "exhausted",
            Settle::Failed { exhausted: false } => "failed",
            Settle::Skipped => "skipped",
            Settle::Uncertain => "uncertain",
            Settle::Deferred { .. } => "deferred",
        }
    }
}

/// A finished attempt, written under the lease that started it.
#[derive(Clone, Debug)]
pub struct Settlement {
    pub event_id: String,
    pub kind: String,
    pub lease_token: String,
    pub attempt: i64,
    pub cycle: i64,
    pub worker: String,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    pub settle: Settle,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    /// When this attempt fails the event: the notification of the operators' dead-letter
    /// route, enqueued in the same transaction as the failure.
    pub dead_letter_event: Option<NewEvent>,
    /// Whether the event is in a lane: completing or skipping it lets the lane's
    /// next event go, in the same transaction.
    pub laned: bool,
}

impl Settlement {
    /// Whether it lets its lane's next event go: a laned event completed or
    /// skipped (its lane membership is removed in the settle transaction).
    pub fn releases_lane(&self) -> bool {
        self.laned && matches!(self.settle, Settle::Completed | Settle::Skipped)
    }
}

/// An event that just ended `failed`, as a dead-letter notifier sees it (no payload).
#[derive(Clone, Debug)]
pub struct FailedEvent {
    pub event_id: String,
    pub kind: String,
    pub parent_type: String,
    pub parent_id: String,
    pub error: String,
    /// The retry cycle that failed: each failed cycle is its own notice.
    pub cycle: i64,
}

/// Builds the dead-letter notification of a failed event, if a route is configured.
pub type DeadLetterNotifier =
    std::sync::Arc<dyn Fn(&FailedEvent) -> Option<NewEvent> + Send + Sync>;

/// The dead letter of a failed event's `cycle` (DESIGN §2): a failure after a
/// manual retry is a failure of its own, kept beside the first, not over it.
pub fn dead_letter_id(event_id: &str, cycle: i64) -> String {
    format!("dead_letter_{event_id}_{cycle}")
}

/// The dead-letter notice of a failed event's `cycle`: a failure after a manual
/// retry is news again. It shares its dead letter's id (another table).
pub fn dead_letter_notice_id(event_id: &str, cycle: i64) -> String {
    dead_letter_id(event_id, cycle)
}

/// Cuts an error to [`MAX_ERROR_LEN`] bytes on a character boundary.
pub fn bound_error(error: &str) -> String {
    if error.len() <= MAX_ERROR_LEN {
        return error.to_string();
    }
    let mut end = MAX_ERROR_LEN;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &error[..end])
}

/// Why a manual retry was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RetryRefusal {
    #[error("event {0:?} not found")]
    NotFound(String),
    #[error("the event is {current}, not {expected}: it changed since you looked")]
    StatusChanged { current: String, expected: String },
    /// Still in the state seen, but in a later retry cycle: someone retried it (and
    /// it ended there again) since this operator looked.
    #[error("the event is {current} in retry cycle {current_cycle}, not cycle {expected_cycle}: it was retried since you looked")]
    CycleChanged {
        current: String,
        current_cycle: i64,
        expected_cycle: i64,
    },
    #[error("the event's kind is {current}, not {expected}")]
    KindMismatch { current: String, expected: String },
    #[error("a {0} event cannot be retried")]
    NotRetryable(String),
    #[error("the outcome of an uncertain delivery is unknown; retrying may deliver twice, so it needs allow_uncertain: true")]
    UncertainNeedsAcknowledgement,
    #[error("a {0} event cannot be skipped; only failed and uncertain ones can")]
    NotSkippable(String),
    #[error("the outcome of an uncertain delivery is unknown: the receiver may never have had it, and skipping gives it up for good, so it needs allow_uncertain: true")]
    SkipNeedsAcknowledgement,
    /// Skipped out of an ordered lane: the events behind it went on without it,
    /// so sending it now would be out of order (a FieldUpdate would write over
    /// the later values).
    #[error("the event was skipped out of its ordered lane {0}, and the events behind it went on without it: retrying it now would apply it out of order; send a new event instead (for a record's field, edit the record)")]
    SkippedOutOfLane(String),
}

/// Counts per source, kind and status, for metrics.
#[derive(Clone, Debug, Default)]
pub struct OutboxStats {
    pub rows: Vec<StatsRow>,
    /// The store's clock when the counts were taken.
    pub now_ms: i64,
    /// Whether the settled states (`completed`, `skipped`) were counted this time;
    /// when not, their gauges keep their last value.
    pub settled_counted: bool,
    /// Ordered lanes whose head is `failed` or `uncertain` (waiting for an
    /// operator), by the head's source and kind.
    pub blocked_lanes: Vec<BlockedLanes>,
}

/// The lanes of one source and kind blocked by a head an operator must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedLanes {
    pub source: String,
    pub kind: String,
    pub lanes: i64,
    /// When the longest-blocked head last changed (settled `failed` or `uncertain`).
    pub oldest_blocked_at: Option<i64>,
}

/// The `next_attempt_at` of a pending event behind its lane's head (9999-12-31):
/// never due, so claims do not scan it; it is made due when it heads its lane.
pub const LANE_PARKED_AT: i64 = 253_402_214_400_000;

/// A lane whose head waits for an operator (`failed` or `uncertain`).
#[derive(Clone, Debug)]
pub struct BlockedLane {
    pub lane: String,
    pub head: EventRecord,
    /// Events of the lane behind the head.
    pub waiting: i64,
}

/// States an event can still leave on its own or that wait for an operator: few
/// rows, counted on every maintenance pass from the status index.
pub const LIVE_STATES: [&str; 4] = ["pending", "processing", "failed", "uncertain"];
/// Settled states: most of the table, counted less often.
pub const SETTLED_STATES: [&str; 2] = ["completed", "skipped"];

#[derive(Clone, Debug)]
pub struct StatsRow {
    /// Empty for settled counts, which are grouped by kind only (each kind has one
    /// source) so that they come from the `(kind, status, …)` index alone.
    pub source: String,
    pub kind: String,
    pub status: String,
    pub count: i64,
    /// Oldest `created_at` among pending rows of this group.
    pub oldest_pending_created_at: Option<i64>,
    pub expired_leases: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_bounded_on_char_boundaries() {
        let long = "é".repeat(2000);
        let bounded = bound_error(&long);
        assert!(bounded.len() <= MAX_ERROR_LEN + '…'.len_utf8());
        assert!(bounded.ends_with('…'));
        assert_eq!(bound_error("short"), "short");
    }
}
