//! Deliveries (outbox events) as the console shows them: counts by state, the
//! listing with its query and page, attempt logs, retries one at a time and in bulk.

use serde::{Deserialize, Serialize};

use vocab::DeliveryStatus;

/// A run's deliveries counted by state (the Runs page's summary column).
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "ssr", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryQuery {
    pub kind: Option<String>,
    /// A state, or `needs_attention` (failed or uncertain).
    #[cfg_attr(feature = "ssr", param(value_type = Option<vocab::DeliveryFilter>))]
    pub status: Option<String>,
    pub source: Option<String>,
    /// `<parent type>:<parent id>`, e.g. `run:0193…`.
    pub parent: Option<String>,
    /// Created at or after this instant (RFC 3339, or a `YYYY-MM-DD` day in UTC).
    pub created_from: Option<String>,
    /// Created before the end of this instant or day.
    pub created_to: Option<String>,
    /// The destination's origin, e.g. `https://hooks.example.com`, or
    /// [`NO_DESTINATION`] for events without one.
    pub destination: Option<String>,
    /// The class of the last error, as a failure group names it.
    pub cause: Option<String>,
    pub after: Option<String>,
    #[cfg_attr(feature = "ssr", param(minimum = 1, maximum = 200))]
    pub limit: Option<u32>,
}

/// The `destination` filter's value for events that have none (field updates).
pub const NO_DESTINATION: &str = "none";

/// What a bulk retry of everything matching a filter would touch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkPreview {
    /// Retryable deliveries matching (failed, skipped, and uncertain ones), up to
    /// the cap plus one.
    pub matching: u32,
    /// How many of them are `uncertain` (retried only with the acknowledgement),
    /// up to the cap plus one.
    pub uncertain: u32,
    /// How many are retryable without the acknowledgement (failed and skipped),
    /// counted on their own up to the cap plus one: what a retry without
    /// `uncertain` ones would take (the two capped counts cannot be subtracted).
    pub without_uncertain: u32,
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
    /// Stores that could not be read: their deliveries were not retried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
}

/// One page of the outbox listing, newest first.
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryPage {
    pub events: Vec<DeliveryView>,
    /// Present when more events follow this page.
    pub next_cursor: Option<String>,
    /// With the approvals database apart: why a store's events are missing from
    /// this page (it could not be read), one line a store; empty when all are shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
}

/// Deliveries that need attention sharing a kind, source, destination and cause
/// (the class of their last error): one dead endpoint is one group, however
/// many of its deliveries failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureGroup {
    pub kind: String,
    pub source: String,
    pub destination: Option<String>,
    pub cause: String,
    pub count: i64,
    pub first_seen: String,
    pub last_seen: String,
}

/// The failure groups, largest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureGroups {
    pub groups: Vec<FailureGroup>,
    /// More groups exist than were listed.
    pub more: bool,
    /// Stores that could not be read: their failures are missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
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

/// What an operator's retry asks: the delivery, its kind and the state they saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryCommand {
    pub event_id: String,
    pub kind: String,
    pub expected_status: DeliveryStatus,
    /// The retry cycle the operator saw: a delivery someone else retried since is
    /// refused, even when it is back in the same state.
    pub expected_cycle: i64,
    /// The operator acknowledged the duplicate risk of an `uncertain` delivery.
    pub allow_uncertain: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
