//! Keeps PostgreSQL's hot tables small (issue 9, item 3).
//!
//! Every claim, settle and transition rewrites a row of `outbox_events` or
//! `runs`; PostgreSQL leaves the old versions, and their index entries, until a
//! VACUUM removes them, and plans from statistics only ANALYZE refreshes.
//! Autovacuum does both, if it is on and in time: on a server where it is off
//! (as on this project's test machine), a backlog of 157,000 events after five
//! minutes of churn made each claim read 430,000 dead index entries and 38,000
//! heap pages (240 ms) through a plan chosen from empty statistics, and delivery
//! fell to 625 events/s of 1,500 offered (docs/BENCHMARKS.md). So maintenance vacuums them itself once
//! dead rows pass a threshold, one node at a time (an advisory lock).

use std::time::Instant;

use super::error::StoreError;
use super::ports::TableTidied;
use super::row::int;
use super::sql::SqlStore;

/// The tables every transition and delivery rewrites, and the attempt log,
/// which retention empties as fast as deliveries fill it: left to itself its
/// dead rows and stale statistics slow every retention chunk that joins it.
const HOT_TABLES: [&str; 3] = ["outbox_events", "runs", "outbox_attempts"];
/// Vacuum once dead rows (or rows changed since the last ANALYZE) pass this many
/// plus a tenth of the live ones.
const DEAD_ROWS_FLOOR: i64 = 10_000;
const DEAD_ROWS_SHARE: i64 = 10;

/// Whether a table with these statistics (dead rows, live rows, rows changed since
/// the last ANALYZE) is due a `VACUUM (ANALYZE)`: either count past the floor plus a
/// tenth of the live rows (in the manner of autovacuum's scale-factor trigger).
fn needs_tidy(dead: i64, live: i64, changed: i64) -> bool {
    let threshold = DEAD_ROWS_FLOOR + live / DEAD_ROWS_SHARE;
    dead >= threshold || changed >= threshold
}

impl SqlStore {
    pub(super) async fn tidy_postgres(&self) -> Result<Vec<TableTidied>, StoreError> {
        let mut tidied = Vec::new();
        for table in HOT_TABLES {
            let row = sqlx::query(
                "SELECT CAST(n_dead_tup AS BIGINT) AS dead, CAST(n_live_tup AS BIGINT) AS live, \
                 CAST(n_mod_since_analyze AS BIGINT) AS changed \
                 FROM pg_stat_user_tables WHERE relname = $1 AND schemaname = current_schema()",
            )
            .bind(table)
            .fetch_optional(&self.pool)
            .await?;
            let Some(row) = row else { continue };
            let (dead, live, changed) = (
                int(&row, "dead")?,
                int(&row, "live")?,
                int(&row, "changed")?,
            );
            if !needs_tidy(dead, live, changed) {
                continue;
            }
            // VACUUM cannot run in a transaction; the advisory lock is held by
            // this one connection, so one node vacuums and the others skip.
            let mut conn = self.pool.acquire().await?;
            let key = format!("herald:vacuum:{table}");
            let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))")
                .bind(&key)
                .fetch_one(&mut *conn)
                .await?;
            if !locked {
                continue;
            }
            let started = Instant::now();
            let vacuumed = sqlx::query(&format!("VACUUM (ANALYZE) {table}"))
                .execute(&mut *conn)
                .await;
            sqlx::query("SELECT pg_advisory_unlock(hashtext($1))")
                .bind(&key)
                .execute(&mut *conn)
                .await?;
            vacuumed?;
            tidied.push(TableTidied {
                table,
                dead_rows: dead,
                took: started.elapsed(),
            });
        }
        Ok(tidied)
    }
}

#[cfg(test)]
mod tests {
    use super::needs_tidy;

    #[test]
    fn a_table_is_tidied_once_dead_or_changed_rows_pass_the_floor_plus_a_tenth() {
        // An empty table: the floor alone.
        assert!(!needs_tidy(9_999, 0, 9_999));
        assert!(needs_tidy(10_000, 0, 0));
        assert!(needs_tidy(0, 0, 10_000));
        // 12,000 live rows raise the threshold to 11,200.
        assert!(!needs_tidy(11_199, 12_000, 0));
        assert!(needs_tidy(11_200, 12_000, 0));
        assert!(!needs_tidy(0, 12_000, 11_199));
        assert!(needs_tidy(0, 12_000, 11_200));
        // A large table: a tenth of it dominates.
        assert!(!needs_tidy(100_000, 1_000_000, 109_999));
        assert!(needs_tidy(110_000, 1_000_000, 0));
    }
}
