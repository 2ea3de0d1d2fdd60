//! The operators' audit trail.

use serde::{Deserialize, Serialize};

/// One row of the operators' audit trail.
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
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

#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    pub next_cursor: Option<String>,
    /// Why a store's rows are missing from this page (it could not be read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
}
