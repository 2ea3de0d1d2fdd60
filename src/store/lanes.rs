//! Ordered lanes in the store (issue 22, docs/ORDERING.md): joining a lane inside
//! the producer's transaction, leaving it when an event is completed or skipped,
//! the operator's skip of a lane's head (audited in its transaction), and the
//! list of blocked lanes the Deliveries page shows.

use sqlx::AnyConnection;
use vocab::DeliveryStatus;

use super::engine::placeholders;
use super::error::StoreError;
use super::events::{BlockedLane, BlockedLanes, RetryRefusal, LANE_PARKED_AT};
use super::outbox::{event_from_row, SeenEvent, EVENT_COLUMNS};
use super::ports::{ManualSkip, NewAuditEntry, WriteTx};
use super::row::{int, opt_int, text};
use super::sql::SqlStore;

/// The states that hold a lane until an operator acts.
const BLOCKING: &str = "'failed', 'uncertain'";

/// That member `m` heads its lane: only open members are in `lane_members`, so
/// the lowest sequence number is the one a claim may take (a lookup by the
/// `(lane, seq)` key, never a join of a lane's members with each other).
const HEADS: &str = "m.seq = (SELECT MIN(x.seq) FROM lane_members x WHERE x.lane = m.lane)";

/// Makes due at `now` (an SQL expression) the parked pending events whose id is `event_id_is` (a
/// condition that reads `lane_members` only: MySQL refuses a subquery on the
/// table it updates, error 1093).
fn unpark(now: &str, event_id_is: &str) -> String {
    format!(
        "UPDATE outbox_events SET next_attempt_at = {now} \
         WHERE next_attempt_at = {LANE_PARKED_AT} AND status = 'pending' AND event_id {event_id_is}"
    )
}

