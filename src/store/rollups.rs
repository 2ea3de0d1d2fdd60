//! Per-minute rollups of settled deliveries (issue 23, item 1): what the console's
//! overview charts, kept by one node's maintenance so that the overview reads a
//! day of minutes instead of scanning the outbox.
//!
//! A pass recounts every minute that is not final yet (from the store's
//! `final_before` mark to the current minute) from the rows settled in it, found
//! through the `outbox_settled` index, and replaces those minutes' rows. A minute
//! is final [`GRACE_MS`] after it ends: a settlement's `updated_at` is taken when
//! its statement runs and it commits moments later, so a minute is counted again
//! until then (a settlement whose commit comes later still, behind a lock wait or
//! Galera's flow control, is missed by the figures, never by delivery).
//! Recounting (not adding) makes a pass that dies or runs twice harmless.
//! A delivery counts in the state it is in when its minute is recounted: one
//! retried by an operator before its minute is final leaves that minute's
//! failures, and one that completes after a retry counts its latency from its
//! first commit.
//!
//! Failed and uncertain rows are kept per destination origin, at most
//! [`DESTINATIONS_A_MINUTE`] a minute, source, kind and state, the rest summed
//! under [`OTHER_DESTINATIONS`]: many failing tenants' endpoints cannot make a
//! day of rollups large.
//!
//! The same pass sums the minutes into quarter hours (`delivery_quarters`), the
//! bars of the day's chart: a day is then 96 quarters read, not 1,440 minutes.
//! Every quarter from the store's `quarters_before` mark on is summed again from
//! its minutes in the transaction that writes them, so the two tables always
//! agree; a mark behind the minutes' (an older release counted meanwhile) sums
//! the gap again, and no mark (a store that just gained the table) sums every
//! minute kept.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::error::StoreError;
use super::ports::{RetentionStore, Transactions};
use super::row::{int, opt_int, opt_text, text};
use super::sql::SqlStore;

pub const MINUTE_MS: i64 = 60_000;
/// A bar of the day's chart.
pub const QUARTER_MS: i64 = 15 * MINUTE_MS;
/// The source and kind of the store-wide backlog sample, written on every pass
/// (even when nothing waits), so a minute without one had no recount.
pub const ALL: &str = "";
/// How long after its end a minute is still recounted.
pub const GRACE_MS: i64 = 30_000;
/// How far back the first pass on a store counts.
pub const BACKFILL_MINUTES: i64 = 60;
/// The most minutes one pass counts (a long outage is caught up over passes).
pub const MINUTES_A_PASS: i64 = 30;
/// How long rollups are kept: the overview shows a day.
pub const KEEP_MS: i64 = 2 * 24 * 60 * MINUTE_MS;
/// Upper bounds (ms) of the commit → delivery latency buckets; one bucket more
/// holds everything slower.
pub const LATENCY_BOUNDS_MS: [i64; 15] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000,
    3_600_000,
];
/// Destinations kept apart per minute, source, kind and state.
pub const DESTINATIONS_A_MINUTE: usize = 20;
/// Where the failures of the destinations past [`DESTINATIONS_A_MINUTE`] go
/// (the console names it).
pub use vocab::OTHER_DESTINATIONS;
/// Rollup rows written by one statement.
const INSERT_CHUNK: usize = 100;
const MINUTES: &str = "delivery_minutes";
const QUARTERS: &str = "delivery_quarters";

/// How finely rollups are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RollupGrain {
    /// Every minute.
    Minutes,
    /// Quarter hours (`minute` is each quarter's first minute), and the minutes
    /// of the current quarter (whose newest backlog sample is the backlog now).
    QuarterHours,
}

/// One row of `delivery_minutes` (or of `delivery_quarters`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryMinute {
    /// The minute's start (epoch ms, the store's clock).
    pub minute: i64,
    pub source: String,
    pub kind: String,
    /// A settled state, or `pending` for a backlog sample.
    pub status: String,
    /// The destination origin of failed and uncertain deliveries; empty otherwise.
    pub destination: String,
    /// Deliveries settled so in the minute (for `pending`: the backlog sampled).
    pub deliveries: i64,
    /// For `completed`: counts per [`LATENCY_BOUNDS_MS`] bucket (one more than the bounds).
    pub latency: Vec<i64>,
    /// For `pending`: the oldest pending delivery's commit time.
    pub oldest_at: Option<i64>,
}

