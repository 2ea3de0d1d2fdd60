//! Read-only outbox queries for the console and the admin API: delivery counts of a
//! page of parents (one grouped statement), the filtered, keyset-paged event list,
//! attempt logs of several events, and the audit trail.

use async_trait::async_trait;
use vocab::DeliveryStatus;

use super::engine::{like_escaped, placeholders, IdEnd};
use super::error::StoreError;
use super::events::{AttemptRecord, EventRecord};
use super::outbox::{attempt_from_row, event_from_row, EVENT_COLUMNS};
use super::ports::{
    AuditRecord, DeliveryReads, DestinationFilter, EventFilter, FailureGroup, IdKind, IdMatch,
    NewAuditEntry, CAUSE_NO_ERROR, CAUSE_UNCLASSIFIED,
};
use super::row::{int, opt_text, text};
use super::sql::SqlStore;

/// Values bound in order to a statement built from optional filters.
enum Arg<'a> {
    Text(&'a str),
    Owned(String),
    Int(i64),
}

fn bind_all<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    args: Vec<Arg<'q>>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for arg in args {
        query = match arg {
            Arg::Text(value) => query.bind(value),
            Arg::Owned(value) => query.bind(value),
            Arg::Int(value) => query.bind(value),
        };
    }
    query
}

/// The `WHERE` conditions of `filter` and their values (with its keyset cursor when
/// `paged`).
fn conditions(filter: &EventFilter, paged: bool) -> (String, Vec<Arg<'_>>) {
    let mut sql = "1 = 1".to_string();
    let mut args: Vec<Arg> = Vec::new();
    for (column, value) in [
        ("kind", &filter.kind),
        ("source", &filter.source),
        ("parent_type", &filter.parent_type),
        ("parent_id", &filter.parent_id),
    ] {
        if let Some(value) = value {
            sql.push_str(&format!(" AND {column} = ?"));
            args.push(Arg::Text(value));
        }
    }
    match &filter.destination {
        Some(DestinationFilter::Origin(origin)) => {
            sql.push_str(" AND destination = ?");
            args.push(Arg::Text(origin));
        }
        Some(DestinationFilter::None) => sql.push_str(" AND destination IS NULL"),
        None => {}
    }
    if !filter.statuses.is_empty() {
        sql.push_str(&format!(
            " AND status IN ({})",
            placeholders(filter.statuses.len())
        ));
        args.extend(filter.statuses.iter().map(|s| Arg::Text(s.as_str())));
    }
    if let Some(from) = filter.created_from_ms {
        sql.push_str(" AND created_at >= ?");
        args.push(Arg::Int(from));
    }
    if let Some(to) = filter.created_to_ms {
        sql.push_str(" AND created_at < ?");
        args.push(Arg::Int(to));
    }
    if let Some(cause) = &filter.cause {
        let (case, patterns) = cause_of_error(&cause.rules);
        sql.push_str(&format!(" AND {case} = ?"));
        args.extend(patterns);
        args.push(Arg::Int(cause.cause));
    }
    if let (true, Some((created_at, event_id))) = (paged, &filter.before) {
        sql.push_str(" AND (created_at < ? OR (created_at = ? AND event_id < ?))");
        args.extend([
            Arg::Int(*created_at),
            Arg::Int(*created_at),
            Arg::Text(event_id),
        ]);
    }
    (sql, args)
}

/// A search's match from its row (`found_id`, `owner_type`, `owner_id`).
fn id_match(
    row: &sqlx::any::AnyRow,
    kind: IdKind,
    id: String,
    exact: bool,
) -> Result<IdMatch, StoreError> {
    Ok(IdMatch {
        kind,
        exact,
        owner_type: text(row, "owner_type")?,
        owner_id: text(row, "owner_id")?,
        id,
    })
}

/// An event's cause as [`CauseFilter`] defines it: a `CASE` over its last error
/// and the `LIKE` patterns it binds, in order. `LOWER` on both sides, so it reads
/// the same on every engine whatever its collation.
///
/// [`CauseFilter`]: super::ports::CauseFilter
fn cause_of_error(rules: &[(&str, i64)]) -> (String, Vec<Arg<'static>>) {
    let mut case = format!("(CASE WHEN last_error IS NULL THEN {CAUSE_NO_ERROR}");
    let mut patterns = Vec::with_capacity(rules.len());
    for (prefix, cause) in rules {
        case.push_str(&format!(
            " WHEN LOWER(last_error) LIKE ? ESCAPE '!' THEN {cause}"
        ));
        patterns.push(Arg::Owned(format!("{}%", like_escaped(prefix))));
    }
    case.push_str(&format!(" ELSE {CAUSE_UNCLASSIFIED} END)"));
    (case, patterns)
}

