//! The retention pass's SQL (issue 21): rows past their retention removed in
//! bounded chunks, each chunk one transaction that first locks its rows, hands
//! them (and their attempt logs and dead letters) to the archive when there is
//! one, and deletes them; and the lease that lets one node at a time do it.
//!
//! A chunk is chosen through an index: settled events by `(status,
//! next_attempt_at)` (a settled event's last due time is never later than its
//! last change, so the index bounds the scan and `updated_at` decides), runs by
//! `created_at`, audit rows by `at`, keys by `created_at`.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Row;
use vocab::DeliveryStatus;

use super::engine::{padded, padded_len};
use super::error::StoreError;
use super::ports::{ArchiveSink, ChunkRemoved, Expired, KindScope, RetentionStore, WriteTx};
use super::row::{opt_int, opt_text};
use super::sql::SqlStore;

/// A column's type as archived: integers stay numbers, everything else is text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    Int,
    Text,
}

/// A table the retention pass removes rows from, as its archive files hold them.
#[derive(Debug)]
pub struct TableShape {
    pub name: &'static str,
    /// The primary key's columns.
    pub key: &'static [&'static str],
    pub columns: &'static [(&'static str, ColumnType)],
}

use ColumnType::{Int, Text};

pub const OUTBOX_EVENTS: TableShape = TableShape {
    name: "outbox_events",
    key: &["event_id"],
    columns: &[
        ("event_id", Text),
        ("source", Text),
        ("kind", Text),
        ("parent_type", Text),
        ("parent_id", Text),
        ("payload", Text),
        ("redeliverable", Int),
        ("status", Text),
        ("attempts", Int),
        ("cycle", Int),
        ("cycle_attempts", Int),
        ("max_attempts", Int),
        ("next_attempt_at", Int),
        ("lease_token", Text),
        ("lease_holder", Text),
        ("lease_expires_at", Int),
        ("last_error", Text),
        ("last_status_code", Int),
        ("created_at", Int),
        ("updated_at", Int),
        ("completed_at", Int),
        ("failed_at", Int),
        ("alerted_at", Int),
        ("uncertain_at", Int),
        ("dead_letter_id", Text),
        ("destination", Text),
        ("trace_parent", Text),
        ("lane", Text),
    ],
};

/// An event's place in its ordered lane (docs/ORDERING.md): it goes with the
/// event, so an event removed by retention (a failed one past
/// `retention.failed`) no longer holds its lane.
pub const LANE_MEMBERS: TableShape = TableShape {
    name: "lane_members",
    key: &["lane", "seq"],
    columns: &[("lane", Text), ("seq", Int), ("event_id", Text)],
};

pub const OUTBOX_ATTEMPTS: TableShape = TableShape {
    name: "outbox_attempts",
    key: &["event_id", "attempt"],
    columns: &[
        ("event_id", Text),
        ("attempt", Int),
        ("cycle", Int),
        ("started_at", Int),
        ("finished_at", Int),
        ("outcome", Text),
        ("status_code", Int),
        ("error", Text),
        ("worker", Text),
    ],
};

pub const OUTBOX_DEAD_LETTERS: TableShape = TableShape {
    name: "outbox_dead_letters",
    key: &["id"],
    columns: &[
        ("id", Text),
        ("event_id", Text),
        ("cycle", Int),
        ("kind", Text),
        ("reason", Text),
        ("created_at", Int),
    ],
};

pub const OUTBOX_AUDIT: TableShape = TableShape {
    name: "outbox_audit",
    key: &["id"],
    columns: &[
        ("id", Text),
        ("event_id", Text),
        ("action", Text),
        ("actor", Text),
        ("from_status", Text),
        ("acknowledged_duplicate_risk", Int),
        ("affected", Int),
        ("at", Int),
        ("reason", Text),
    ],
};

pub const RUNS: TableShape = TableShape {
    name: "runs",
    key: &["id"],
    columns: &[
        ("id", Text),
        ("run_type", Text),
        ("tenant", Text),
        ("status", Text),
        ("callback_url", Text),
        ("result", Text),
        ("transition_seq", Int),
        ("created_at", Int),
        ("updated_at", Int),
        ("routes", Text),
        ("approval_id", Text),
    ],
};

