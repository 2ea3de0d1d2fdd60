//! The Runs page's and the run detail page's views: a run's summary and facts,
//! the runs list's query and page, and its status chips' counts.

use serde::{Deserialize, Serialize};

use vocab::{DeliveryFilter, RunStatus};

use super::deliveries::{DeliveryCounts, DeliveryDetail};

/// A run as a reader may see it: no result snapshot, the callback reduced to its origin.
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
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

#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
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
}
