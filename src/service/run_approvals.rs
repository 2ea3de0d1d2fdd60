//! A run's move to `awaiting_approval` that asks for an approval (DESIGN §9, the
//! first hop's commit): the run moves, records the approval it now waits on, and
//! owes one durable `approval_request` — all in one jobs-store transaction. The
//! approval itself is opened by that event's handler in the approvals store
//! (`approvals::run_requests`), which may be another database.

use std::sync::Arc;

use vocab::approvals::{Definition, Target};
use vocab::run_approvals::{run_approval_id, ApprovalAsk, ApprovalRequest};
use vocab::RunStatus;

use super::transitions::Moved;
use super::ServiceError;
use crate::jobs::JobsPlanner;
use crate::outbox::Outbox;
use crate::store::ports::{ApprovalRepository, RunRepository};

#[derive(Clone)]
pub struct ApprovalRequests {
    runs: Arc<dyn RunRepository>,
    /// The jobs store's outbox (the run's store).
    outbox: Outbox,
    planner: Arc<JobsPlanner>,
    /// The approvals store's definitions (read to check the ask; nothing is
    /// written there by this commit).
    definitions: Arc<dyn ApprovalRepository>,
}

impl ApprovalRequests {
    pub fn new(
        runs: Arc<dyn RunRepository>,
        outbox: Outbox,
        planner: Arc<JobsPlanner>,
        definitions: Arc<dyn ApprovalRepository>,
    ) -> Self {
        ApprovalRequests {
            runs,
            outbox,
            planner,
            definitions,
        }
    }

    /// The definition `ask` names, if it approves runs.
    async fn definition(&self, ask: &ApprovalAsk) -> Result<Definition, ServiceError> {
        let definition = self
            .definitions
            .definition(&ask.definition_id, None)
            .await
            .map_err(|err| match ServiceError::from(err) {
                ServiceError::Unavailable(why) => ServiceError::Unavailable(format!(
                    "the approvals store cannot be read to check definition {:?} ({why}); nothing was changed",
                    ask.definition_id
                )),
                other => other,
            })?
            .ok_or_else(|| {
                ServiceError::invalid(
                    "approval",
                    format!("no approval definition is named {:?}", ask.definition_id),
                )
            })?;
        if definition.target() != Target::Run {
            return Err(ServiceError::invalid(
                "approval",
                format!(
                    "definition {} approves {} records, not runs (its target is not \"run\")",
                    definition.id, definition.object
                ),
            ));
        }
        Ok(definition)
    }

    /// Moves the run to `awaiting_approval` on `ask`'s definition. A repeat (the
    /// run already waits on an approval) changes nothing.
    pub async fn request(
        &self,
        requested_by: &str,
        run_id: &str,
        ask: ApprovalAsk,
        result: Option<String>,
    ) -> Result<Moved, ServiceError> {
        let definition = self.definition(&ask).await?;
        let (runs, planner) = (self.runs.clone(), self.planner.clone());
        let events_store = self.outbox.store().clone();
        let (run_id, requested_by) = (run_id.to_string(), requested_by.to_string());
        // The asking request's trace, read here: the write may run on another task.
        let trace_parent = crate::telemetry::current_traceparent();
        self.outbox
            .write(move |tx| {
                Box::pin(async move {
                    let Some(run) = runs.lock_run(tx, &run_id).await? else {
                        return Err(ServiceError::NotFound(format!("run {run_id:?}")));
                    };
                    if run.status == RunStatus::AwaitingApproval && run.approval_id.is_some() {
                        return Ok(Moved::Replayed(run));
                    }
                    if run.status != RunStatus::Running {
                        return Err(ServiceError::Conflict(format!(
                            "run {} is {}; only a running run can ask for approval",
                            run.id,
                            run.status.as_str()
                        )));
                    }
                    if !definition.admits_run_type(&run.run_type) {
                        return Err(ServiceError::invalid(
                            "approval",
                            format!(
                                "definition {} approves runs of type {}, not {}",
                                definition.id,
                                definition.run_types.join(", "),
                                run.run_type
                            ),
                        ));
                    }
                    let approval_id = run_approval_id(&run.id, run.transition_seq + 1);
                    let moved = runs
                        .apply_transition(
                            tx,
                            &run,
                            RunStatus::AwaitingApproval,
                            result.as_deref(),
                            Some(&approval_id),
                        )
                        .await?;
                    let request = ApprovalRequest {
                        approval_id,
                        definition_id: definition.id.clone(),
                        definition_version: definition.version,
                        run_id: moved.id.clone(),
                        run_type: moved.run_type.clone(),
                        tenant: moved.tenant.clone(),
                        requested_by,
                    };
                    let mut event = planner.approval_request(&moved, &request);
                    event.trace_parent = trace_parent;
                    let events = vec![event];
                    events_store.enqueue_all_in(tx, &events).await?;
                    Ok(Moved::Transitioned { run: moved, events })
                })
            })
            .await
    }
}