/// The backlog of one source and kind as maintenance last counted it.
#[derive(Clone, Debug)]
pub struct BacklogSample {
    pub source: String,
    pub kind: String,
    /// Pending and in flight.
    pub deliveries: i64,
    pub oldest_at: Option<i64>,
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RollupReport {
    /// The minutes recounted, `[from, to)`.
    pub from: i64,
    pub to: i64,
    /// Minutes before this are final now.
    pub final_before: i64,
    pub rows: usize,
    /// Settled deliveries counted in `[from, to)`, and the store's backlog: what
    /// a page showing the overview would see change.
    pub counted: i64,
    pub backlog: i64,
}

/// The rollups' storage: written by one node at a time (the lease of
/// [`RetentionStore::take_lease`]), read by the console.
#[async_trait]
pub trait DeliveryRollups: RetentionStore {
    /// Recounts the minutes not final yet (at most [`MINUTES_A_PASS`]) and
    /// records `backlog` as the current minute's sample.
    async fn roll_up(&self, backlog: &[BacklogSample]) -> Result<RollupReport, StoreError>;
}

/// The latency bucket of `updated_at - created_at`, in SQL.
fn bucket_sql() -> String {
    let mut sql = String::from("CASE");
    for (i, bound) in LATENCY_BOUNDS_MS.iter().enumerate() {
        sql.push_str(&format!(" WHEN updated_at - created_at < {bound} THEN {i}"));
    }
    sql.push_str(&format!(" ELSE {} END", LATENCY_BOUNDS_MS.len()));
    sql
}

/// The start of the `step`-long span (a minute, a quarter, a chart's bar) that
/// holds `ms`.
pub fn floor_to(ms: i64, step: i64) -> i64 {
    ms - ms.rem_euclid(step)
}

/// The earlier of two optional times (a backlog's oldest commit).
pub fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[async_trait]
impl DeliveryRollups for SqlStore {
    async fn roll_up(&self, backlog: &[BacklogSample]) -> Result<RollupReport, StoreError> {
        let now: i64 = sqlx::query_scalar(&format!("SELECT {}", self.engine.now_ms()))
            .fetch_one(&self.pool)
            .await?;
        let current = floor_to(now, MINUTE_MS);
        let (marked, quarters_marked) = match sqlx::query(
            "SELECT final_before, quarters_before FROM delivery_rollup_state WHERE id = 1",
        )
        .fetch_optional(&self.pool)
        .await?
        {
            Some(row) => (
                opt_int(&row, "final_before")?,
                opt_int(&row, "quarters_before")?,
            ),
            None => (None, None),
        };
        let backfill = current - BACKFILL_MINUTES * MINUTE_MS;
        let from = match marked {
            // A mark ahead of the clock (the clock ran ahead, then was set right,
            // or a database was restored) would leave every minute until it
            // uncounted: start again as on a new store.
            Some(mark) if mark > current + MINUTE_MS => backfill,
            // After a long stop, minutes past what is kept are not worth counting.
            Some(mark) => mark.max(current - KEEP_MS),
            None => backfill,
        };
        let to = (current + MINUTE_MS)
            .min(from + MINUTES_A_PASS * MINUTE_MS)
            .max(from);
        let final_before = floor_to(now - GRACE_MS, MINUTE_MS).max(from).min(to);

        // Counted outside the write transaction (SQLite's one writer is not held
        // while the minutes are read); a settlement committed meanwhile is in a
        // minute that is not final yet, so the next pass counts it.
        let sql = format!(
            "SELECT source, kind, status, updated_at - (updated_at % {MINUTE_MS}) AS minute, \
             CASE WHEN status IN ('failed', 'uncertain') THEN COALESCE(destination, '') ELSE '' END AS dest, \
             {} AS bucket, COUNT(*) AS n \
             FROM outbox_events \
             WHERE status IN ('completed', 'skipped', 'failed', 'uncertain') \
               AND updated_at >= ? AND updated_at < ? \
             GROUP BY 1, 2, 3, 4, 5, 6",
            bucket_sql()
        );
        let counted = sqlx::query(&self.engine.sql(&sql))
            .bind(from)
            .bind(to)
            .fetch_all(&self.reads)
            .await?;
        let mut minutes: BTreeMap<(i64, String, String, String, String), DeliveryMinute> =
            BTreeMap::new();
        for row in &counted {
            let (minute, source, kind, status, destination) = (
                int(row, "minute")?,
                text(row, "source")?,
                text(row, "kind")?,
                text(row, "status")?,
                text(row, "dest")?,
            );
            let (bucket, n) = (int(row, "bucket")?, int(row, "n")?);
            let entry = minutes
                .entry((
                    minute,
                    source.clone(),
                    kind.clone(),
                    status.clone(),
                    destination.clone(),
                ))
                .or_insert_with(|| DeliveryMinute {
                    latency: if status == "completed" {
                        vec![0; LATENCY_BOUNDS_MS.len() + 1]
                    } else {
                        Vec::new()
                    },
                    minute,
                    source,
                    kind,
                    status,
                    destination,
                    deliveries: 0,
                    oldest_at: None,
                });
            entry.deliveries += n;
            if let Some(slot) = usize::try_from(bucket)
                .ok()
                .and_then(|b| entry.latency.get_mut(b))
            {
                *slot += n;
            }
        }
        let rows = fold_destinations(minutes.into_values().collect());

        let mut tx = self.begin_write().await?;
        sqlx::query(&self.engine.sql(
            "DELETE FROM delivery_minutes WHERE minute >= ? AND minute < ? AND status <> 'pending'",
        ))
        .bind(from)
        .bind(to)
        .execute(&mut *tx)
        .await?;
        for chunk in rows.chunks(INSERT_CHUNK) {
            self.insert_rollups(&mut tx, MINUTES, chunk, "").await?;
        }
        let samples: Vec<DeliveryMinute> = backlog
            .iter()
            .map(|b| DeliveryMinute {
                minute: current,
                source: b.source.clone(),
                kind: b.kind.clone(),
                status: "pending".into(),
                destination: String::new(),
                deliveries: b.deliveries,
                latency: Vec::new(),
                oldest_at: b.oldest_at,
            })
            .collect();
        let resample = self.engine.upsert_tail(
            "minute, source, kind, status, destination",
            &["deliveries", "oldest_at"],
        );
        for chunk in samples.chunks(INSERT_CHUNK) {
            self.insert_rollups(&mut tx, MINUTES, chunk, &resample)
                .await?;
        }

        let kept_from = current - KEEP_MS;
        let quarters_from = match quarters_marked {
            Some(mark) if mark <= floor_to(from, QUARTER_MS) => mark,
            Some(_) => floor_to(from, QUARTER_MS),
            None => kept_from,
        }
        .max(floor_to(kept_from, QUARTER_MS));
        let quarters_to = floor_to(to.max(from + 1) - 1, QUARTER_MS) + QUARTER_MS;
        let minutes = self
            .read_rollup_rows(&mut *tx, MINUTES, quarters_from, quarters_to)
            .await?;
        let quarters = sum_quarters(minutes);
        sqlx::query(&self.engine.sql(&format!(
            "DELETE FROM {QUARTERS} WHERE minute >= ? AND minute < ?"
        )))
        .bind(quarters_from)
        .bind(quarters_to)
        .execute(&mut *tx)
        .await?;
        for chunk in quarters.chunks(INSERT_CHUNK) {
            self.insert_rollups(&mut tx, QUARTERS, chunk, "").await?;
        }

        sqlx::query(&self.engine.sql(
            "UPDATE delivery_rollup_state SET final_before = ?, quarters_before = ? WHERE id = 1",
        ))
        .bind(final_before)
        .bind(floor_to(final_before, QUARTER_MS))
        .execute(&mut *tx)
        .await?;
        for table in [MINUTES, QUARTERS] {
            sqlx::query(
                &self
                    .engine
                    .sql(&format!("DELETE FROM {table} WHERE minute < ?")),
            )
            .bind(kept_from)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(RollupReport {
            from,
            to,
            final_before,
            rows: rows.len() + samples.len(),
            counted: rows.iter().map(|r| r.deliveries).sum(),
            backlog: samples
                .iter()
                .filter(|s| s.source == ALL)
                .map(|s| s.deliveries)
                .sum(),
        })
    }
}

impl SqlStore {
    /// See [`super::ports::DeliveryReads::delivery_rollups`].
    pub(super) async fn read_delivery_rollups(
        &self,
        since_ms: i64,
        grain: RollupGrain,
    ) -> Result<(Vec<DeliveryMinute>, i64), StoreError> {
        let now: i64 = sqlx::query_scalar(&format!("SELECT {}", self.engine.now_ms()))
            .fetch_one(&self.reads)
            .await?;
        let minutes_from = match grain {
            RollupGrain::Minutes => since_ms,
            RollupGrain::QuarterHours => floor_to(now, QUARTER_MS).max(since_ms),
        };
        let mut rows = if minutes_from > since_ms {
            self.read_rollup_rows(&self.reads, QUARTERS, since_ms, minutes_from)
                .await?
        } else {
            Vec::new()
        };
        rows.extend(
            self.read_rollup_rows(&self.reads, MINUTES, minutes_from, i64::MAX)
                .await?,
        );
        Ok((rows, now))
    }

