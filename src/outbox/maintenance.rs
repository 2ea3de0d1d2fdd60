//! The maintenance loop: finds expired in-flight leases that must not be resent
//! (non-redeliverable kinds become `uncertain`; spent cycles become `failed`) and
//! refreshes the outbox gauges; beside it, the hot tables are kept small
//! (`store::upkeep`).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::availability::{StoreBackoff, StoreHealth};
use super::metrics::Metrics;
use super::model::DeadLetterNotifier;
use super::rollup::RollupPasses;
use crate::store::ports::{OutboxStore, SweepReport};

/// Rows one sweep looks at, so start-up recovery of a large backlog stays bounded.
pub const SWEEP_BATCH: u32 = 500;
/// Settled events (most of the table) are counted on every this-many passes only:
/// at millions of rows a count takes a while and, on SQLite, the one connection.
pub const SETTLED_COUNT_EVERY: u64 = 12;

pub struct Maintenance {
    pub store: Arc<dyn OutboxStore>,
    pub metrics: Arc<Metrics>,
    /// The sources this store holds, for availability and gauges.
    pub sources: Vec<&'static str>,
    pub interval: Duration,
    pub dead_letter: Option<DeadLetterNotifier>,
    /// The handlers of the kinds this store holds, told about swept failures.
    pub registries: Vec<Arc<super::handler::Registry>>,
    /// Passes so far (the first counts everything).
    pub passes: std::sync::atomic::AtomicU64,
    /// The store's availability (shared with its workers): each pass reports to it.
    pub health: Arc<StoreHealth>,
    /// The overview's rollups, recounted after the counts when due.
    pub rollups: Option<RollupPasses>,
}

impl Maintenance {
    /// One pass: sweep, then refresh gauges. Returns whether the store answered.
    pub async fn run_once(&self) -> bool {
        let began = std::time::Instant::now();
        // What the sweep committed is signalled even when it stopped on an error.
        let mut report = SweepReport::default();
        let swept = self
            .store
            .sweep_expired(SWEEP_BATCH, self.dead_letter.as_ref(), &mut report)
            .await;
        for (event_id, kind) in &report.uncertain {
            self.metrics.record_swept_uncertain(kind);
            tracing::warn!(event_id = %event_id, kind = %kind,
                "delivery outcome unknown after its lease expired; marked uncertain (an operator must check the receiver before retrying)");
        }
        for (event_id, kind) in &report.failed {
            self.metrics.record_exhausted(kind);
            if let Some(registration) = self.registries.iter().find_map(|r| r.get(kind)) {
                registration.handler.swept_failed(event_id, &self.metrics);
            }
            tracing::error!(event_id = %event_id, kind = %kind,
                "OPERATOR_ALERT: event failed after its last attempt's lease expired; dead-lettered");
        }
        if let Err(err) = &swept {
            self.health.failed(err);
        }
        let pass = self
            .passes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stats = self
            .store
            .stats(pass.is_multiple_of(SETTLED_COUNT_EVERY))
            .await;
        match &stats {
            Ok(stats) => {
                for source in &self.sources {
                    self.metrics.refresh(source, stats, stats.now_ms);
                }
                if let Some(rollups) = &self.rollups {
                    // The overview lags while this fails; delivery does not.
                    if let Err(err) = rollups.run_if_due(stats).await {
                        tracing::warn!(error = %err, "could not recount the overview's rollups");
                    }
                }
            }
            Err(err) => {
                self.health.failed(err);
            }
        }
        let available = swept.is_ok() && stats.is_ok();
        if available {
            self.health.succeeded(began);
        }
        available
    }

    pub async fn run(self, shutdown: CancellationToken) {
        // Beside the passes, not in them: a VACUUM of a large table takes seconds,
        // and sweeps must not wait for it.
        let tidying = tokio::spawn(tidy_loop(
            self.store.clone(),
            self.interval,
            shutdown.clone(),
        ));
        self.pass_loop(shutdown).await;
        let _ = tidying.await;
    }

    async fn pass_loop(self, shutdown: CancellationToken) {
        let mut backoff = StoreBackoff::default();
        loop {
            // While the store fails, passes back off (but never come faster than usual).
            let pause = if self.run_once().await {
                backoff.reset();
                self.interval
            } else {
                self.interval
                    .max(backoff.pause(crate::store::StoreFault::Unreachable))
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {},
                _ = shutdown.cancelled() => return,
            }
        }
    }
}

/// Keeps the store's hot tables small where the engine needs it
/// (`OutboxStore::tidy_hot_tables`), checking every `interval`.
async fn tidy_loop(store: Arc<dyn OutboxStore>, interval: Duration, shutdown: CancellationToken) {
    // A store that fails is asked less often, like by the passes (one connection
    // attempt per check would otherwise hammer a database that is down).
    let mut backoff = StoreBackoff::default();
    let mut pause = interval;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(pause) => {},
            _ = shutdown.cancelled() => return,
        }
        pause = interval;
        match store.tidy_hot_tables().await {
            Ok(tidied) => {
                backoff.reset();
                for t in tidied {
                    tracing::info!(
                        table = t.table,
                        dead_rows = t.dead_rows,
                        took_ms = t.took.as_millis() as u64,
                        "vacuumed and analyzed a hot table"
                    );
                }
            }
            // The passes report the store's availability; this only waits longer.
            Err(err) => {
                tracing::debug!(error = %err, "could not tidy the hot tables");
                pause = interval.max(backoff.pause(err.fault()));
            }
        }
    }
}
