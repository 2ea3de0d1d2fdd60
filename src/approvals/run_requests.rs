//! The `approval_request` handler (DESIGN §9, the first hop): a run's move to
//! `awaiting_approval` committed this event in the jobs store; the handler opens
//! the approval it names in the approvals store — the instance, its first step's
//! node and work item, the step's prompt `approval_<id>` and the Submit alerts — in
//! one approvals-store transaction. The approval's id is deterministic from the
//! run and its transition, so a redelivered request (its acknowledgement lost to
//! a crash) finds the approval open and changes nothing.

use std::sync::Arc;

use async_trait::async_trait;

use super::model::{LifecycleEvent, Target};
use super::planner::ApprovalPlanner;
use crate::outbox::handler::{Handler, Outcome};
use crate::outbox::model::{ClaimedEvent, NewEvent};
use crate::outbox::test_pause::TestPause;
use crate::outbox::Outbox;
use crate::store::ports::ApprovalRepository;
use crate::store::StoreError;
use vocab::run_approvals::ApprovalRequest;

/// Test-only (`outbox::test_pause`): `opening` (claimed, nothing written) or
/// `opened` (the approval committed, the request not yet acknowledged).
pub const TEST_PAUSE_ENV: &str = "HERALD_TEST_PAUSE_APPROVAL_REQUEST";

/// What one delivery of a request found.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened {
    /// It opened the approval now.
    Now { events: usize },
    /// An earlier delivery had opened it.
    Already,
    /// The request cannot be applied as it stands (its definition version is gone
    /// or no longer targets runs).
    Refused(String),
}

pub struct RunApprovalOpener {
    store: Arc<dyn ApprovalRepository>,
    /// The approvals store's outbox: the prompt and alerts commit with the approval.
    outbox: Outbox,
    planner: Arc<ApprovalPlanner>,
    pause: Option<TestPause>,
}

impl RunApprovalOpener {
    pub fn new(
        store: Arc<dyn ApprovalRepository>,
        outbox: Outbox,
        planner: Arc<ApprovalPlanner>,
    ) -> Self {
        RunApprovalOpener {
            store,
            outbox,
            planner,
            pause: TestPause::from_env(TEST_PAUSE_ENV),
        }
    }

    /// Opens the request's approval unless it is open already, in one
    /// approvals-store transaction.
    pub async fn open(&self, request: ApprovalRequest) -> Result<Opened, StoreError> {
        let (store, planner) = (self.store.clone(), self.planner.clone());
        let events_store = self.outbox.store().clone();
        self.outbox
            .write(move |tx| {
                Box::pin(async move {
                    if store
                        .lock_instance(tx, &request.approval_id)
                        .await?
                        .is_some()
                    {
                        return Ok(Opened::Already);
                    }
                    let definition = store
                        .definition_in(tx, &request.definition_id, Some(request.definition_version))
                        .await?;
                    let definition = match definition {
                        Some(d) if d.target() == Target::Run => d,
                        _ => {
                            return Ok(Opened::Refused(format!(
                                "definition {} version {} is gone or no longer targets runs",
                                request.definition_id, request.definition_version
                            )))
                        }
                    };
                    let instance = store
                        .create_instance(
                            tx,
                            &request.approval_id,
                            &definition,
                            &request.run_id,
                            &request.requested_by,
                        )
                        .await?;
                    let mut events: Vec<NewEvent> =
                        planner.prompt(&definition, &instance).into_iter().collect();
                    events.extend(planner.alerts(
                        &definition,
                        &instance,
                        LifecycleEvent::Submit,
                        &request.requested_by,
                    ));
                    events_store.enqueue_all_in(tx, &events).await?;
                    Ok(Opened::Now {
                        events: events.len(),
                    })
                })
            })
            .await
    }
}

#[async_trait]
impl Handler for RunApprovalOpener {
    async fn handle(&self, event: &ClaimedEvent) -> Outcome {
        let request: ApprovalRequest =
            match crate::channels::read_payload(&event.payload, "approval_request") {
                Ok(request) => request,
                Err(outcome) => return outcome,
            };
        TestPause::at(&self.pause, "opening").await;
        let approval_id = request.approval_id.clone();
        match self.open(request).await {
            Ok(Opened::Now { events }) => {
                tracing::info!(approval_id = %approval_id, events, "run approval opened");
                TestPause::at(&self.pause, "opened").await;
                Outcome::Delivered { status_code: None }
            }
            Ok(Opened::Already) => Outcome::Delivered { status_code: None },
            Ok(Opened::Refused(error)) => Outcome::Permanent {
                error,
                status_code: None,
            },
            Err(err) => crate::outbox::handler::hop_failed(
                "cannot open the approval in the approvals store",
                &err,
            ),
        }
    }
}
