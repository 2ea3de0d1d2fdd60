//! Types shared by the server and the browser: roles, permissions, the signed-in
//! viewer, and the run views the console shows.

use serde::{Deserialize, Serialize};

/// What a principal may do (DESIGN §7). Checked in the server's service layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Permission {
    RunsRead,
    RunsWrite,
    UsersManage,
    DataRead,
    RecordsRead,
    RecordsWrite,
    ApprovalsSubmit,
    DefinitionsManage,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::RunsRead => "runs:read",
            Permission::RunsWrite => "runs:write",
            Permission::UsersManage => "users:manage",
            Permission::DataRead => "data:read",
            Permission::RecordsRead => "records:read",
            Permission::RecordsWrite => "records:write",
            Permission::ApprovalsSubmit => "approvals:submit",
            Permission::DefinitionsManage => "definitions:manage",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Reader,
    Operator,
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Reader, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(value: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == value)
    }

    pub fn permissions(self) -> &'static [Permission] {
        use Permission::*;
        match self {
            Role::Reader => &[RunsRead, RecordsRead],
            Role::Operator => &[
                RunsRead,
                RecordsRead,
                RunsWrite,
                RecordsWrite,
                ApprovalsSubmit,
            ],
            Role::Admin => &[
                RunsRead,
                RecordsRead,
                RunsWrite,
                RecordsWrite,
                ApprovalsSubmit,
                UsersManage,
                DefinitionsManage,
                DataRead,
            ],
        }
    }

    pub fn can(self, permission: Permission) -> bool {
        self.permissions().contains(&permission)
    }
}

/// Who is making a request: a signed-in user or an API token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    pub name: String,
    pub role: Role,
}

impl Viewer {
    pub fn can(&self, permission: Permission) -> bool {
        self.role.can(permission)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    AwaitingApproval,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::AwaitingApproval,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::AwaitingApproval => "awaiting_approval",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(value: &str) -> Option<RunStatus> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == value)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled
        )
    }

    /// The run lifecycle: terminal states are final; nothing returns to `queued`.
    pub fn can_transition_to(self, to: RunStatus) -> bool {
        use RunStatus::*;
        match (self, to) {
            (_, Queued) => false,
            (from, _) if from.is_terminal() => false,
            (Queued, _) => true,
            (Running, Running) => false,
            (Running, _) => true,
            (AwaitingApproval, AwaitingApproval) => false,
            (AwaitingApproval, _) => true,
            _ => false,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            RunStatus::Queued => "Queued",
            RunStatus::Running => "Running",
            RunStatus::AwaitingApproval => "Awaiting approval",
            RunStatus::Succeeded => "Succeeded",
            RunStatus::Failed => "Failed",
            RunStatus::Cancelled => "Cancelled",
        }
    }
}

/// A run as a reader may see it: no result snapshot, the callback reduced to its origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: String,
    pub run_type: String,
    pub tenant: String,
    pub status: RunStatus,
    pub callback_origin: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Its deliveries counted by state.
    pub deliveries: DeliveryCounts,
}

/// Filters and cursor of one page of the runs list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunQuery {
    pub run_type: Option<String>,
    pub status: Option<RunStatus>,
    pub tenant: Option<String>,
    /// Runs with at least one delivery in these states.
    pub delivery: Option<DeliveryFilter>,
    /// Created at or after this instant (RFC 3339, or a `YYYY-MM-DD` day in UTC).
    pub created_from: Option<String>,
    /// Created before the end of this instant or day.
    pub created_to: Option<String>,
    /// Keyset cursor: the id of the last run on the previous page.
    pub after: Option<String>,
    pub limit: Option<u32>,
}

impl RunQuery {
    pub const DEFAULT_LIMIT: u32 = 50;
    pub const MAX_LIMIT: u32 = 200;