pub const IDEMPOTENCY_KEYS: TableShape = TableShape {
    name: "idempotency_keys",
    key: &["principal", "idem_key"],
    columns: &[
        ("principal", Text),
        ("idem_key", Text),
        ("operation", Text),
        ("request_hash", Text),
        ("claim", Text),
        ("status", Int),
        ("body", Text),
        ("created_at", Int),
    ],
};

/// Every table an archive file may hold.
pub const ARCHIVED_TABLES: [&TableShape; 6] = [
    &OUTBOX_EVENTS,
    &OUTBOX_ATTEMPTS,
    &OUTBOX_DEAD_LETTERS,
    &LANE_MEMBERS,
    &OUTBOX_AUDIT,
    &RUNS,
];

impl TableShape {
    fn column_list(&self) -> String {
        self.columns
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A row as one JSON object of every column (NULL as null).
    fn to_json(&self, row: &AnyRow) -> Result<serde_json::Value, StoreError> {
        row_to_json(row, self.columns)
    }
}

/// A row as one JSON object of `columns` (NULL as null).
fn row_to_json(
    row: &AnyRow,
    columns: &[(&'static str, ColumnType)],
) -> Result<serde_json::Value, StoreError> {
    let mut object = serde_json::Map::with_capacity(columns.len());
    for (name, ty) in columns {
        let value = match ty {
            Int => opt_int(row, name)?.map(serde_json::Value::from),
            Text => opt_text(row, name)?.map(serde_json::Value::from),
        };
        object.insert(
            (*name).to_string(),
            value.unwrap_or(serde_json::Value::Null),
        );
    }
    Ok(serde_json::Value::Object(object))
}

/// The chunk select's column of each row's age (ms, by the store's clock).
const ROW_AGE: &str = "chunk_row_age_ms";

/// A value bound to a chunk's query.
enum Bind {
    Int(i64),
    Text(String),
}

/// How one kind of [`Expired`] chooses its rows.
struct ChunkPlan {
    table: &'static TableShape,
    /// `WHERE` conditions, with `?` for `binds` in order.
    filter: String,
    binds: Vec<Bind>,
    order: &'static str,
    /// The column the retention counts from (`ChunkRemoved::youngest_age_ms`).
    age_column: &'static str,
    /// Tables whose rows go with a removed row, by its `event_id`.
    children: &'static [&'static TableShape],
    archived: bool,
    /// The columns besides the key that the chunk itself reads of its rows (an
    /// event's run, for the runs it frees).
    reads: &'static [&'static str],
}

type ChunkQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

impl ChunkPlan {
    /// The columns the chunk selects: every one when its rows go to the archive,
    /// else only the key and [`ChunkPlan::reads`]. A payload is not read only to
    /// be deleted: it can be most of a row, and the chunk holds the writer.
    fn columns(&self, archiving: bool) -> Vec<(&'static str, ColumnType)> {
        self.table
            .columns
            .iter()
            .filter(|(name, _)| {
                archiving || self.table.key.contains(name) || self.reads.contains(name)
            })
            .copied()
            .collect()
    }

    /// `query` with this plan's binds, then the chunk size (then the binds again
    /// when the filter is tested twice: `keys_first`).
    fn bind<'q>(&self, query: ChunkQuery<'q>, limit: u32, keys_first: bool) -> ChunkQuery<'q> {
        let query = self.bind_filter(query).bind(i64::from(limit));
        if keys_first {
            self.bind_filter(query)
        } else {
            query
        }
    }

    fn bind_filter<'q>(&self, mut query: ChunkQuery<'q>) -> ChunkQuery<'q> {
        for bind in &self.binds {
            query = match bind {
                Bind::Int(v) => query.bind(*v),
                Bind::Text(v) => query.bind(v.clone()),
            };
        }
        query
    }
}

impl SqlStore {
    /// Whether `plan`'s chunk picks its keys first, then its rows
    /// ([`super::engine::Engine::sorts_keys_before_rows`]; single-column keys).
    fn keys_first(&self, plan: &ChunkPlan) -> bool {
        self.engine.sorts_keys_before_rows() && plan.table.key.len() == 1
    }