#[async_trait]
impl DeliveryReads for SqlStore {
    async fn blocked_lanes(
        &self,
        limit: u32,
    ) -> Result<(Vec<super::events::BlockedLane>, i64), StoreError> {
        Ok((
            self.list_blocked_lanes(limit).await?,
            self.count_open_lanes().await?,
        ))
    }

    async fn delivery_rollups(
        &self,
        since_ms: i64,
        grain: super::rollups::RollupGrain,
    ) -> Result<(Vec<super::rollups::DeliveryMinute>, i64), StoreError> {
        self.read_delivery_rollups(since_ms, grain).await
    }

    async fn status_counts(
        &self,
        parent_type: &str,
        parent_ids: &[String],
    ) -> Result<Vec<(String, DeliveryStatus, i64)>, StoreError> {
        if parent_ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT parent_id, status, COUNT(*) AS n FROM outbox_events \
             WHERE parent_type = ? AND parent_id IN ({}) GROUP BY parent_id, status",
            placeholders(parent_ids.len())
        );
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql).bind(parent_type);
        for id in parent_ids {
            query = query.bind(id);
        }
        let rows = query.fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                let status = text(row, "status")?;
                Ok((
                    text(row, "parent_id")?,
                    DeliveryStatus::parse(&status)
                        .ok_or_else(|| StoreError::Corrupt(format!("event status {status:?}")))?,
                    int(row, "n")?,
                ))
            })
            .collect()
    }

    async fn count_events(&self, filter: &EventFilter, cap: u32) -> Result<i64, StoreError> {
        let (conditions, args) = conditions(filter, false);
        let sql = format!(
            "SELECT COUNT(*) AS n FROM (SELECT event_id FROM outbox_events WHERE {conditions} LIMIT {cap}) capped"
        );
        let sql = self.engine.sql(&sql);
        let row = bind_all(sqlx::query(&sql), args)
            .fetch_one(&self.pool)
            .await?;
        int(&row, "n")
    }

    async fn record_audit(&self, entry: &NewAuditEntry) -> Result<(), StoreError> {
        self.insert_audit(&self.pool, entry).await
    }

    async fn list_events(&self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        let (conditions, args) = conditions(filter, true);
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM outbox_events WHERE {conditions} \
             ORDER BY created_at DESC, event_id DESC LIMIT {}",
            filter.limit
        );
        let sql = self.engine.sql(&sql);
        let rows = bind_all(sqlx::query(&sql), args)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn attempts_of(
        &self,
        event_ids: &[String],
    ) -> Result<Vec<(String, AttemptRecord)>, StoreError> {
        if event_ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT event_id, attempt, cycle, started_at, finished_at, outcome, status_code, error, worker \
             FROM outbox_attempts WHERE event_id IN ({}) ORDER BY event_id, attempt",
            placeholders(event_ids.len())
        );
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql);
        for id in event_ids {
            query = query.bind(id);
        }
        let rows = query.fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| Ok((text(row, "event_id")?, attempt_from_row(row)?)))
            .collect()
    }

    async fn audit(
        &self,
        before_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let mut sql =
            "SELECT id, event_id, action, actor, from_status, acknowledged_duplicate_risk, affected, at, reason \
                       FROM outbox_audit"
                .to_string();
        if before_id.is_some() {
            sql.push_str(" WHERE id < ?");
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {limit}"));
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql);
        if let Some(id) = before_id {
            query = query.bind(id);
        }
        let rows = query.fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                Ok(AuditRecord {
                    id: text(row, "id")?,
                    event_id: text(row, "event_id")?,
                    action: text(row, "action")?,
                    actor: text(row, "actor")?,
                    from_status: text(row, "from_status")?,
                    acknowledged_duplicate_risk: int(row, "acknowledged_duplicate_risk")? != 0,
                    affected: int(row, "affected")?,
                    at_ms: int(row, "at")?,
                    reason: opt_text(row, "reason")?,
                })
            })
            .collect()
    }

    async fn find_ids(&self, needle: &str, limit: u32) -> Result<Vec<IdMatch>, StoreError> {
        // (kind, table, id column, owner type column, owner id column, whether
        // an end is searched: an event's id ends with its route or transition,
        // `deliver_<run>_<route>`, `callback_<run>_<event>_<seq>`, so only its
        // beginning names it, and its run's id finds the run)
        const TABLES: [(IdKind, &str, &str, &str, &str, bool); 4] = [
            (IdKind::Run, "runs", "id", "'run'", "run_type", true),
            (
                IdKind::Event,
                "outbox_events",
                "event_id",
                "parent_type",
                "parent_id",
                false,
            ),
            (
                IdKind::Approval,
                "approval_instances",
                "id",
                "object",
                "record_id",
                true,
            ),
            (IdKind::Record, "records", "id", "object", "''", true),
        ];
        // The exact id first, through each primary key: a whole id pasted (the
        // usual case) is answered without reading any table through.
        let mut found = Vec::new();
        for (kind, table, id, owner_type, owner_id, _) in TABLES {
            let sql = format!(
                "SELECT {id} AS found_id, {owner_type} AS owner_type, {owner_id} AS owner_id \
                 FROM {table} WHERE {id} = ?"
            );
            let rows = sqlx::query(&self.engine.sql(&sql))
                .bind(needle)
                .fetch_all(&self.pool)
                .await?;
            for row in &rows {
                let found_id = text(row, "found_id")?;
                // MariaDB's collation may ignore case: the needle's case holds.
                if found_id == needle {
                    found.push(id_match(row, kind, found_id, true)?);
                }
            }
        }
        if !found.is_empty() {
            return Ok(found);
        }
        // A part of an id, at either end (the console shows an id's last
        // characters), each through an index (`Engine::id_part_condition`).
        for (kind, table, id, owner_type, owner_id, ends) in TABLES {
            let searched: &[IdEnd] = if ends {
                &[IdEnd::Start, IdEnd::End]
            } else {
                &[IdEnd::Start]
            };
            for &end in searched {
                let (condition, values) = self.engine.id_part_condition(id, end, needle);
                let sql = format!(
                    "SELECT {id} AS found_id, {owner_type} AS owner_type, {owner_id} AS owner_id \
                     FROM {table} WHERE {condition} LIMIT {limit}"
                );
                let sql = self.engine.sql(&sql);
                let mut query = sqlx::query(&sql);
                for value in values {
                    query = query.bind(value);
                }
                let rows = query.fetch_all(&self.pool).await?;
                for row in &rows {
                    let found_id = text(row, "found_id")?;
                    // LIKE ignores case on SQLite: the needle's case holds.
                    let matches = match end {
                        IdEnd::Start => found_id.starts_with(needle),
                        IdEnd::End => found_id.ends_with(needle),
                    };
                    // An id that both begins and ends with the needle is listed once.
                    let listed = found
                        .iter()
                        .any(|m: &IdMatch| m.kind == kind && m.id == found_id);
                    if !matches || listed {
                        continue;
                    }
                    found.push(id_match(row, kind, found_id, false)?);
                }
            }
        }
        Ok(found)
    }

    async fn failure_groups(
        &self,
        rules: &[(&'static str, i64)],
        limit: u32,
    ) -> Result<Vec<FailureGroup>, StoreError> {
        let (cause, patterns) = cause_of_error(rules);
        let sql = format!(
            "SELECT kind, source, destination, {cause} AS cause, COUNT(*) AS n, \
             MIN(COALESCE(failed_at, uncertain_at, updated_at)) AS first_at, \
             MAX(COALESCE(failed_at, uncertain_at, updated_at)) AS last_at \
             FROM outbox_events WHERE status IN (?, ?) \
             GROUP BY kind, source, destination, cause \
             ORDER BY n DESC, last_at DESC LIMIT {limit}"
        );
        let sql = self.engine.sql(&sql);
        let mut args = patterns;
        args.extend([
            Arg::Text(DeliveryStatus::Failed.as_str()),
            Arg::Text(DeliveryStatus::Uncertain.as_str()),
        ]);
        let rows = bind_all(sqlx::query(&sql), args)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(FailureGroup {
                    kind: text(row, "kind")?,
                    source: text(row, "source")?,
                    destination: opt_text(row, "destination")?,
                    cause: int(row, "cause")?,
                    count: int(row, "n")?,
                    first_at_ms: int(row, "first_at")?,
                    last_at_ms: int(row, "last_at")?,
                })
            })
            .collect()
    }
}
