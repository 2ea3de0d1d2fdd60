//! What a run transition writes (issue 9): concurrent transitions are batched,
//! and a batch is one write unit — one guarded `UPDATE … RETURNING` per target
//! state for every run in it, one multi-row `INSERT` for every event they owe —
//! so a batch of a hundred costs a few statements and shares one commit. Each
//! transition still gets its own answer, exactly as if it had run alone.

use std::collections::HashSet;
use std::sync::Arc;

use tracing::Instrument;
use vocab::RunStatus;

use super::{write_batched, ServiceError};
use crate::batcher::{BatchLimits, Batcher};
use crate::jobs::JobsPlanner;
use crate::outbox::hand_off::Offer;
use crate::outbox::model::NewEvent;
use crate::outbox::Outbox;
use crate::store::ports::{Run, RunRepository, WriteTx};
use crate::store::StoreError;
use crate::telemetry::{self, TRACE_TARGET};

/// One requested move, already validated.
#[derive(Clone, Debug)]
pub struct TransitionItem {
    pub run_id: String,
    pub to: RunStatus,
    /// The result as JSON text.
    pub result: Option<String>,
    /// The requester's trace (`traceparent`), frozen with the events the move owes.
    pub trace_parent: Option<String>,
}

/// What a transition did.
pub enum Moved {
    /// The run already stood where the request asked: nothing written.
    Replayed(Run),
    /// The run moved; `events` are what it owes (enqueued unless best effort).
    Transitioned { run: Run, events: Vec<NewEvent> },
}

pub type TransitionOutcome = Result<Moved, ServiceError>;

/// Writes transitions, batched.
#[derive(Clone)]
pub struct TransitionWriter {
    repo: Arc<dyn RunRepository>,
    outbox: Outbox,
    planner: Arc<JobsPlanner>,
    /// Events go to the durable outbox in the transition's transaction; without
    /// one (best effort) they are only returned.
    enqueue: bool,
}

impl TransitionWriter {
    pub fn new(
        repo: Arc<dyn RunRepository>,
        outbox: Outbox,
        planner: Arc<JobsPlanner>,
        enqueue: bool,
    ) -> Self {
        TransitionWriter {
            repo,
            outbox,
            planner,
            enqueue,
        }
    }

    /// Starts the batcher that feeds this writer (needs a Tokio runtime).
    pub fn start(self) -> Batcher<TransitionItem, TransitionOutcome> {
        Batcher::start(BatchLimits::STORE_WRITES, move |items| {
            let writer = self.clone();
            Box::pin(async move { writer.write_batch(items).await })
        })
    }

    /// One write unit for the whole batch (`service::write_batched`): an item's
    /// own verdict (missing, illegal, a repeat) is its alone.
    async fn write_batch(self, items: Vec<TransitionItem>) -> Vec<TransitionOutcome> {
        // One commit for many requests: its span links to each traced one.
        let span =
            tracing::info_span!(target: TRACE_TARGET, "commit transitions", items = items.len());
        for item in &items {
            telemetry::link_to(&span, item.trace_parent.as_deref());
        }
        write_batched(items, |items| self.write_unit(items))
            .instrument(span)
            .await
    }

    async fn write_unit(
        &self,
        items: Vec<TransitionItem>,
    ) -> Result<Vec<TransitionOutcome>, StoreError> {
        let writer = self.clone();
        self.outbox
            .write_offering(move |tx, offer| {
                Box::pin(async move { writer.write_in(tx, items, &offer).await })
            })
            .await
    }

