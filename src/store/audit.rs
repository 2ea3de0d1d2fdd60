//! The operators' audit trail's one insert, shared by every statement that
//! writes an audit row: in the transaction of the change it records, or alone.

use sqlx::Any;

use super::error::StoreError;
use super::ports::NewAuditEntry;
use super::sql::SqlStore;

impl SqlStore {
    /// Writes `entry` through `executor` (a transaction, to audit a change in the
    /// transaction that makes it).
    pub(super) async fn insert_audit<'e, E>(
        &self,
        executor: E,
        entry: &NewAuditEntry,
    ) -> Result<(), StoreError>
    where
        E: sqlx::Executor<'e, Database = Any>,
    {
        let sql = format!(
            "INSERT INTO outbox_audit (id, event_id, action, actor, from_status, acknowledged_duplicate_risk, affected, reason, at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, {})",
            self.engine.now_ms()
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(uuid::Uuid::now_v7().to_string())
            .bind(&entry.subject)
            .bind(&entry.action)
            .bind(&entry.actor)
            .bind(&entry.from_status)
            .bind(i64::from(entry.acknowledged_duplicate_risk))
            .bind(entry.affected)
            .bind(entry.reason.as_deref())
            .execute(executor)
            .await?;
        Ok(())
    }
}
