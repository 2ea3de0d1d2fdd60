//! Destination circuit breakers as operators see them.

use serde::{Deserialize, Serialize};

/// A destination's circuit breaker (issue 10), as operators see it.
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
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

/// The breaker panel: every destination's breaker, and the stores whose
/// breakers could not be read (the approvals database apart and out).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerList {
    pub breakers: Vec<BreakerView>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
}

/// What a manual close did.
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerClosed {
    pub destination: String,
    /// The state it was in.
    pub from_state: String,
    /// Waiting events made due now.
    pub released: u64,
}
