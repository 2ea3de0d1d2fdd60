//! The overview (issue 23, item 1): how delivery went over the last hour or day,
//! from the store's per-minute rollups. Counts and times only: no payload, no
//! error text.

use serde::{Deserialize, Serialize};

/// The span the overview covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverviewWindow {
    #[default]
    Hour,
    Day,
}

impl OverviewWindow {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "hour" => Some(OverviewWindow::Hour),
            "day" => Some(OverviewWindow::Day),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OverviewWindow::Hour => "hour",
            OverviewWindow::Day => "day",
        }
    }

    /// Minutes covered.
    pub fn minutes(self) -> i64 {
        match self {
            OverviewWindow::Hour => 60,
            OverviewWindow::Day => 24 * 60,
        }
    }

    /// Minutes one bar of the charts stands for: 60 bars an hour, 96 a day.
    pub fn bin_minutes(self) -> i64 {
        match self {
            OverviewWindow::Hour => 1,
            OverviewWindow::Day => 15,
        }
    }
}

/// What the overview is asked for: a window and, optionally, one source or kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewQuery {
    pub window: OverviewWindow,
    pub source: Option<String>,
    pub kind: Option<String>,
}

/// One bar of the charts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewPoint {
    /// The bar's first minute (epoch ms) and its label (`HH:MM`, UTC).
    pub start_ms: i64,
    pub label: String,
    pub completed: i64,
    pub failed: i64,
    pub uncertain: i64,
    /// Commit → delivery of the completed ones, when there were any.
    pub p50_ms: Option<i64>,
    pub p99_ms: Option<i64>,
    /// Pending and in flight: the most sampled in the bar (per store, added up).
    pub backlog: i64,
}

/// A destination that failed deliveries in the window (open breakers come from
/// the breaker list).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationFailures {
    /// Its origin, [`super::NO_DESTINATION`] for deliveries without one, or
    /// [`vocab::OTHER_DESTINATIONS`] for those past the most failing few of a minute.
    pub destination: String,
    pub failed: i64,
    pub uncertain: i64,
}

/// The overview of one window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewView {
    pub query: OverviewQuery,
    /// The choices of the source and kind filters (what the window holds).
    pub sources: Vec<String>,
    pub kinds: Vec<String>,
    pub points: Vec<OverviewPoint>,
    pub completed: i64,
    pub failed: i64,
    pub uncertain: i64,
    pub skipped: i64,
    pub p50_ms: Option<i64>,
    pub p99_ms: Option<i64>,
    /// The backlog as last sampled, and how long its oldest delivery has waited.
    pub backlog: i64,
    pub oldest_pending_ms: Option<i64>,
    /// The minute of the newest recount (`HH:MM` UTC), if any in the window.
    pub as_of: Option<String>,
    /// The destinations with the most failed and uncertain deliveries, most first.
    pub destinations: Vec<DestinationFailures>,
    /// Stores that could not be read: their figures are missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
}
