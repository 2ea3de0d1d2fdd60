//! The `run_continuation` handler (DESIGN §9, the second hop): a run approval's
//! decision or recall committed this event in the approvals store; the handler
//! moves the run in the jobs store — approved or recalled: back to `running`,
//! rejected: `cancelled` — with every event that move owes, in one jobs-store
//! transaction. The move is guarded on the run still waiting on this very approval
//! (whose id names the transition that paused it), so a redelivered continuation
//! (its acknowledgement lost to a crash) finds the run moved and changes nothing.

use std::sync::Arc;

use async_trait::async_trait;
use vocab::run_approvals::{RunContinuation, RunDecision};
use vocab::RunStatus;

use super::planner::JobsPlanner;
use crate::outbox::handler::{Handler, Outcome};
use crate::outbox::model::ClaimedEvent;
use crate::outbox::test_pause::TestPause;
use crate::outbox::Outbox;
use crate::store::ports::RunRepository;
use crate::store::StoreError;

/// Test-only (`outbox::test_pause`): `continuing` (claimed, nothing written) or
/// `continued` (the run moved, the continuation not yet acknowledged).
pub const TEST_PAUSE_ENV: &str = "HERALD_TEST_PAUSE_CONTINUATION";

/// What one delivery of a continuation found.
#[derive(Debug, PartialEq, Eq)]
pub enum Continued {
    /// It moved the run now.
    Now { to: RunStatus, events: usize },
    /// The run no longer waits on this approval: an earlier delivery moved it.
    Already { status: RunStatus },
    /// The run is gone.
    Missing,
}

pub struct RunContinuer {
    runs: Arc<dyn RunRepository>,
    /// The jobs store's outbox: what the move owes commits with it.
    outbox: Outbox,
    planner: Arc<JobsPlanner>,
    pause: Option<TestPause>,
}

impl RunContinuer {
    pub fn new(runs: Arc<dyn RunRepository>, outbox: Outbox, planner: Arc<JobsPlanner>) -> Self {
        RunContinuer {
            runs,
            outbox,
            planner,
            pause: TestPause::from_env(TEST_PAUSE_ENV),
        }
    }

    /// Applies `continuation` unless the run no longer waits on its approval.
    pub async fn apply(&self, continuation: RunContinuation) -> Result<Continued, StoreError> {
        let (runs, planner) = (self.runs.clone(), self.planner.clone());
        let events_store = self.outbox.store().clone();
        // Read here, under the decision's delivery: the write below may run on
        // another task, where that span is not current.
        let trace_parent = crate::telemetry::current_traceparent();
        self.outbox
            .write(move |tx| {
                Box::pin(async move {
                    let Some(run) = runs.lock_run(tx, &continuation.run_id).await? else {
                        return Ok(Continued::Missing);
                    };
                    if run.status != RunStatus::AwaitingApproval
                        || run.approval_id.as_deref() != Some(continuation.approval_id.as_str())
                    {
                        return Ok(Continued::Already { status: run.status });
                    }
                    let to = match continuation.decision {
                        RunDecision::Approved | RunDecision::Recalled => RunStatus::Running,
                        RunDecision::Rejected => RunStatus::Cancelled,
                    };
                    let moved = runs
                        .apply_transition(tx, &run, to, run.result.as_deref(), None)
                        .await?;
                    let mut events = planner.for_continuation(
                        &moved,
                        &continuation.approval_id,
                        continuation.decision,
                        &continuation.by,
                    );
                    for event in &mut events {
                        event.trace_parent.clone_from(&trace_parent);
                    }
                    events_store.enqueue_all_in(tx, &events).await?;
                    Ok(Continued::Now {
                        to,
                        events: events.len(),
                    })
                })
            })
            .await
    }
}

#[async_trait]
impl Handler for RunContinuer {
    async fn handle(&self, event: &ClaimedEvent) -> Outcome {
        let continuation: RunContinuation =
            match crate::channels::read_payload(&event.payload, "run_continuation") {
                Ok(continuation) => continuation,
                Err(outcome) => return outcome,
            };
        TestPause::at(&self.pause, "continuing").await;
        let (run_id, decision) = (continuation.run_id.clone(), continuation.decision);
        match self.apply(continuation).await {
            Ok(Continued::Now { to, events }) => {
                tracing::info!(run_id = %run_id, decision = decision.as_str(), status = to.as_str(), events, "run continued after its approval");
                TestPause::at(&self.pause, "continued").await;
                Outcome::Delivered { status_code: None }
            }
            Ok(Continued::Already { .. }) => Outcome::Delivered { status_code: None },
            Ok(Continued::Missing) => Outcome::Permanent {
                error: format!("run {run_id} does not exist in the jobs store"),
                status_code: None,
            },
            Err(err) => {
                crate::outbox::handler::hop_failed("cannot move the run in the jobs store", &err)
            }
        }
    }
}
