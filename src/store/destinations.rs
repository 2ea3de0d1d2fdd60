//! The shared circuit-breaker table (`destination_breakers`) and the statements
//! that move a destination's waiting events with it.

use async_trait::async_trait;
use sqlx::any::AnyRow;

use super::error::StoreError;
use super::ports::{BreakerRecord, DestinationStore, NewAuditEntry, Transactions};
use super::row::{int, opt_int, text};
use super::sql::SqlStore;

const COLUMNS: &str =
    "destination, route, state, failures, open_ms, opened_at, probe_at, updated_at";

fn breaker_from_row(row: &AnyRow) -> Result<BreakerRecord, StoreError> {
    Ok(BreakerRecord {
        destination: text(row, "destination")?,
        route: text(row, "route")?,
        state: text(row, "state")?,
        failures: int(row, "failures")?,
        open_ms: int(row, "open_ms")?,
        opened_at: opt_int(row, "opened_at")?,
        probe_at: opt_int(row, "probe_at")?,
        updated_at: int(row, "updated_at")?,
    })
}

#[async_trait]
impl DestinationStore for SqlStore {
    async fn breakers(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM destination_breakers ORDER BY destination");
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(breaker_from_row).collect()
    }

    async fn unclosed_breakers(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM destination_breakers WHERE state <> 'closed' ORDER BY destination"
        );
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(breaker_from_row).collect()
    }

    async fn open_breaker(
        &self,
        destination: &str,
        route: &str,
        failures: i64,
        open_ms: i64,
    ) -> Result<BreakerRecord, StoreError> {
        let now = self.engine.now_ms();
        let mut tx = self.begin_write().await?;
        let sql = format!(
            "INSERT INTO destination_breakers ({COLUMNS}) VALUES (?, ?, 'open', ?, ?, {now}, {now} + ?, {now}) {}",
            self.engine.upsert_tail(
                "destination",
                &["route", "state", "failures", "open_ms", "opened_at", "probe_at", "updated_at"]
            )
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(destination)
            .bind(route)
            .bind(failures)
            .bind(open_ms)
            .bind(open_ms)
            .execute(&mut *tx)
            .await?;
        let sql = format!("SELECT {COLUMNS} FROM destination_breakers WHERE destination = ?");
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(destination)
            .fetch_one(&mut *tx)
            .await?;
        let record = breaker_from_row(&row)?;
        // Its waiting events wait for the probe, their attempts untouched.
        let sql = "UPDATE outbox_events SET next_attempt_at = ? \
                   WHERE destination = ? AND status = 'pending' AND next_attempt_at < ?";
        let probe_at = record.probe_at.unwrap_or_default();
        sqlx::query(&self.engine.sql(sql))
            .bind(probe_at)
            .bind(destination)
            .bind(probe_at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(record)
    }

    async fn start_probe(&self, destination: &str, stale_ms: i64) -> Result<bool, StoreError> {
        let now = self.engine.now_ms();
        let sql = format!(
            "UPDATE destination_breakers SET state = 'half_open', updated_at = {now} \
             WHERE destination = ? AND ((state = 'open' AND probe_at <= {now}) \
             OR (state = 'half_open' AND updated_at <= {now} - ?))"
        );
        Ok(sqlx::query(&self.engine.sql(&sql))
            .bind(destination)
            .bind(stale_ms)
            .execute(&self.pool)
            .await?
            .rows_affected()
            == 1)
    }

    async fn close_breaker(
        &self,
        destination: &str,
        audit: Option<&NewAuditEntry>,
    ) -> Result<Option<(String, u64)>, StoreError> {
        let now = self.engine.now_ms();
        let mut tx = self.begin_write().await?;
        let sql = format!(
            "SELECT state FROM destination_breakers WHERE destination = ?{}",
            self.engine.lock_rows()
        );
        let state = match sqlx::query(&self.engine.sql(&sql))
            .bind(destination)
            .fetch_optional(&mut *tx)
            .await?
        {
            Some(row) => text(&row, "state")?,
            None => return Ok(None),
        };
        if state == "closed" {
            return Ok(None);
        }
        let sql = format!(
            "UPDATE destination_breakers SET state = 'closed', failures = 0, probe_at = NULL, \
             updated_at = {now} WHERE destination = ?"
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(destination)
            .execute(&mut *tx)
            .await?;
        // What waited for the probe is due now (the destination answers again).
        let sql = format!(
            "UPDATE outbox_events SET next_attempt_at = {now} \
             WHERE destination = ? AND status = 'pending' AND next_attempt_at > {now}"
        );
        let released = sqlx::query(&self.engine.sql(&sql))
            .bind(destination)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if let Some(audit) = audit {
            let entry = NewAuditEntry {
                from_status: state.clone(),
                affected: released as i64,
                ..audit.clone()
            };
            self.insert_audit(&mut *tx, &entry).await?;
        }
        tx.commit().await?;
        Ok(Some((state, released)))
    }
}
