//! The retention pass (issue 21): removes what is past its retention — settled
//! events by state and kind (their attempt logs and dead letters with them),
//! terminal runs that own no event any more, audit rows, idempotency keys — in
//! chunks of at most 1,000 rows a transaction, paced so a store's writer stays
//! free for deliveries, by one node at a time (a lease row). Events that are
//! `pending` or `processing` are never candidates.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use vocab::DeliveryStatus;

use super::archive::ArchivePass;
use super::availability::StoreBackoff;
use super::metrics::Metrics;
use crate::store::ports::{ArchiveSink, ChunkRemoved, Expired, KindScope, RetentionStore};
use crate::store::StoreError;

/// The most rows one chunk (one transaction) removes.
pub const MAX_CHUNK_ROWS: u32 = 1_000;
/// The lease that lets one node at a time run a pass on a store.
pub const LEASE_NAME: &str = "retention";
/// How long a pass's lease lasts without renewal. It is renewed before every
/// chunk and only spares the store a second pass (a chunk's rows are locked, so
/// two passes never remove one row twice): a node that dies mid-pass is replaced
/// this long after.
pub const LEASE_MS: i64 = 15_000;
/// Between chunks the pass rests this many times as long as the chunk took, so it
/// holds a store's writer (SQLite has one) at most a quarter of the time.
const REST_FACTOR: u32 = 3;
/// The rest factor while a pass is behind (see [`Pace`]): at the pace above,
/// PostgreSQL at 1,500 runs/s removed 72 % of what came due and its tables grew
/// for an hour; behind, a pass takes half the writer's time until it has caught
/// up.
const CATCH_UP_REST_FACTOR: u32 = 1;
/// A target gives way to the next after this many full chunks, and the pass
/// goes round again: settled events that come due as fast as they are removed
/// (a busy store with a short retention) must not keep runs, audit rows and keys
/// waiting for as long as the load lasts.
pub const CHUNKS_PER_TURN: u32 = 50;
const MIN_REST: Duration = Duration::from_millis(10);
/// Environment variable of the crash tests' pause: `archived:<marker file>` stops
/// a pass after a chunk was archived, before its delete commits.
pub const TEST_PAUSE_ENV: &str = "HERALD_TEST_PAUSE_RETENTION";

/// The states retention applies to: every settled one.
pub const RETAINED_STATES: [DeliveryStatus; 4] = [
    DeliveryStatus::Completed,
    DeliveryStatus::Skipped,
    DeliveryStatus::Failed,
    DeliveryStatus::Uncertain,
];

/// How long each kind of row is kept, in ms (`None`: forever).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Per settled state, for every kind without its own.
    pub events: BTreeMap<DeliveryStatus, Option<i64>>,
    /// A kind's own retention, per state it sets.
    pub kinds: BTreeMap<String, BTreeMap<DeliveryStatus, Option<i64>>>,
    pub runs: Option<i64>,
    pub audit: Option<i64>,
    pub idempotency_keys: Option<i64>,
    pub interval: Duration,
    pub chunk_rows: u32,
    pub archive_dir: Option<PathBuf>,
}

impl RetentionPolicy {
    /// What a pass removes, in order: events (so runs can follow), audit rows,
    /// keys, then runs.
    pub fn targets(&self) -> Vec<Expired> {
        let mut targets = Vec::new();
        for (status, default) in &self.events {
            let mut own = Vec::new();
            for (kind, states) in &self.kinds {
                let Some(kept) = states.get(status) else {
                    continue;
                };
                own.push(kind.clone());
                if let Some(ms) = kept {
                    targets.push(Expired::Events {
                        status: *status,
                        kinds: KindScope::Only(kind.clone()),
                        older_than_ms: *ms,
                        runs_older_than_ms: self.runs,
                    });
                }
            }
            if let Some(ms) = default {
                targets.push(Expired::Events {
                    status: *status,
                    kinds: KindScope::AllBut(own),
                    older_than_ms: *ms,
                    runs_older_than_ms: self.runs,
                });
            }
        }
        if let Some(ms) = self.audit {
            targets.push(Expired::Audit { older_than_ms: ms });
        }
        if let Some(ms) = self.idempotency_keys {
            targets.push(Expired::IdempotencyKeys { older_than_ms: ms });
        }
        if let Some(ms) = self.runs {
            targets.push(Expired::Runs { older_than_ms: ms });
        }
        targets
    }
}

/// What one pass removed, per table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    /// False when another node held the lease (nothing was looked at).
    pub ran: bool,
    pub removed: BTreeMap<&'static str, u64>,
}

/// One store's retention passes.
pub struct Retention {
    pub store: Arc<dyn RetentionStore>,
    pub policy: RetentionPolicy,
    pub metrics: Arc<Metrics>,
    /// The store's name in metrics and logs (its sources: `jobs`, `approvals` or
    /// `jobs+approvals`).
    pub store_name: String,
    /// This node, as the lease names it.
    pub holder: String,
}