impl SqlStore {
    /// Makes `event_id` the next member of `lane`: its sequence number is taken
    /// and bumped in `tx`, whose lock on the lane's row lasts until the commit,
    /// so a later transaction on the lane gets a higher number and commits after
    /// it. An event already in a lane (an enqueue replayed) keeps its place; the
    /// number it took is a gap, which orders nothing.
    pub(super) async fn join_lane(
        &self,
        tx: &mut WriteTx,
        lane: &str,
        event_id: &str,
    ) -> Result<(), StoreError> {
        let bump = format!(
            "INSERT INTO lane_sequences (lane, next_seq) VALUES (?, 1) {}",
            self.engine
                .increment_tail("lane", "lane_sequences", "next_seq")
        );
        sqlx::query(&self.engine.sql(&bump))
            .bind(lane)
            .execute(&mut **tx)
            .await?;
        let seq: i64 = sqlx::query_scalar(
            &self
                .engine
                .sql("SELECT next_seq FROM lane_sequences WHERE lane = ?"),
        )
        .bind(lane)
        .fetch_one(&mut **tx)
        .await?;
        // Not an event that is done already (an enqueue replayed after it was
        // delivered): its lane must not wait for it again.
        let done: Option<String> = sqlx::query_scalar(&self.engine.sql(
            "SELECT event_id FROM outbox_events WHERE event_id = ? AND status IN ('completed', 'skipped')",
        ))
        .bind(event_id)
        .fetch_optional(&mut **tx)
        .await?;
        if done.is_some() {
            return Ok(());
        }
        let join = format!(
            "INSERT INTO lane_members (lane, seq, event_id) VALUES (?, ?, ?) {}",
            self.engine.insert_if_absent_tail("event_id")
        );
        sqlx::query(&self.engine.sql(&join))
            .bind(lane)
            .bind(seq)
            .bind(event_id)
            .execute(&mut **tx)
            .await?;
        // Behind an open member: parked, so claims (which scan due events) never
        // look at it until it heads its lane (`leave_lanes` makes it due).
        let park = format!(
            "UPDATE outbox_events SET next_attempt_at = {LANE_PARKED_AT} \
             WHERE event_id = ? AND status = 'pending' \
             AND (SELECT seq FROM lane_members WHERE event_id = ?) > \
             (SELECT MIN(seq) FROM lane_members WHERE lane = ?)"
        );
        sqlx::query(&self.engine.sql(&park))
            .bind(event_id)
            .bind(event_id)
            .bind(lane)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Takes `event_ids` out of their lanes (they are completed, skipped or
    /// removed), in the transaction that says so, and makes each lane's new head
    /// due now if it was parked; returns how many members left. An event in no
    /// lane changes nothing.
    pub(super) async fn leave_lanes(
        &self,
        conn: &mut AnyConnection,
        event_ids: &[&str],
    ) -> Result<u64, StoreError> {
        let mut left = 0;
        for chunk in event_ids.chunks(500) {
            let mut lanes: Vec<String> = {
                let sql = format!(
                    "SELECT DISTINCT lane FROM lane_members WHERE event_id IN ({})",
                    placeholders(chunk.len())
                );
                let sql = self.engine.sql(&sql);
                let mut query = sqlx::query_scalar(&sql);
                for id in chunk {
                    query = query.bind(*id);
                }
                query.fetch_all(&mut *conn).await?
            };
            if lanes.is_empty() {
                continue;
            }
            // Take each lane's sequence row lock, in lane order as producers
            // join: a member joining now either commits before the unpark below
            // (which then sees it) or decides whether to park after this commits
            // (and sees this delete). SQLite's one writer already serialises both.
            lanes.sort();
            let lock = self.engine.lock_rows();
            if !lock.is_empty() {
                let sql = format!("SELECT next_seq FROM lane_sequences WHERE lane = ?{lock}");
                let sql = self.engine.sql(&sql);
                for lane in &lanes {
                    sqlx::query(&sql)
                        .bind(lane)
                        .fetch_optional(&mut *conn)
                        .await?;
                }
            }
            let sql = format!(
                "DELETE FROM lane_members WHERE event_id IN ({})",
                placeholders(chunk.len())
            );
            let sql = self.engine.sql(&sql);
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(*id);
            }
            left += query.execute(&mut *conn).await?.rows_affected();
            self.unpark_heads(conn, &lanes).await?;
        }
        Ok(left)
    }

    /// Makes the head of each of `lanes` due now if it is parked: one statement
    /// a lane, each finding its head through the `(lane, seq)` key, however long
    /// the lane.
    async fn unpark_heads(
        &self,
        conn: &mut AnyConnection,
        lanes: &[String],
    ) -> Result<(), StoreError> {
        let sql = unpark(
            self.engine.now_ms(),
            "= (SELECT event_id FROM lane_members WHERE lane = ? ORDER BY seq LIMIT 1)",
        );
        let sql = self.engine.sql(&sql);
        for lane in lanes {
            sqlx::query(&sql).bind(lane).execute(&mut *conn).await?;
        }
        Ok(())
    }

    /// Makes due every parked lane head, however it was left parked (an
    /// isolation level weaker than the lane locks assume): run by each
    /// maintenance pass, so a lane never waits longer than one pass for that.
    pub(super) async fn unpark_stranded_heads(&self) -> Result<u64, StoreError> {
        let heads = format!("IN (SELECT m.event_id FROM lane_members m WHERE {HEADS})");
        let sql = unpark(self.engine.now_ms(), &heads);
        let stranded = sqlx::query(&sql).execute(&self.pool).await?.rows_affected();
        if stranded > 0 {
            tracing::warn!(
                stranded,
                "parked lane heads made due by the maintenance pass"
            );
        }
        Ok(stranded)
    }

    /// An operator's skip inside `tx`: a compare-and-set on the state and cycle
    /// they saw, the reason kept as the event's last error, the event out of its
    /// lane (so the next one may go) and the audit row, all in `tx`.
    pub(super) async fn skip_in(
        &self,
        tx: &mut WriteTx,
        request: &ManualSkip,
    ) -> Result<Result<(), RetryRefusal>, StoreError> {
        let expected = request.expected_status;
        match expected {
            DeliveryStatus::Failed => {}
            DeliveryStatus::Uncertain if request.allow_uncertain => {}
            DeliveryStatus::Uncertain => return Ok(Err(RetryRefusal::SkipNeedsAcknowledgement)),
            other => return Ok(Err(RetryRefusal::NotSkippable(other.as_str().to_string()))),
        }
        let seen = SeenEvent {
            event_id: &request.event_id,
            kind: &request.kind,
            status: expected,
            cycle: request.expected_cycle,
        };
        let set = "status = 'skipped', last_error = ?, lease_token = NULL, lease_holder = NULL, \
             lease_expires_at = NULL";
        let why = format!("skipped by {}: {}", request.actor, request.reason);
        if let Err(refusal) = self.change_seen(tx, set, why, &seen).await? {
            return Ok(Err(refusal));
        }
        self.leave_lanes(tx, &[request.event_id.as_str()]).await?;
        let entry = NewAuditEntry {
            subject: request.event_id.clone(),
            action: "skip".into(),
            actor: request.actor.clone(),
            from_status: expected.as_str().to_string(),
            acknowledged_duplicate_risk: false,
            affected: 1,
            reason: Some(request.reason.clone()),
        };
        self.insert_audit(&mut **tx, &entry).await?;
        Ok(Ok(()))
    }

    /// The lane `event_id` was skipped out of, if it is a skipped event of a lane
    /// (only an operator's skip of a head ends a laned event so): the events
    /// behind it have gone on, so it must not be sent again out of its order.
    pub(super) async fn skipped_out_of_lane(
        &self,
        tx: &mut WriteTx,
        event_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let lane: Option<Option<String>> = sqlx::query_scalar(
            &self
                .engine
                .sql("SELECT lane FROM outbox_events WHERE event_id = ? AND status = 'skipped'"),
        )
        .bind(event_id)
        .fetch_optional(&mut **tx)
        .await?;
        Ok(lane.flatten())
    }

    /// The lanes whose head waits for an operator (`failed` or `uncertain`),
    /// longest blocked first, at most `limit`, each with how many wait behind it.
    /// Only open members are in `lane_members`, so this reads few rows.
    pub(super) async fn list_blocked_lanes(
        &self,
        limit: u32,
    ) -> Result<Vec<BlockedLane>, StoreError> {
        let columns = EVENT_COLUMNS
            .split(", ")
            .map(|c| format!("e.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {columns}, m.lane AS lane_key, \
             (SELECT COUNT(*) FROM lane_members w WHERE w.lane = m.lane AND w.seq > m.seq) AS waiting \
             FROM lane_members m JOIN outbox_events e ON e.event_id = m.event_id \
             WHERE e.status IN ({BLOCKING}) AND {HEADS} \
             ORDER BY e.updated_at, e.event_id LIMIT {limit}"
        );
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                Ok(BlockedLane {
                    lane: text(row, "lane_key")?,
                    head: event_from_row(row)?,
                    waiting: int(row, "waiting")?,
                })
            })
            .collect()
    }

    /// The blocked lanes counted by their head's source and kind, for metrics.
    pub(super) async fn count_blocked_lanes(&self) -> Result<Vec<BlockedLanes>, StoreError> {
        let sql = format!(
            "SELECT e.source, e.kind, COUNT(*) AS n, MIN(e.updated_at) AS oldest \
             FROM lane_members m JOIN outbox_events e ON e.event_id = m.event_id \
             WHERE e.status IN ({BLOCKING}) AND {HEADS} GROUP BY e.source, e.kind"
        );
        sqlx::query(&sql)
            .fetch_all(&self.reads)
            .await?
            .iter()
            .map(|r| {
                Ok(BlockedLanes {
                    source: text(r, "source")?,
                    kind: text(r, "kind")?,
                    lanes: int(r, "n")?,
                    oldest_blocked_at: opt_int(r, "oldest")?,
                })
            })
            .collect()
    }

    /// How many lanes have an open member (flowing or blocked).
    pub(super) async fn count_open_lanes(&self) -> Result<i64, StoreError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT lane) FROM lane_members")
            .fetch_one(&self.pool)
            .await?;
        Ok(n)
    }
}