    pub fn effective_limit(&self) -> u32 {
        self.limit
            .unwrap_or(Self::DEFAULT_LIMIT)
            .clamp(1, Self::MAX_LIMIT)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPage {
    pub runs: Vec<RunSummary>,
    /// Present when more runs follow this page.
    pub next_cursor: Option<String>,
    /// Every run type known to the store, for the filter.
    pub run_types: Vec<String>,
    /// Runs per status across the store, each counted up to
    /// [`STATUS_COUNT_CAP`] + 1 (more shows as "10,000+").
    #[serde(default)]
    pub status_counts: Vec<(RunStatus, i64)>,
}

/// Status chips count this many runs at most: an exact count of a million rows
/// would cost more than the page, and nobody acts on the difference.
pub const STATUS_COUNT_CAP: i64 = 10_000;

/// A chip's count as shown: `1,234` or `10,000+`.
pub fn format_count(count: i64) -> String {
    let capped = count > STATUS_COUNT_CAP;
    let digits = count.min(STATUS_COUNT_CAP).to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if capped {
        out.push('+');
    }
    out
}

/// Where an owed side effect (an outbox event) stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    Pending,
    Processing,
    Completed,
    Skipped,
    Failed,
    Uncertain,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 6] = [
        DeliveryStatus::Pending,
        DeliveryStatus::Processing,
        DeliveryStatus::Completed,
        DeliveryStatus::Skipped,
        DeliveryStatus::Failed,
        DeliveryStatus::Uncertain,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Processing => "processing",
            DeliveryStatus::Completed => "completed",
            DeliveryStatus::Skipped => "skipped",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Uncertain => "uncertain",
        }
    }

    pub fn parse(value: &str) -> Option<DeliveryStatus> {
        DeliveryStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == value)
    }
}

impl DeliveryStatus {
    pub fn label(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "Pending",
            DeliveryStatus::Processing => "Processing",
            DeliveryStatus::Completed => "Completed",
            DeliveryStatus::Skipped => "Skipped",
            DeliveryStatus::Failed => "Failed",
            DeliveryStatus::Uncertain => "Uncertain",
        }
    }

    /// How much a state needs an operator: the worst state of a run's deliveries is
    /// the one its badge shows.
    pub fn severity(self) -> u8 {
        match self {
            DeliveryStatus::Completed => 0,
            DeliveryStatus::Skipped => 1,
            DeliveryStatus::Pending | DeliveryStatus::Processing => 2,
            DeliveryStatus::Failed => 3,
            DeliveryStatus::Uncertain => 4,
        }
    }

    /// The states an operator may retry from.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            DeliveryStatus::Failed | DeliveryStatus::Skipped | DeliveryStatus::Uncertain
        )
    }
}

/// Which deliveries a list is narrowed to: one state, or every run or event that
/// needs an operator (any `failed` or `uncertain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryFilter {
    NeedsAttention,
    State(DeliveryStatus),
}

impl DeliveryFilter {
    pub const NEEDS_ATTENTION: &'static str = "needs_attention";

    pub fn parse(value: &str) -> Option<DeliveryFilter> {
        if value == Self::NEEDS_ATTENTION {
            Some(DeliveryFilter::NeedsAttention)
        } else {
            DeliveryStatus::parse(value).map(DeliveryFilter::State)
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryFilter::NeedsAttention => Self::NEEDS_ATTENTION,
            DeliveryFilter::State(status) => status.as_str(),
        }
    }

    /// The states this filter matches.
    pub fn states(self) -> Vec<DeliveryStatus> {
        match self {
            DeliveryFilter::NeedsAttention => {
                vec![DeliveryStatus::Failed, DeliveryStatus::Uncertain]
            }
            DeliveryFilter::State(status) => vec![status],
        }
    }
}

/// A run's deliveries counted by state (the Runs page's summary column).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryCounts {
    pub completed: i64,
    /// `pending` and `processing` together.
    pub in_flight: i64,
    pub failed: i64,
    pub uncertain: i64,
    pub skipped: i64,
    /// The state that most needs an operator, if the run has any delivery.
    pub worst: Option<DeliveryStatus>,
}