impl Retention {
    /// One pass: every target in chunks until nothing more is due. Stops early (and
    /// returns the error) when the store fails or the lease is lost.
    pub async fn run_pass(&self) -> Result<PassReport, StoreError> {
        let mut report = PassReport::default();
        if !self
            .store
            .take_lease(LEASE_NAME, &self.holder, LEASE_MS)
            .await?
        {
            return Ok(report);
        }
        report.ran = true;
        let pause = super::test_pause::TestPause::from_env(TEST_PAUSE_ENV);
        let archive = self.policy.archive_dir.as_ref().map(|dir| PausingArchive {
            inner: ArchivePass::new(dir, &ArchivePass::pass_name()),
            pause,
        });
        let chunk = self.policy.chunk_rows.clamp(1, MAX_CHUNK_ROWS);
        let result = self.remove_all(chunk, archive.as_ref(), &mut report).await;
        self.metrics
            .set_retention_catching_up(&self.store_name, false);
        // Another node may take the next pass; a failed release expires.
        let _ = self.store.release_lease(LEASE_NAME, &self.holder).await;
        result?;
        self.show_oldest_retained().await;
        Ok(report)
    }

    /// Sets `herald_retention_oldest_retained_seconds` from the store: at the end
    /// of a pass, and after every round of one that goes on, so a pass that
    /// cannot keep up with what comes due shows its lag while it lasts (the
    /// figure read only at a pass's end stood at the retention itself while
    /// PostgreSQL at 1,500 runs/s kept events three times as long).
    async fn show_oldest_retained(&self) {
        if let Ok(found) = self.store.oldest_retained().await {
            // A state with no retained event reads 0.
            let ages: Vec<_> = RETAINED_STATES
                .iter()
                .map(|state| {
                    let age = found.iter().find(|(s, _)| s == state).map(|(_, ms)| *ms);
                    (*state, age.unwrap_or(0))
                })
                .collect();
            self.metrics.set_oldest_retained(&self.store_name, &ages);
        }
    }

    /// Every target in turns of at most [`CHUNKS_PER_TURN`] chunks, round after
    /// round, until none has more due (or the lease is lost).
    async fn remove_all(
        &self,
        chunk: u32,
        archive: Option<&PausingArchive>,
        report: &mut PassReport,
    ) -> Result<(), StoreError> {
        let mut due = self.policy.targets();
        while !due.is_empty() {
            let mut still_due = Vec::new();
            for target in due {
                match self.take_turn(&target, chunk, archive, report).await? {
                    Turn::Done => {}
                    Turn::MoreDue => still_due.push(target),
                    Turn::LeaseLost => return Ok(()),
                }
            }
            due = still_due;
            if !due.is_empty() {
                self.show_oldest_retained().await;
            }
        }
        Ok(())
    }

    /// Chunks of `target` until one is not full or the turn is up, resting after
    /// each and renewing the lease before the next.
    async fn take_turn(
        &self,
        target: &Expired,
        chunk: u32,
        archive: Option<&PausingArchive>,
        report: &mut PassReport,
    ) -> Result<Turn, StoreError> {
        let pace = Pace {
            interval: self.policy.interval,
        };
        for _ in 0..CHUNKS_PER_TURN {
            let started = Instant::now();
            let removed = self
                .store
                .remove_expired(target, chunk, archive.map(|a| a as &dyn ArchiveSink))
                .await?;
            for (table, rows) in &removed.tables {
                *report.removed.entry(table).or_default() += rows;
                self.metrics
                    .record_retention_removed(&self.store_name, table, *rows);
            }
            if removed.primary() < u64::from(chunk) {
                return Ok(Turn::Done);
            }
            let catching_up = pace.behind(target, &removed);
            self.metrics
                .set_retention_catching_up(&self.store_name, catching_up);
            tokio::time::sleep(Pace::rest_after(started.elapsed(), catching_up)).await;
            if !self
                .store
                .take_lease(LEASE_NAME, &self.holder, LEASE_MS)
                .await?
            {
                return Ok(Turn::LeaseLost);
            }
        }
        Ok(Turn::MoreDue)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut backoff = StoreBackoff::default();
        let mut pause = self.policy.interval;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {},
                _ = shutdown.cancelled() => return,
            }
            pause = self.policy.interval;
            // A pass is cancelled between statements at shutdown: every chunk is
            // its own transaction, so nothing is left half done.
            let pass = tokio::select! {
                pass = self.run_pass() => pass,
                _ = shutdown.cancelled() => return,
            };
            match pass {
                Ok(report) => {
                    backoff.reset();
                    let total: u64 = report.removed.values().sum();
                    if total > 0 {
                        tracing::info!(store = %self.store_name, removed = ?report.removed,
                            "retention pass removed rows past their retention");
                    }
                }
                Err(err) => {
                    tracing::warn!(store = %self.store_name, error = %err,
                        "retention pass stopped; it resumes on the next one");
                    pause = pause.max(backoff.pause(err.fault()));
                }
            }
        }
    }
}