    /// The rows of `table` from `from` (inclusive) to `to`, oldest first.
    async fn read_rollup_rows<'e, E>(
        &self,
        executor: E,
        table: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<DeliveryMinute>, StoreError>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let sql = format!(
            "SELECT minute, source, kind, status, destination, deliveries, latency, oldest_at \
             FROM {table} WHERE minute >= ? AND minute < ? ORDER BY minute"
        );
        let sql = self.engine.sql(&sql);
        let rows = sqlx::query(&sql)
            .bind(from)
            .bind(to)
            .fetch_all(executor)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(DeliveryMinute {
                    minute: int(row, "minute")?,
                    source: text(row, "source")?,
                    kind: text(row, "kind")?,
                    status: text(row, "status")?,
                    destination: text(row, "destination")?,
                    deliveries: int(row, "deliveries")?,
                    latency: parse_latency(opt_text(row, "latency")?.as_deref()),
                    oldest_at: opt_int(row, "oldest_at")?,
                })
            })
            .collect()
    }

    /// Inserts `rows` into `table` in one statement, `tail` after it (an
    /// upsert's, or none).
    async fn insert_rollups(
        &self,
        tx: &mut super::ports::WriteTx,
        table: &str,
        rows: &[DeliveryMinute],
        tail: &str,
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let values = vec!["(?, ?, ?, ?, ?, ?, ?, ?)"; rows.len()].join(", ");
        let sql = format!(
            "INSERT INTO {table} \
             (minute, source, kind, status, destination, deliveries, latency, oldest_at) \
             VALUES {values} {tail}"
        );
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql);
        for row in rows {
            query = query
                .bind(row.minute)
                .bind(&row.source)
                .bind(&row.kind)
                .bind(&row.status)
                .bind(&row.destination)
                .bind(row.deliveries)
                .bind(format_latency(&row.latency))
                .bind(row.oldest_at);
        }
        query.execute(&mut **tx).await?;
        Ok(())
    }
}

