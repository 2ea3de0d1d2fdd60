//! Ordered lanes as the console shows them (issue 22, docs/ORDERING.md): the lanes
//! whose head waits for an operator, and the operator's skip of a head.

use serde::{Deserialize, Serialize};

use super::deliveries::DeliveryView;
use vocab::DeliveryStatus;

/// The longest a skip's reason may be (it is kept in the audit trail).
pub const MAX_SKIP_REASON: usize = 500;

/// A lane whose head is `failed` or `uncertain`: nothing behind it moves until an
/// operator retries or skips the head.
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedLaneView {
    /// The lane's key, e.g. `route:<route>:tenant:<tenant>` (its SHA-256 when
    /// longer than 191 characters).
    pub lane: String,
    /// The head, redacted for the viewer as every delivery is.
    pub head: DeliveryView,
    /// Deliveries of the lane waiting behind the head.
    pub waiting: i64,
    /// Whether this viewer may retry or skip the head (`runs:write`).
    pub can_act: bool,
}

/// The blocked lanes of every store, longest blocked first.
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedLanes {
    pub lanes: Vec<BlockedLaneView>,
    /// Lanes with a delivery not yet completed or skipped, blocked or flowing
    /// (0: nothing ordered is in flight, and the console shows no panel).
    pub open_lanes: i64,
    /// More lanes are blocked than listed.
    pub more: bool,
    /// Why a store's lanes are missing (it could not be read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
}

/// What an operator's skip asks: the delivery, its kind, the state and cycle they
/// saw, and why (kept in the audit trail and as the delivery's last error).
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkipCommand {
    pub kind: String,
    pub expected_status: DeliveryStatus,
    /// The retry cycle the operator saw (the console always sends it).
    #[serde(default)]
    pub expected_cycle: Option<i64>,
    /// An `uncertain` one may never have arrived: skipping gives it up for good.
    #[serde(default)]
    pub allow_uncertain: bool,
    /// Why, in the operator's words (1 to 500 characters).
    pub reason: String,
}