/// How long a pass rests between chunks: [`REST_FACTOR`] times the chunk's
/// time, or [`CATCH_UP_REST_FACTOR`] times while the pass is behind: the
/// youngest row of its last chunk was past its retention by more than two
/// intervals. Passes that keep up start every interval with rows at most about
/// an interval overdue and end with none; rows two intervals overdue mean the
/// passes have lost a whole pass to what comes due, and at the gentle pace they
/// would keep losing while the tables and their vacuums grow.
struct Pace {
    interval: Duration,
}

impl Pace {
    fn behind(&self, target: &Expired, chunk: &ChunkRemoved) -> bool {
        let allowed = i64::try_from(self.interval.as_millis())
            .unwrap_or(i64::MAX)
            .saturating_mul(2);
        chunk
            .youngest_age_ms
            .is_some_and(|age| age.saturating_sub(target.older_than_ms()) > allowed)
    }

    fn rest_after(chunk_took: Duration, behind: bool) -> Duration {
        let factor = if behind {
            CATCH_UP_REST_FACTOR
        } else {
            REST_FACTOR
        };
        (chunk_took * factor).max(MIN_REST)
    }
}

/// How a target's turn ended.
enum Turn {
    /// Its last chunk was not full: nothing more is due.
    Done,
    /// Every chunk of the turn was full: more may be due, next round.
    MoreDue,
    LeaseLost,
}

/// The pass's archive, with the crash tests' pause after each durable append.
struct PausingArchive {
    inner: ArchivePass,
    pause: Option<super::test_pause::TestPause>,
}

#[async_trait::async_trait]
impl ArchiveSink for PausingArchive {
    async fn append(
        &self,
        table: &'static str,
        rows: Vec<serde_json::Value>,
    ) -> Result<(), std::io::Error> {
        self.inner.append(table, rows).await?;
        super::test_pause::TestPause::at(&self.pause, "archived").await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetentionPolicy {
        RetentionPolicy {
            events: BTreeMap::from([
                (DeliveryStatus::Completed, Some(1_000)),
                (DeliveryStatus::Failed, Some(9_000)),
                (DeliveryStatus::Uncertain, None),
            ]),
            kinds: BTreeMap::from([
                (
                    "callback".to_string(),
                    BTreeMap::from([(DeliveryStatus::Completed, Some(50))]),
                ),
                (
                    "alert".to_string(),
                    BTreeMap::from([(DeliveryStatus::Completed, None)]),
                ),
            ]),
            runs: Some(7),
            audit: None,
            idempotency_keys: Some(3),
            interval: Duration::from_secs(60),
            chunk_rows: 1_000,
            archive_dir: None,
        }
    }

    #[test]
    fn a_pass_rests_three_times_its_chunk_and_once_while_rows_are_two_intervals_overdue() {
        let chunk = Duration::from_millis(230);
        assert_eq!(Pace::rest_after(chunk, false), Duration::from_millis(690));
        assert_eq!(Pace::rest_after(chunk, true), Duration::from_millis(230));
        // A chunk that took no time still lets the writer go between chunks.
        assert_eq!(Pace::rest_after(Duration::ZERO, false), MIN_REST);
        assert_eq!(Pace::rest_after(Duration::ZERO, true), MIN_REST);

        let pace = Pace {
            interval: Duration::from_secs(60),
        };
        let five_minutes = Expired::Runs {
            older_than_ms: 300_000,
        };
        let youngest = |age: Option<i64>| ChunkRemoved {
            tables: vec![("runs", 1_000)],
            youngest_age_ms: age,
        };
        // A pass that keeps up finds rows up to about an interval overdue.
        assert!(!pace.behind(&five_minutes, &youngest(Some(300_000 + 60_000))));
        assert!(!pace.behind(&five_minutes, &youngest(Some(300_000 + 120_000))));
        assert!(pace.behind(&five_minutes, &youngest(Some(300_000 + 120_001))));
        assert!(!pace.behind(&five_minutes, &youngest(None)));
        // Each chunk is measured against its own target's retention.
        let seven_days = Expired::Audit {
            older_than_ms: 7 * 86_400_000,
        };
        assert!(!pace.behind(&seven_days, &youngest(Some(7 * 86_400_000 + 1_000))));
    }

    #[test]
    fn a_kind_of_its_own_is_left_out_of_its_state_default_and_never_means_no_target() {
        let targets = policy().targets();
        assert_eq!(
            targets,
            vec![
                Expired::Events {
                    status: DeliveryStatus::Completed,
                    kinds: KindScope::Only("callback".into()),
                    older_than_ms: 50,
                    runs_older_than_ms: Some(7),
                },
                Expired::Events {
                    status: DeliveryStatus::Completed,
                    kinds: KindScope::AllBut(vec!["alert".into(), "callback".into()]),
                    older_than_ms: 1_000,
                    runs_older_than_ms: Some(7),
                },
                Expired::Events {
                    status: DeliveryStatus::Failed,
                    kinds: KindScope::AllBut(vec![]),
                    older_than_ms: 9_000,
                    runs_older_than_ms: Some(7),
                },
                Expired::IdempotencyKeys { older_than_ms: 3 },
                Expired::Runs { older_than_ms: 7 },
            ]
        );
    }
}