impl DeliveryCounts {
    pub fn add(&mut self, status: DeliveryStatus, count: i64) {
        match status {
            DeliveryStatus::Completed => self.completed += count,
            DeliveryStatus::Pending | DeliveryStatus::Processing => self.in_flight += count,
            DeliveryStatus::Failed => self.failed += count,
            DeliveryStatus::Uncertain => self.uncertain += count,
            DeliveryStatus::Skipped => self.skipped += count,
        }
        if count > 0 && self.worst.is_none_or(|w| status.severity() > w.severity()) {
            self.worst = Some(status);
        }
    }

    pub fn total(&self) -> i64 {
        self.completed + self.in_flight + self.failed + self.uncertain + self.skipped
    }
}

/// One outbox event as every reader may see it: no payload, the destination reduced
/// to its origin, no secret reference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryView {
    pub event_id: String,
    pub kind: String,
    pub source: String,
    pub parent_type: String,
    pub parent_id: String,
    /// `webhook`, `chat`, … when the payload names one.
    pub channel: Option<String>,
    /// `scheme://host[:port]` of the destination, when it has a URL.
    pub destination: Option<String>,
    pub status: DeliveryStatus,
    /// Sending attempts over every cycle.
    pub attempts: i64,
    pub cycle: i64,
    /// Attempts of the current cycle, of `max_attempts`.
    pub cycle_attempts: i64,
    pub max_attempts: i64,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    /// When the next attempt is due (pending events only).
    pub next_attempt_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub completed_at: Option<String>,
    pub failed_at: Option<String>,
    pub uncertain_at: Option<String>,
    pub dead_letter_id: Option<String>,
}

/// Filters and cursor of the outbox listing (the admin API's query parameters and
/// the Deliveries page's URL).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryQuery {
    pub kind: Option<String>,
    /// A state, or `needs_attention` (failed or uncertain).
    pub status: Option<String>,
    pub source: Option<String>,
    /// `<parent type>:<parent id>`, e.g. `run:0193…`.
    pub parent: Option<String>,
    /// Created at or after this instant (RFC 3339, or a `YYYY-MM-DD` day in UTC).
    pub created_from: Option<String>,
    /// Created before the end of this instant or day.
    pub created_to: Option<String>,
    pub after: Option<String>,
    pub limit: Option<u32>,
}

/// What a bulk retry of everything matching a filter would touch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkPreview {
    /// Retryable deliveries matching (failed, skipped, and uncertain ones), up to
    /// the cap plus one.
    pub matching: u32,
    /// How many of them are `uncertain` (retried only with the acknowledgement).
    pub uncertain: u32,
    /// More match than one action retries; the rest need another action.
    pub capped: bool,
    /// The most one action retries.
    pub cap: u32,
}

/// What a bulk retry did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkOutcome {
    pub retried: u32,
    /// Deliveries that changed between listing and retrying: left alone.
    pub changed: u32,
    pub capped: bool,
}

/// One page of the outbox listing, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryPage {
    pub events: Vec<DeliveryView>,
    /// Present when more events follow this page.
    pub next_cursor: Option<String>,
}

/// One attempt of the attempt log: no payloads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptView {
    pub attempt: i64,
    pub cycle: i64,
    pub started_at: String,
    pub duration_ms: i64,
    /// `completed`, `retry`, `failed`, `exhausted`, `skipped`, `uncertain`.
    pub outcome: String,
    pub status_code: Option<i64>,
    pub error: Option<String>,
}

/// A delivery on the run detail page, with its attempt timeline and whether this
/// viewer may retry it (decided by the server).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryDetail {
    pub delivery: DeliveryView,
    pub timeline: Vec<AttemptView>,
    pub can_retry: bool,
}

/// A run's facts as this viewer may see them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFacts {
    pub id: String,
    pub run_type: String,
    pub tenant: String,
    pub status: RunStatus,
    pub callback_origin: Option<String>,
    /// Only with `data:read`.
    pub callback_url: Option<String>,
    /// The result snapshot as pretty JSON; only with `data:read`.
    pub result: Option<String>,
    pub routes: Vec<String>,
    pub transition_seq: i64,
    pub created_at: String,
    pub updated_at: String,
}

