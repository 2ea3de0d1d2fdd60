//! The operators' audit trail.

use serde::{Deserialize, Serialize};

/// One row of the operators' audit trail.
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: String,
    /// The delivery; for a bulk retry the filter it covered; for a breaker close
    /// its destination; for an account change the user or token.
    pub event_id: String,
    /// `retry`, `bulk_retry`, `skip`, `close_breaker`, or an account change: `add_user`,
    /// `change_role`, `disable_user`, `enable_user`, `reset_password`,
    /// `create_token`, `revoke_token`.
    pub action: String,
    pub actor: String,
    pub from_status: String,
    pub acknowledged_duplicate_risk: bool,
    /// Deliveries the action retried (1 for a single retry).
    pub affected: i64,
    pub at: String,
    /// Why, in the operator's words: a skipped delivery's reason.
    #[serde(default)]
    pub reason: Option<String>,
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