/// Keeps the [`DESTINATIONS_A_MINUTE`] destinations with the most deliveries of
/// each minute (or quarter), source, kind and state, and sums the rest, with any
/// [`OTHER_DESTINATIONS`] row already there (a quarter sums minutes that were
/// folded), into one such row. Rows come sorted by that key, then destination.
fn fold_destinations(rows: Vec<DeliveryMinute>) -> Vec<DeliveryMinute> {
    let mut out: Vec<DeliveryMinute> = Vec::with_capacity(rows.len());
    let key = |r: &DeliveryMinute| (r.minute, r.source.clone(), r.kind.clone(), r.status.clone());
    let mut group: Vec<DeliveryMinute> = Vec::new();
    let flush = |group: &mut Vec<DeliveryMinute>, out: &mut Vec<DeliveryMinute>| {
        let (mut named, mut rest): (Vec<_>, Vec<_>) = group
            .drain(..)
            .partition(|r| r.destination != OTHER_DESTINATIONS);
        if named.len() > DESTINATIONS_A_MINUTE {
            named.sort_by(|a, b| {
                b.deliveries
                    .cmp(&a.deliveries)
                    .then_with(|| a.destination.cmp(&b.destination))
            });
            rest.extend(named.split_off(DESTINATIONS_A_MINUTE));
        }
        out.append(&mut named);
        if let Some(first) = rest.first() {
            let mut other = first.clone();
            other.destination = OTHER_DESTINATIONS.to_string();
            other.deliveries = rest.iter().map(|r| r.deliveries).sum();
            out.push(other);
        }
    };
    for row in rows {
        if group.first().is_some_and(|first| key(first) != key(&row)) {
            flush(&mut group, &mut out);
        }
        group.push(row);
    }
    flush(&mut group, &mut out);
    out
}