    /// `query` (a [`SqlStore::chunk_select`] of `plan`) with its binds.
    fn bind_chunk<'q>(
        &self,
        plan: &ChunkPlan,
        query: ChunkQuery<'q>,
        limit: u32,
    ) -> ChunkQuery<'q> {
        plan.bind(query, limit, self.keys_first(plan))
    }

    fn chunk_plan(&self, expired: &Expired) -> ChunkPlan {
        let now = self.engine.now_ms();
        match expired {
            Expired::Events {
                status,
                kinds,
                older_than_ms,
                ..
            } => {
                let mut filter = format!(
                    "status = ? AND next_attempt_at < {now} - ? AND updated_at < {now} - ?"
                );
                let mut binds = vec![
                    Bind::Text(status.as_str().to_string()),
                    Bind::Int(*older_than_ms),
                    Bind::Int(*older_than_ms),
                ];
                match kinds {
                    KindScope::Only(kind) => {
                        filter.push_str(" AND kind = ?");
                        binds.push(Bind::Text(kind.clone()));
                    }
                    KindScope::AllBut(kinds) if !kinds.is_empty() => {
                        filter.push_str(&format!(
                            " AND kind NOT IN ({})",
                            super::engine::placeholders(kinds.len())
                        ));
                        binds.extend(kinds.iter().cloned().map(Bind::Text));
                    }
                    KindScope::AllBut(_) => {}
                }
                ChunkPlan {
                    table: &OUTBOX_EVENTS,
                    filter,
                    binds,
                    order: "next_attempt_at",
                    age_column: "updated_at",
                    children: &[&OUTBOX_ATTEMPTS, &OUTBOX_DEAD_LETTERS, &LANE_MEMBERS],
                    archived: true,
                    reads: &["parent_type", "parent_id"],
                }
            }
            Expired::Runs { older_than_ms } => self.runs_plan(*older_than_ms, None),
            Expired::Audit { older_than_ms } => ChunkPlan {
                table: &OUTBOX_AUDIT,
                filter: format!("at < {now} - ?"),
                binds: vec![Bind::Int(*older_than_ms)],
                order: "at",
                age_column: "at",
                children: &[],
                archived: true,
                reads: &[],
            },
            Expired::IdempotencyKeys { older_than_ms } => ChunkPlan {
                table: &IDEMPOTENCY_KEYS,
                filter: format!("created_at < {now} - ?"),
                binds: vec![Bind::Int(*older_than_ms)],
                order: "created_at",
                age_column: "created_at",
                children: &[],
                archived: false,
                reads: &[],
            },
        }
    }

    /// The runs past `older_than_ms` that may go: terminal, unchanged since, and
    /// owning no event any more; with `only`, just those of these ids (the runs
    /// whose events a chunk has just removed), in key order.
    fn runs_plan(&self, older_than_ms: i64, only: Option<&[String]>) -> ChunkPlan {
        let now = self.engine.now_ms();
        // The status test is a residual filter on SQLite so it walks
        // `runs_created_at`, not `(status, id)` and a sort of the whole table for
        // each chunk (118 ms a chunk at 200k runs, against 1 ms); PostgreSQL
        // reaches the same walk from its statistics.
        let mut filter = format!(
            "created_at < {now} - ? AND updated_at < {now} - ? AND {} \
             AND NOT EXISTS (SELECT 1 FROM outbox_events e \
             WHERE e.parent_type = 'run' AND e.parent_id = runs.id)",
            self.engine
                .residual_on_sqlite("status IN ('succeeded', 'failed', 'cancelled')")
        );
        let mut binds = vec![Bind::Int(older_than_ms), Bind::Int(older_than_ms)];
        let mut order = "created_at";
        if let Some(ids) = only {
            filter.push_str(&format!(
                " AND id IN ({})",
                super::engine::placeholders(padded_len(ids.len()))
            ));
            binds.extend(padded(ids).cloned().map(Bind::Text));
            // Looked up by key: a walk of `runs_created_at` would pass every old
            // run to find these.
            order = "id";
        }
        ChunkPlan {
            table: &RUNS,
            filter,
            binds,
            order,
            age_column: "updated_at",
            children: &[],
            archived: true,
            reads: &[],
        }
    }

    /// The chunk's rows, locked until the delete commits (SQLite's write
    /// transaction already excludes every other writer); bound by
    /// [`SqlStore::bind_chunk`].
    ///
    /// With [`SqlStore::keys_first`] the keys are picked in an init plan, then
    /// the rows with those keys are read and locked, and the filter is tested
    /// again on each locked row: one may have changed between the pick and the
    /// lock (a failed event retried), and then it stays.
    fn chunk_select(&self, plan: &ChunkPlan, columns: &[(&str, ColumnType)]) -> String {
        let (table, filter, order) = (plan.table.name, &plan.filter, plan.order);
        // The archive takes the table's own columns by name; the age rides along.
        let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
        let columns = format!(
            "{}, {} - {} AS {ROW_AGE}",
            names.join(", "),
            self.engine.now_ms(),
            plan.age_column
        );
        let lock = self.engine.lock_rows();
        let sql = if self.keys_first(plan) {
            let key = plan.table.key[0];
            format!(
                "SELECT {columns} FROM {table} WHERE {key} = ANY(ARRAY(\
                 SELECT {key} FROM {table} WHERE {filter} ORDER BY {order} LIMIT ?)) \
                 AND {filter} ORDER BY {order}{lock}"
            )
        } else {
            format!("SELECT {columns} FROM {table} WHERE {filter} ORDER BY {order} LIMIT ?{lock}")
        };
        self.engine.sql(&sql).into_owned()
    }

    /// Up to `limit` rows of `plan`, locked (see [`SqlStore::chunk_select`]),
    /// and the youngest one's age; the columns are [`ChunkPlan::columns`]
    /// (whole rows only when `archiving`).
    async fn select_chunk(
        &self,
        tx: &mut WriteTx,
        plan: &ChunkPlan,
        limit: u32,
        archiving: bool,
    ) -> Result<(Vec<serde_json::Value>, Option<i64>), StoreError> {
        let columns = plan.columns(archiving);
        let sql = self.chunk_select(plan, &columns);
        let rows = self
            .bind_chunk(plan, sqlx::query(&sql), limit)
            .fetch_all(&mut **tx)
            .await?;
        let ages = rows
            .iter()
            .map(|row| row.try_get::<i64, _>(ROW_AGE))
            .collect::<Result<Vec<_>, _>>()?;
        let rows = rows
            .iter()
            .map(|row| row_to_json(row, &columns))
            .collect::<Result<_, _>>()?;
        Ok((rows, ages.into_iter().min()))
    }

    /// Hands `rows` of `plan` (and their children) to the archive when there is
    /// one, then deletes them: rows removed per table, `plan`'s own first.
    async fn archive_and_delete(
        &self,
        tx: &mut WriteTx,
        plan: &ChunkPlan,
        rows: Vec<serde_json::Value>,
        archive: Option<&dyn ArchiveSink>,
    ) -> Result<Vec<(&'static str, u64)>, StoreError> {
        let keys: Vec<Vec<String>> = rows.iter().map(|row| key_of(plan.table, row)).collect();
        if let (Some(archive), true) = (archive, plan.archived) {
            // Children hang off an event by its id, the key's one column.
            let event_ids: Vec<String> = keys.iter().map(|key| key[0].clone()).collect();
            for child in plan.children {
                let child_rows = self
                    .rows_where_in(tx, child, "event_id", &event_ids)
                    .await?;
                if !child_rows.is_empty() {
                    archive
                        .append(child.name, child_rows)
                        .await
                        .map_err(StoreError::Archive)?;
                }
            }
            archive
                .append(plan.table.name, rows)
                .await
                .map_err(StoreError::Archive)?;
        }
        let mut children = Vec::new();
        for child in plan.children {
            let n = if child.name == LANE_MEMBERS.name {
                // A removed head lets its lane's next event go.
                let ids: Vec<&str> = keys.iter().map(|key| key[0].as_str()).collect();
                self.leave_lanes(tx, &ids).await?
            } else {
                self.delete_keys(tx, child, &["event_id"], &keys).await?
            };
            children.push((child.name, n));
        }
        let n = self
            .delete_keys(tx, plan.table, plan.table.key, &keys)
            .await?;
        let mut tables = vec![(plan.table.name, n)];
        tables.extend(children);
        Ok(tables)
    }

    /// The rows of `table` whose `column` is one of `ids`.
    async fn rows_where_in(
        &self,
        tx: &mut WriteTx,
        table: &TableShape,
        column: &str,
        ids: &[String],
    ) -> Result<Vec<serde_json::Value>, StoreError> {
        let sql = format!(
            "SELECT {} FROM {} WHERE {column} IN ({})",
            table.column_list(),
            table.name,
            super::engine::placeholders(padded_len(ids.len()))
        );
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql);
        for id in padded(ids) {
            query = query.bind(id);
        }
        let rows = query.fetch_all(&mut **tx).await?;
        rows.iter().map(|row| table.to_json(row)).collect()
    }

    /// Deletes the rows of `table` whose `columns` hold one of `keys` (each key as
    /// many values as there are columns).
    async fn delete_keys(
        &self,
        tx: &mut WriteTx,
        table: &TableShape,
        columns: &[&str],
        keys: &[Vec<String>],
    ) -> Result<u64, StoreError> {
        let width = padded_len(keys.len());
        let matches = if let [column] = columns {
            format!("{column} IN ({})", super::engine::placeholders(width))
        } else {
            // A composite key: row-value IN lists are not portable (SQLite wants a
            // subquery), so one conjunction per key.
            let one = columns
                .iter()
                .map(|c| format!("{c} = ?"))
                .collect::<Vec<_>>()
                .join(" AND ");
            vec![format!("({one})"); width].join(" OR ")
        };
        let sql = format!("DELETE FROM {} WHERE {matches}", table.name);
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql);
        for key in padded(keys) {
            for value in key {
                query = query.bind(value);
            }
        }
        Ok(query.execute(&mut **tx).await?.rows_affected())
    }
}

