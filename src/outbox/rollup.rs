//! The overview's per-minute rollups (`store::rollups`), recounted by the
//! maintenance pass of one node at a time: the node holding the lease recounts
//! every `rollup_interval_ms`, and another node takes over once it stops.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::OncePer;
use crate::store::events::OutboxStats;
use crate::store::rollups::{BacklogSample, DeliveryRollups, RollupReport, ALL};
use crate::store::StoreError;

/// The lease (`maintenance_leases`) the recounting node holds.
pub const LEASE_NAME: &str = "delivery-rollups";
/// Past this without a renewal, another node recounts.
pub const LEASE_MS: i64 = 60_000;

/// One store's rollup passes, run from its maintenance loop.
pub struct RollupPasses {
    store: Arc<dyn DeliveryRollups>,
    /// This node, as the lease names it.
    holder: String,
    /// A pass at most once every `rollup_interval_ms`.
    due: OncePer,
    /// What the last pass counted (window start, settled, backlog): a pass that
    /// counts something else tells open pages (`crate::changes`).
    last_counted: std::sync::Mutex<Option<(i64, i64, i64)>>,
}

impl RollupPasses {
    pub fn new(store: Arc<dyn DeliveryRollups>, holder: String, every: Duration) -> Self {
        RollupPasses {
            store,
            holder,
            due: OncePer::new(every),
            last_counted: Default::default(),
        }
    }

    /// Recounts when a pass is due and this node holds the lease, recording the
    /// backlog maintenance just counted. `None`: not due, or another node's turn.
    pub async fn run_if_due(
        &self,
        stats: &OutboxStats,
    ) -> Result<Option<RollupReport>, StoreError> {
        if !self.due.due() {
            return Ok(None);
        }
        if !self
            .store
            .take_lease(LEASE_NAME, &self.holder, LEASE_MS)
            .await?
        {
            return Ok(None);
        }
        let report = match self.store.roll_up(&backlog(stats)).await {
            Ok(report) => report,
            Err(err) => {
                // Another node may be able to count: a failing node gives the
                // lease back rather than holding it (a failed release expires).
                let _ = self.store.release_lease(LEASE_NAME, &self.holder).await;
                return Err(err);
            }
        };
        let counted = Some((report.from, report.counted, report.backlog));
        let changed = {
            let mut last = self.last_counted.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut *last, counted) != counted
        };
        if changed {
            crate::changes::notify();
        }
        Ok(Some(report))
    }
}

/// Pending and in-flight deliveries per source and kind, and the oldest
/// pending one's commit time, from maintenance's counts; the first sample is
/// the whole store's ([`ALL`]).
pub fn backlog(stats: &OutboxStats) -> Vec<BacklogSample> {
    let mut samples: Vec<BacklogSample> = vec![BacklogSample {
        source: ALL.into(),
        kind: ALL.into(),
        deliveries: 0,
        oldest_at: None,
    }];
    for row in stats
        .rows
        .iter()
        .filter(|r| r.status == "pending" || r.status == "processing")
    {
        let at = match samples
            .iter()
            .position(|s| s.source == row.source && s.kind == row.kind)
        {
            Some(at) => at,
            None => {
                samples.push(BacklogSample {
                    source: row.source.clone(),
                    kind: row.kind.clone(),
                    deliveries: 0,
                    oldest_at: None,
                });
                samples.len() - 1
            }
        };
        for at in [0, at] {
            let sample = &mut samples[at];
            sample.deliveries += row.count;
            sample.oldest_at = match (sample.oldest_at, row.oldest_pending_created_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    samples
}
