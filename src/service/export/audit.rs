//! The audit trail's export (issue 23, item 4: the Audit page's Export): every
//! operator action of every store, newest first. Audit rows carry no payload and
//! no error text, so an export holds what the Audit page shows.

use std::sync::Arc;

use app::dto::AuditEntry;
use serde::{Deserialize, Serialize};

use super::{ExportFormat, RowPages, EXPORT_PAGE};
use crate::service::delivery_views::audit_entry;
use crate::service::ServiceError;
use crate::store::ports::DeliveryReads;

/// The Audit export's query: only its format (the page has no filters).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuditExportQuery {
    /// ndjson (the default) or csv
    #[serde(default)]
    pub format: Option<String>,
}

impl AuditExportQuery {
    pub fn format(&self) -> Result<ExportFormat, ServiceError> {
        ExportFormat::parse(self.format.as_deref())
    }
}

const COLUMNS: [&str; 9] = [
    "id",
    "event_id",
    "action",
    "actor",
    "from_status",
    "acknowledged_duplicate_risk",
    "affected",
    "at",
    "reason",
];

/// The audit rows of every store, merged by id (time-ordered UUIDs).
pub struct AuditRows {
    stores: Vec<Arc<dyn DeliveryReads>>,
    before_id: Option<String>,
}

impl AuditRows {
    pub fn new(stores: Vec<Arc<dyn DeliveryReads>>) -> Self {
        AuditRows {
            stores,
            before_id: None,
        }
    }
}

#[async_trait::async_trait]
impl RowPages for AuditRows {
    type Row = AuditEntry;

    fn columns(&self) -> Vec<&'static str> {
        COLUMNS.to_vec()
    }

    fn cells(&self, row: &AuditEntry) -> Vec<Option<String>> {
        [
            row.id.clone(),
            row.event_id.clone(),
            row.action.clone(),
            row.actor.clone(),
            row.from_status.clone(),
            row.acknowledged_duplicate_risk.to_string(),
            row.affected.to_string(),
            row.at.clone(),
        ]
        .into_iter()
        .map(Some)
        .chain([row.reason.clone()])
        .collect()
    }

    async fn next_rows(&mut self) -> Result<Vec<AuditEntry>, ServiceError> {
        let mut rows = Vec::new();
        for store in &self.stores {
            rows.extend(store.audit(self.before_id.as_deref(), EXPORT_PAGE).await?);
        }
        rows.sort_by(|a, b| b.id.cmp(&a.id));
        rows.truncate(EXPORT_PAGE as usize);
        if let Some(last) = rows.last() {
            self.before_id = Some(last.id.clone());
        }
        Ok(rows.into_iter().map(audit_entry).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_columns_are_the_json_lines_keys() {
        let row = AuditEntry {
            id: "a1".into(),
            event_id: "status=failed".into(),
            action: "bulk_retry".into(),
            actor: "operator".into(),
            from_status: "failed".into(),
            acknowledged_duplicate_risk: false,
            affected: 3,
            at: "2026-12-03T13:00:00.000Z".into(),
            reason: Some("the receiver retired this endpoint".into()),
        };
        super::super::assert_columns_are_the_json_keys(&AuditRows::new(Vec::new()), &row);
    }
}