/// The key values of a row as [`TableShape::to_json`] made it.
fn key_of(table: &TableShape, row: &serde_json::Value) -> Vec<String> {
    table
        .key
        .iter()
        .map(|column| match &row[*column] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// The runs that own some of these event rows, each once.
fn parent_runs(events: &[serde_json::Value]) -> Vec<String> {
    let runs: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|event| event["parent_type"] == "run")
        .filter_map(|event| event["parent_id"].as_str())
        .collect();
    runs.into_iter().map(str::to_string).collect()
}

#[async_trait]
impl RetentionStore for SqlStore {
    async fn take_lease(
        &self,
        name: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        let now = self.engine.now_ms();
        let insert = format!(
            "INSERT INTO maintenance_leases (name, holder, expires_at) VALUES (?, ?, {now} + ?) {}",
            self.engine.insert_if_absent_tail("name")
        );
        sqlx::query(&self.engine.sql(&insert))
            .bind(name)
            .bind(holder)
            .bind(lease_ms)
            .execute(&self.pool)
            .await?;
        let take = format!(
            "UPDATE maintenance_leases SET holder = ?, expires_at = {now} + ? \
             WHERE name = ? AND (holder = ? OR expires_at < {now})"
        );
        sqlx::query(&self.engine.sql(&take))
            .bind(holder)
            .bind(lease_ms)
            .bind(name)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        // Read back rather than trust the affected-row count, which MySQL reports
        // as rows changed (none when the values happen to be the same).
        let held: Option<String> = sqlx::query(
            &self
                .engine
                .sql("SELECT holder FROM maintenance_leases WHERE name = ?"),
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?
        .map(|row| super::row::text(&row, "holder"))
        .transpose()?;
        Ok(held.as_deref() == Some(holder))
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        sqlx::query(
            &self
                .engine
                .sql("DELETE FROM maintenance_leases WHERE name = ? AND holder = ?"),
        )
        .bind(name)
        .bind(holder)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn remove_expired(
        &self,
        expired: &Expired,
        limit: u32,
        archive: Option<&dyn ArchiveSink>,
    ) -> Result<ChunkRemoved, StoreError> {
        let plan = self.chunk_plan(expired);
        let mut tx = super::ports::Transactions::begin_write(self).await?;
        let archiving = |plan: &ChunkPlan| archive.is_some() && plan.archived;
        let (rows, youngest_age_ms) = self
            .select_chunk(&mut tx, &plan, limit, archiving(&plan))
            .await?;
        if rows.is_empty() {
            tx.rollback().await?;
            return Ok(ChunkRemoved::default());
        }
        let freed_runs = match expired {
            Expired::Events {
                runs_older_than_ms: Some(ms),
                ..
            } => Some((*ms, parent_runs(&rows))),
            _ => None,
        };
        let mut tables = self
            .archive_and_delete(&mut tx, &plan, rows, archive)
            .await?;
        if let Some((older_than_ms, ids)) = freed_runs.filter(|(_, ids)| !ids.is_empty()) {
            // After the delete, so a run whose last event this chunk removed owns
            // none any more.
            // At most one run an event: the chunk's own limit bounds them.
            let runs = self.runs_plan(older_than_ms, Some(&ids));
            let (rows, _) = self
                .select_chunk(&mut tx, &runs, limit, archiving(&runs))
                .await?;
            if !rows.is_empty() {
                let removed = self
                    .archive_and_delete(&mut tx, &runs, rows, archive)
                    .await?;
                tables.extend(removed);
            }
        }
        tx.commit().await?;
        Ok(ChunkRemoved {
            tables,
            youngest_age_ms,
        })
    }

    async fn oldest_retained(&self) -> Result<Vec<(DeliveryStatus, i64)>, StoreError> {
        let now = self.engine.now_ms();
        let sql = format!(
            "SELECT {now} - updated_at AS age FROM outbox_events WHERE status = ? \
             ORDER BY next_attempt_at LIMIT 1"
        );
        let sql = self.engine.sql(&sql);
        let mut ages = Vec::new();
        for status in [
            DeliveryStatus::Completed,
            DeliveryStatus::Skipped,
            DeliveryStatus::Failed,
            DeliveryStatus::Uncertain,
        ] {
            let row = sqlx::query(&sql)
                .bind(status.as_str())
                .fetch_optional(&self.pool)
                .await?;
            if let Some(row) = row {
                ages.push((status, row.try_get::<i64, _>("age")?.max(0)));
            }
        }
        Ok(ages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::retention::MAX_CHUNK_ROWS;
    use crate::store::StoreOptions;

    /// The plan `explain` (the engine's EXPLAIN) gives for the chunk select of
    /// `plan` with its binds, one step a row, from `column`.
    async fn explained(
        store: &SqlStore,
        plan: &ChunkPlan,
        explain: &str,
        column: &str,
    ) -> Vec<String> {
        let sql = format!(
            "{explain} {}",
            store.chunk_select(plan, &plan.columns(true))
        );
        let rows = store
            .bind_chunk(plan, sqlx::query(&sql), MAX_CHUNK_ROWS)
            .fetch_all(&store.pool)
            .await
            .unwrap();
        rows.iter()
            .map(|row| row.try_get::<String, _>(column).unwrap())
            .collect()
    }

    /// A fresh store in memory, migrated.
    async fn memory_store() -> SqlStore {
        SqlStore::open(&StoreOptions {
            url: "memory://".into(),
            max_connections: 1,
        })
        .await
        .unwrap()
    }

    /// A chunk that archives reads whole rows; one that only deletes reads the
    /// key and what it uses (an event's run), never a payload.
    #[tokio::test]
    async fn a_chunk_reads_payloads_only_to_archive_them() {
        let store = memory_store().await;
        let events = store.chunk_plan(&Expired::Events {
            status: DeliveryStatus::Completed,
            kinds: KindScope::AllBut(vec![]),
            older_than_ms: 1,
            runs_older_than_ms: Some(1),
        });
        let names = |columns: Vec<(&'static str, ColumnType)>| -> Vec<&'static str> {
            columns.into_iter().map(|(name, _)| name).collect()
        };
        assert_eq!(
            names(events.columns(false)),
            ["event_id", "parent_type", "parent_id"]
        );
        assert_eq!(events.columns(true), OUTBOX_EVENTS.columns);
        let keys = store.chunk_plan(&Expired::IdempotencyKeys { older_than_ms: 1 });
        assert_eq!(names(keys.columns(false)), ["principal", "idem_key"]);
        for expired in [
            Expired::Runs { older_than_ms: 1 },
            Expired::Audit { older_than_ms: 1 },
        ] {
            assert_eq!(names(store.chunk_plan(&expired).columns(false)), ["id"]);
        }
    }

    /// Every chunk walks an index in its `ORDER BY` order and stops at the chunk
    /// size. A plan that sorts instead reads every candidate row for each chunk,
    /// and a pass falls behind as the table grows (the 50-minute soak's runs
    /// backlog). A fresh store has no statistics, the case that went wrong.
    #[tokio::test]
    async fn no_chunk_sorts_its_table_on_sqlite_without_statistics() {
        let store = memory_store().await;
        let day = 86_400_000;
        let expired = [
            Expired::Events {
                status: DeliveryStatus::Completed,
                kinds: KindScope::AllBut(vec!["field_update".into()]),
                older_than_ms: day,
                runs_older_than_ms: Some(day),
            },
            Expired::Events {
                status: DeliveryStatus::Failed,
                kinds: KindScope::Only("callback".into()),
                older_than_ms: day,
                runs_older_than_ms: None,
            },
            Expired::Runs { older_than_ms: day },
            Expired::Audit { older_than_ms: day },
            Expired::IdempotencyKeys { older_than_ms: day },
        ];
        let mut plans: Vec<(String, ChunkPlan)> = expired
            .iter()
            .map(|expired| (format!("{expired:?}"), store.chunk_plan(expired)))
            .collect();
        let freed = ["run-1", "run-2", "run-3"].map(String::from);
        plans.push((
            "the runs an events chunk freed".into(),
            store.runs_plan(day, Some(&freed)),
        ));
        for (name, plan) in &plans {
            let steps = explained(&store, plan, "EXPLAIN QUERY PLAN", "detail").await;
            assert!(
                !steps.iter().any(|step| step.contains("TEMP B-TREE")),
                "{name} sorts its rows: {steps:?}"
            );
            assert!(
                steps[0].starts_with(&format!("SEARCH {} USING", plan.table.name)),
                "{name} scans its table: {steps:?}"
            );
        }
    }

    /// On PostgreSQL, with statistics that show nearly every run terminal, the
    /// runs chunk picks its keys by walking `runs_created_at` and stops at the
    /// chunk size. With the status test hidden in a CASE (SQLite's cure), the
    /// planner guessed 0.5 % of runs terminal and read and sorted every old run
    /// for each chunk (250–800 ms chunks at 1,000 runs/s).
    #[tokio::test]
    async fn the_runs_chunk_walks_created_at_on_postgres_with_statistics() {
        use sqlx::{Connection, Executor};
        let admin = std::env::var("HERALD_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        sqlx::any::install_default_drivers();
        let name = format!("herald_plan_{}", uuid::Uuid::new_v4().simple());
        let mut server = sqlx::AnyConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {admin}: {e}"));
        server
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        let mut url = url::Url::parse(&admin).unwrap();
        url.set_path(&format!("/{name}"));
        let store = SqlStore::open(&StoreOptions {
            url: url.to_string(),
            max_connections: 2,
        })
        .await
        .unwrap();
        // 100,000 runs of the last two hours, all but 1 % terminal; the newest
        // own their events.
        store
            .pool
            .execute(
                "INSERT INTO runs (id, run_type, tenant, status, created_at, updated_at) \
                 SELECT 'run-' || i, 'etl', 't', \
                 CASE WHEN i % 100 = 0 THEN 'running' ELSE 'succeeded' END, \
                 CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) - 7200000 + i * 72, \
                 CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) - 7200000 + i * 72 \
                 FROM generate_series(1, 100000) AS i",
            )
            .await
            .unwrap();
        store
            .pool
            .execute(
                "INSERT INTO outbox_events (event_id, source, kind, parent_type, parent_id, \
                 payload, redeliverable, status, max_attempts, next_attempt_at, created_at, \
                 updated_at) \
                 SELECT 'e-' || i, 'jobs', 'callback', 'run', 'run-' || i, '{}', 1, 'completed', \
                 6, 0, 0, 0 FROM generate_series(95001, 100000) AS i",
            )
            .await
            .unwrap();
        store.pool.execute("ANALYZE runs").await.unwrap();
        store.pool.execute("ANALYZE outbox_events").await.unwrap();

        let plan = store.chunk_plan(&Expired::Runs {
            older_than_ms: 60_000,
        });
        let steps = explained(&store, &plan, "EXPLAIN", "QUERY PLAN").await;
        // The runs an events chunk freed are looked up by key, not walked to.
        let freed: Vec<String> = (1..=1000).map(|i| format!("run-{}", i * 90)).collect();
        let freed_plan = store.runs_plan(60_000, Some(&freed));
        let freed_steps = explained(&store, &freed_plan, "EXPLAIN", "QUERY PLAN").await;
        store.close().await;
        server
            .execute(format!("DROP DATABASE {name}").as_str())
            .await
            .unwrap();
        assert!(
            steps
                .iter()
                .any(|step| step.contains("Index Scan using runs_created_at on runs")),
            "the chunk does not walk runs_created_at: {steps:#?}"
        );
        assert!(
            !steps.iter().any(|step| step.contains("Seq Scan on runs")),
            "the chunk reads every run: {steps:#?}"
        );
        assert!(
            freed_steps
                .iter()
                .any(|step| step.contains("Index Scan using runs_pkey on runs")),
            "the freed runs are not looked up by key: {freed_steps:#?}"
        );
        assert!(
            !freed_steps
                .iter()
                .any(|step| step.contains("runs_created_at") || step.contains("Seq Scan on runs")),
            "the freed runs are walked to: {freed_steps:#?}"
        );
    }
}