/// The run detail page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunView {
    pub run: RunFacts,
    pub deliveries: Vec<DeliveryDetail>,
    /// Why deliveries cannot be shown (a store without a durable outbox), or
    /// `None` when they are kept.
    #[serde(default)]
    pub deliveries_unavailable: Option<String>,
}

/// What an operator's retry asks: the delivery, its kind and the state they saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryCommand {
    pub event_id: String,
    pub kind: String,
    pub expected_status: DeliveryStatus,
    /// The operator acknowledged the duplicate risk of an `uncertain` delivery.
    pub allow_uncertain: bool,
}

/// One row of the operators' audit trail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: String,
    /// The delivery, or for a bulk retry the filter it covered.
    pub event_id: String,
    /// `retry` or `bulk_retry`.
    pub action: String,
    pub actor: String,
    pub from_status: String,
    pub acknowledged_duplicate_risk: bool,
    /// Deliveries the action retried (1 for a single retry).
    pub affected: i64,
    pub at: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    pub next_cursor: Option<String>,
}

/// A destination's circuit breaker (issue 10), as operators see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerView {
    /// The destination's origin (`scheme://host:port`: no path, query or secret).
    pub destination: String,
    /// The configured route name, or `callback`.
    pub route: String,
    /// `open`, `half_open` or `closed`.
    pub state: String,
    /// Consecutive failures that opened it.
    pub failures: i64,
    pub opened_at: Option<String>,
    /// When the half-open probe is due.
    pub probe_at: Option<String>,
}

/// What a manual close did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerClosed {
    pub destination: String,
    /// The state it was in.
    pub from_state: String,
    /// Waiting events made due now.
    pub released: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chip_counts_are_grouped_and_capped() {
        assert_eq!(format_count(0), "0");
        assert_eq!(format_count(999), "999");
        assert_eq!(format_count(3021), "3,021");
        assert_eq!(format_count(STATUS_COUNT_CAP), "10,000");
        assert_eq!(format_count(STATUS_COUNT_CAP + 1), "10,000+");
    }

    #[test]
    fn the_worst_state_is_the_one_that_most_needs_an_operator() {
        let mut counts = DeliveryCounts::default();
        assert_eq!(counts.worst, None);
        counts.add(DeliveryStatus::Completed, 3);
        counts.add(DeliveryStatus::Pending, 1);
        counts.add(DeliveryStatus::Processing, 2);
        assert_eq!(counts.worst, Some(DeliveryStatus::Pending));
        counts.add(DeliveryStatus::Failed, 1);
        counts.add(DeliveryStatus::Skipped, 1);
        assert_eq!(counts.worst, Some(DeliveryStatus::Failed));
        counts.add(DeliveryStatus::Uncertain, 1);
        assert_eq!(counts.worst, Some(DeliveryStatus::Uncertain));
        counts.add(DeliveryStatus::Failed, 0);
        assert_eq!(counts.worst, Some(DeliveryStatus::Uncertain));
        assert_eq!(
            (counts.completed, counts.in_flight, counts.total()),
            (3, 3, 9)
        );
    }

    #[test]
    fn delivery_filters_parse_needs_attention_or_one_state() {
        assert_eq!(
            DeliveryFilter::parse("needs_attention").map(DeliveryFilter::states),
            Some(vec![DeliveryStatus::Failed, DeliveryStatus::Uncertain])
        );
        assert_eq!(
            DeliveryFilter::parse("skipped"),
            Some(DeliveryFilter::State(DeliveryStatus::Skipped))
        );
        assert_eq!(DeliveryFilter::parse("sideways"), None);
        for status in DeliveryStatus::ALL {
            assert_eq!(
                DeliveryFilter::parse(status.as_str()).map(DeliveryFilter::as_str),
                Some(status.as_str())
            );
            assert_eq!(
                status.is_retryable(),
                matches!(
                    status,
                    DeliveryStatus::Failed | DeliveryStatus::Skipped | DeliveryStatus::Uncertain
                )
            );
        }
    }
}
