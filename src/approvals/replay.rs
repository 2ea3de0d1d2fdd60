//! The `field_update` handler: replays a lifecycle transition's frozen FieldUpdate
//! instructions (seed 000 "Worker Design", extended by issue 22 from Recall to
//! Submit, Approve and Reject: docs/ORDERING.md). Claimed like every kind; runs in a fresh write
//! transaction in system context; writes each instruction's **frozen** target
//! (never re-resolving a lookup); skips a field that already holds the value; and
//! completes the event, fenced on its lease, in the same transaction as the
//! mutation. Any failure rolls the mutation back and leaves the event to the
//! engine's fenced retry/fail path.

use std::sync::Arc;

use async_trait::async_trait;

use super::model::{LifecycleEvent, ReplayPayload};
use crate::outbox::handler::{Handler, Outcome};
use crate::outbox::metrics::Metrics;
use crate::outbox::model::{ClaimedEvent, Settle, Settlement};
use crate::outbox::test_pause::TestPause;
use crate::store::ports::ApprovalsStore;
use crate::store::StoreError;

/// Test-only: `HERALD_TEST_PAUSE_REPLAY=<stage>:<marker file>` makes the handler
/// write the marker file and sleep at `stage` (`claimed`, `mid_update`,
/// `committed`), so a crash test can SIGKILL the process at that exact point.
/// Never set it in production.
pub const TEST_PAUSE_ENV: &str = "HERALD_TEST_PAUSE_REPLAY";

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("the replay payload is invalid: {0}")]
    InvalidPayload(String),
    #[error("target record {record_id} ({object}) does not exist")]
    TargetMissing { object: String, record_id: String },
    #[error("target record {record_id} is a {actual}, not the frozen {object}")]
    TargetObjectChanged {
        object: String,
        record_id: String,
        actual: String,
    },
    #[error("the lease was lost before the replay committed; rolled back")]
    LeaseLost,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How one replay ended.
#[derive(Debug, PartialEq, Eq)]
pub struct Replayed {
    /// Instructions that wrote their field.
    pub applied: usize,
    /// Instructions whose field already held the value.
    pub skipped: usize,
}

pub struct ReplayHandler {
    store: Arc<dyn ApprovalsStore>,
    pause: Option<TestPause>,
}

/// Checks what the payload promises: at least one complete instruction.
pub fn validate(payload: &ReplayPayload) -> Result<(), ReplayError> {
    if payload.instructions.is_empty() {
        return Err(ReplayError::InvalidPayload("no instructions".into()));
    }
    for i in &payload.instructions {
        if i.target.object.is_empty() || i.target.record_id.is_empty() || i.target.field.is_empty()
        {
            return Err(ReplayError::InvalidPayload(format!(
                "action {:?} has no complete frozen target",
                i.action_id
            )));
        }
    }
    Ok(())
}

impl ReplayHandler {
    pub fn new(store: impl ApprovalsStore + 'static) -> Self {
        ReplayHandler {
            store: Arc::new(store),
            pause: TestPause::from_env(TEST_PAUSE_ENV),
        }
    }

    async fn pause_at(&self, stage: &str) {
        TestPause::at(&self.pause, stage).await
    }

    /// Applies the instructions and completes the event under `lease_token`, all in
    /// one transaction.
    pub async fn replay(
        &self,
        event_id: &str,
        lease_token: &str,
        payload: &ReplayPayload,
    ) -> Result<Replayed, ReplayError> {
        validate(payload)?;
        let mut tx = self.store.begin_write().await?;
        let mut done = Replayed {
            applied: 0,
            skipped: 0,
        };
        for instruction in &payload.instructions {
            let target = &instruction.target;
            let record = self
                .store
                .lock_record(&mut tx, &target.record_id)
                .await?
                .ok_or_else(|| ReplayError::TargetMissing {
                    object: target.object.clone(),
                    record_id: target.record_id.clone(),
                })?;
            if record.object != target.object {
                return Err(ReplayError::TargetObjectChanged {
                    object: target.object.clone(),
                    record_id: target.record_id.clone(),
                    actual: record.object,
                });
            }
            if record.fields.get(&target.field) == Some(&instruction.value) {
                done.skipped += 1;
                continue;
            }
            let mut fields = record.fields.clone();
            fields.insert(target.field.clone(), instruction.value.clone());
            self.store
                .write_record_fields(&mut tx, &record, &fields)
                .await?;
            done.applied += 1;
        }
        self.pause_at("mid_update").await;
        if !self
            .store
            .complete_in(&mut tx, event_id, lease_token)
            .await?
        {
            tx.rollback().await.map_err(StoreError::from)?;
            return Err(ReplayError::LeaseLost);
        }
        tx.commit().await.map_err(StoreError::from)?;
        Ok(done)
    }
}

#[async_trait]
impl Handler for ReplayHandler {
    async fn handle(&self, event: &ClaimedEvent) -> Outcome {
        let payload: ReplayPayload =
            match crate::channels::read_payload(&event.payload, "field_update") {
                Ok(payload) => payload,
                Err(outcome) => return outcome,
            };
        if let Err(err) = validate(&payload) {
            return Outcome::Permanent {
                error: err.to_string(),
                status_code: None,
            };
        }
        self.pause_at("claimed").await;
        match self
            .replay(&event.event_id, &event.lease_token, &payload)
            .await
        {
            Ok(done) => {
                tracing::info!(event_id = %event.event_id, applied = done.applied,
                    skipped = done.skipped, lifecycle_event = payload.lifecycle_event.label(),
                    "field updates replayed");
                self.pause_at("committed").await;
                Outcome::Delivered { status_code: None }
            }
            Err(err) => Outcome::Retryable {
                error: err.to_string(),
                status_code: None,
                retry_after: None,
            },
        }
    }

    fn settled(&self, settlement: &Settlement, metrics: &Metrics) {
        let lifecycle_event = lifecycle_label(&settlement.event_id);
        metrics.record_replay_attempt(lifecycle_event, settlement.settle.outcome_label());
        if matches!(settlement.settle, Settle::Failed { .. }) {
            metrics.record_replay_exhausted(lifecycle_event);
        }
    }

    fn swept_failed(&self, event_id: &str, metrics: &Metrics) {
        metrics.record_replay_exhausted(lifecycle_label(event_id));
    }
}

/// The metric label of the lifecycle event a replay's id names (`unknown` for an
/// id of another shape, so a label never holds an id).
fn lifecycle_label(event_id: &str) -> &'static str {
    LifecycleEvent::of_replay_id(event_id).map_or("unknown", LifecycleEvent::label)
}