/// The quarter-hour rows of `minutes`: counts and latency buckets added up; a
/// backlog sample (`pending`) is the quarter's peak, with the oldest commit time
/// any of its minutes saw; failing destinations folded again.
fn sum_quarters(minutes: Vec<DeliveryMinute>) -> Vec<DeliveryMinute> {
    let mut quarters: BTreeMap<(i64, String, String, String, String), DeliveryMinute> =
        BTreeMap::new();
    for m in minutes {
        let key = (
            floor_to(m.minute, QUARTER_MS),
            m.source.clone(),
            m.kind.clone(),
            m.status.clone(),
            m.destination.clone(),
        );
        let quarter = quarters.entry(key).or_insert_with(|| DeliveryMinute {
            minute: floor_to(m.minute, QUARTER_MS),
            deliveries: 0,
            latency: Vec::new(),
            oldest_at: None,
            ..m.clone()
        });
        if m.status == "pending" {
            quarter.deliveries = quarter.deliveries.max(m.deliveries);
            quarter.oldest_at = earliest(quarter.oldest_at, m.oldest_at);
        } else {
            quarter.deliveries += m.deliveries;
        }
        if quarter.latency.len() < m.latency.len() {
            quarter.latency.resize(m.latency.len(), 0);
        }
        for (sum, n) in quarter.latency.iter_mut().zip(&m.latency) {
            *sum += n;
        }
    }
    fold_destinations(quarters.into_values().collect())
}

/// Bucket counts as stored: comma-separated, or NULL when there are none.
fn format_latency(buckets: &[i64]) -> Option<String> {
    (!buckets.is_empty()).then(|| {
        buckets
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// Stored bucket counts back; anything unreadable counts as none.
fn parse_latency(stored: Option<&str>) -> Vec<i64> {
    stored
        .map(|s| {
            s.split(',')
                .map(|n| n.trim().parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_floor_to_their_start() {
        assert_eq!(floor_to(125_000, MINUTE_MS), 120_000);
        assert_eq!(floor_to(120_000, MINUTE_MS), 120_000);
        assert_eq!(floor_to(-1, MINUTE_MS), -60_000);
    }

    #[test]
    fn many_failing_destinations_fold_into_one_row() {
        let row = |destination: String, deliveries: i64| DeliveryMinute {
            minute: 0,
            source: "jobs".into(),
            kind: "callback".into(),
            status: "failed".into(),
            destination,
            deliveries,
            latency: Vec::new(),
            oldest_at: None,
        };
        let rows: Vec<DeliveryMinute> = (0..25)
            .map(|i| row(format!("https://t{i:02}.example"), i + 1))
            .collect();
        let folded = fold_destinations(rows);
        assert_eq!(folded.len(), DESTINATIONS_A_MINUTE + 1);
        assert_eq!(folded[0].deliveries, 25, "the most failures first");
        let other = folded.last().unwrap();
        assert_eq!(other.destination, OTHER_DESTINATIONS);
        assert_eq!(
            other.deliveries,
            1 + 2 + 3 + 4 + 5,
            "the five fewest, summed"
        );
        let total: i64 = folded.iter().map(|r| r.deliveries).sum();
        assert_eq!(total, (1..=25).sum::<i64>(), "nothing lost");
        assert_eq!(fold_destinations(Vec::new()), Vec::new());
    }

    #[test]
    fn latency_buckets_survive_storage() {
        let buckets: Vec<i64> = (0..=LATENCY_BOUNDS_MS.len() as i64).collect();
        let stored = format_latency(&buckets);
        assert_eq!(parse_latency(stored.as_deref()), buckets);
        assert_eq!(format_latency(&[]), None);
        assert!(parse_latency(None).is_empty());
    }
}