    pub(crate) async fn write_in(
        &self,
        tx: &mut WriteTx,
        items: Vec<TransitionItem>,
        offer: &Offer,
    ) -> Result<Vec<TransitionOutcome>, StoreError> {
        let mut outcomes: Vec<Option<TransitionOutcome>> = items.iter().map(|_| None).collect();
        // The common case, per target state: every run that stands where the
        // move may start, in one statement. A run asked for twice in one batch
        // takes the careful path the second time, after the first has moved it.
        let mut seen = HashSet::new();
        let mut careful = Vec::new();
        let mut by_target: Vec<(RunStatus, Vec<usize>)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if !seen.insert(item.run_id.as_str()) {
                careful.push(i);
                continue;
            }
            match by_target.iter_mut().find(|(to, _)| *to == item.to) {
                Some((_, list)) => list.push(i),
                None => by_target.push((item.to, vec![i])),
            }
        }
        for (to, indexes) in &by_target {
            let from: Vec<RunStatus> = RunStatus::ALL
                .into_iter()
                .filter(|s| s.can_transition_to(*to))
                .collect();
            let moves: Vec<(String, Option<String>)> = indexes
                .iter()
                .map(|&i| (items[i].run_id.clone(), items[i].result.clone()))
                .collect();
            let mut moved = self.repo.transition_from(tx, &moves, &from, *to).await?;
            for &i in indexes {
                match moved.iter().position(|run| run.id == items[i].run_id) {
                    Some(at) => {
                        let run = moved.swap_remove(at);
                        outcomes[i] = Some(Ok(self.transitioned(run, &items[i])));
                    }
                    None => careful.push(i),
                }
            }
        }
        careful.sort_unstable();
        for i in careful {
            outcomes[i] = Some(self.move_locked(tx, &items[i]).await?);
        }
        if self.enqueue {
            let events: Vec<NewEvent> = outcomes
                .iter()
                .filter_map(|o| match o {
                    Some(Ok(Moved::Transitioned { events, .. })) => Some(events.iter().cloned()),
                    _ => None,
                })
                .flatten()
                .collect();
            self.outbox.enqueue_offering_in(tx, &events, offer).await?;
        }
        Ok(outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Err(ServiceError::Internal("a transition was skipped".into())))
            })
            .collect())
    }

    fn transitioned(&self, run: Run, item: &TransitionItem) -> Moved {
        let mut events = if run.status.is_terminal() {
            self.planner.for_terminal(&run, &run.routes)
        } else {
            Vec::new()
        };
        for event in &mut events {
            event.trace_parent.clone_from(&item.trace_parent);
        }
        Moved::Transitioned { run, events }
    }

    /// The careful path: reads the run under its lock to tell a repeat, a
    /// missing run or an illegal move, and applies a legal one. `Err` only for
    /// a store failure (which fails the batch).
    async fn move_locked(
        &self,
        tx: &mut WriteTx,
        item: &TransitionItem,
    ) -> Result<TransitionOutcome, StoreError> {
        let Some(current) = self.repo.lock_run(tx, &item.run_id).await? else {
            return Ok(Err(ServiceError::NotFound(format!(
                "run {:?}",
                item.run_id
            ))));
        };
        let to = item.to;
        // Nothing ever moves to `queued`, so a request for it is never a repeat.
        if current.status == to && to != RunStatus::Queued {
            let same_result =
                parse_json(current.result.as_deref()) == parse_json(item.result.as_deref());
            if !to.is_terminal() || same_result {
                return Ok(Ok(Moved::Replayed(current)));
            }
        }
        if let Some(approval) = &current.approval_id {
            return Ok(Err(ServiceError::Conflict(format!(
                "run {} awaits approval {approval}; it moves once the approval is decided or recalled (POST /api/v1/approvals/{approval}/recall)",
                current.id
            ))));
        }
        if !current.status.can_transition_to(to) {
            return Ok(Err(ServiceError::IllegalTransition {
                current: current.status,
                requested: to,
            }));
        }
        let run = self
            .repo
            .apply_transition(tx, &current, to, item.result.as_deref(), None)
            .await?;
        Ok(Ok(self.transitioned(run, item)))
    }
}

/// JSON text compared as values (key order and spacing do not matter).
pub fn parse_json(text: Option<&str>) -> Option<serde_json::Value> {
    text.and_then(|t| serde_json::from_str(t).ok())
}
