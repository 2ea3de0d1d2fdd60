//! Approvals: definitions, and the lifecycle — Submit, Approve, Reject, Recall —
//! each one transaction in the approvals store together with every event it owes.
//! Every lifecycle event's FieldUpdates — Submit, final Approve or Reject, Recall
//! — are resolved inside its transaction and written as ONE durable `field_update`
//! replay event with the frozen targets (seed 000, extended by issue 22), in the
//! record's lane so they apply in commit order (docs/ORDERING.md). The call answers
//! before they are written (`field_updates.state = "applying"`). A transition that
//! owes FieldUpdates, prompts or alerts fails closed when no durable outbox is
//! wired (`memory://`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use vocab::{Permission, Role, Viewer};

use super::error_class::redact;
use super::idempotency::{Answered, IdempotencyKey, Keyed};
use super::{format_ms, require, ServiceError};
use crate::approvals::model::{
    kinds, Action, ActorSnapshot, Definition, DefinitionSpec, FrozenTarget, Instance,
    InstanceStatus, LifecycleEvent, Node, ReplayInstruction, ReplayPayload, Target, WorkItem,
    PARENT_TYPE, RUN_OBJECT,
};
use crate::approvals::planner::ApprovalPlanner;
use crate::outbox::model::NewEvent;
use crate::outbox::Outbox;
use crate::store::ports::{ApprovalsStore, WriteTx};
use crate::store::StatusCount;
use vocab::approvals::field_update_state;
use vocab::run_approvals::RunDecision;
use vocab::DeliveryStatus;

/// The body of `POST /api/v1/approvals`.
#[derive(utoipa::ToSchema, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub definition_id: String,
    pub record_id: String,
}

/// An event an approval owes, as readers see it (no payload).
#[derive(utoipa::ToSchema, Debug, Serialize, Deserialize, PartialEq)]
pub struct ApprovalEvent {
    pub event_id: String,
    pub kind: String,
    pub status: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    /// For a FieldUpdate replay: `applying`, `applied`, `blocked` or `skipped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_updates: Option<String>,
}

/// An approval as the API returns it.
#[derive(utoipa::ToSchema, Debug, Serialize, Deserialize)]
pub struct ApprovalView {
    pub id: String,
    pub definition_id: String,
    pub definition_version: i64,
    pub object: String,
    pub record_id: String,
    pub status: InstanceStatus,
    pub step: i64,
    pub submitted_by: String,
    pub decided_by: Option<String>,
    pub transition_seq: i64,
    pub created_at: String,
    pub updated_at: String,
    /// Event ids this call committed (lifecycle calls only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub committed_events: Vec<String>,
    /// The FieldUpdates this call owes (lifecycle calls that owe some): written
    /// by their replay event after the answer, so `state` is `applying`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_updates: Option<FieldUpdates>,
}

/// A transition's FieldUpdates: their replay event and where it stands
/// (`applying`, `applied`, `blocked`, `skipped`).
#[derive(utoipa::ToSchema, Debug, Serialize, Deserialize, PartialEq)]
pub struct FieldUpdates {
    pub event_id: String,
    pub state: String,
}

/// An approval with its nodes, work items and events.
#[derive(utoipa::ToSchema, Debug, Serialize, Deserialize)]
pub struct ApprovalDetail {
    #[serde(flatten)]
    pub approval: ApprovalView,
    pub nodes: Vec<serde_json::Value>,
    pub work_items: Vec<serde_json::Value>,
    pub events: Vec<ApprovalEvent>,
}

/// `GET /admin/api/approval-action-replay`.
#[derive(utoipa::ToSchema, Debug, Serialize, Deserialize)]
pub struct ReplayStatus {
    pub counts: Vec<StatusCount>,
    /// The failed replay rows: only with `data:read` (DESIGN §7 puts replay rows
    /// under it); a reader sees the counts alone.
    pub failed: Vec<FailedReplay>,
    /// Whether the viewer may see the rows (false: `failed` is empty for them).
    pub rows_visible: bool,
}

#[derive(utoipa::ToSchema, Debug, Serialize, Deserialize)]
pub struct FailedReplay {
    pub event_id: String,
    pub approval_id: String,
    pub attempts: i64,
    /// Its retry cycle: what a retry of it compares, with its status.
    pub cycle: i64,
    pub last_error: Option<String>,
    pub failed_at: Option<String>,
    pub alerted_at: Option<String>,
    /// The frozen instructions; only with `data:read`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
}

/// What a lifecycle call made: a fresh view, or — under a key a twin committed
/// first — that twin's stored answer.
enum Made {
    Fresh(Box<ApprovalView>),
    Repeat(Answered),
}

impl Made {
    /// An unkeyed call's view (a call without a key has no twin).
    fn fresh(self) -> Result<ApprovalView, ServiceError> {
        match self {
            Made::Fresh(view) => Ok(*view),
            Made::Repeat(_) => Err(ServiceError::Internal(
                "an unkeyed lifecycle call was answered from a key".into(),
            )),
        }
    }

    /// A keyed call's answer: the view it made (as its key stored it) or its twin's.
    fn answered(self, status: u16) -> Result<Answered, ServiceError> {
        match self {
            Made::Fresh(view) => Ok(Answered {
                status,
                body: serde_json::to_value(&*view)
                    .map_err(|e| ServiceError::Internal(e.to_string()))?,
                replayed: false,
            }),
            Made::Repeat(answered) => Ok(answered),
        }
    }
}

/// The lifecycle calls that take an `Idempotency-Key`, each its own operation (a
/// key sent with an approve cannot answer a reject).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
    Recall,
}

impl Decision {
    pub fn parse(action: &str) -> Result<Decision, ServiceError> {
        match action {
            "approve" => Ok(Decision::Approve),
            "reject" => Ok(Decision::Reject),
            "recall" => Ok(Decision::Recall),
            other => Err(ServiceError::invalid(
                "action",
                format!("unknown action {other:?}; expected approve, reject or recall"),
            )),
        }
    }

    fn operation(self) -> &'static str {
        match self {
            Decision::Approve => "approve_approval",
            Decision::Reject => "reject_approval",
            Decision::Recall => "recall_approval",
        }
    }
}

#[derive(Clone)]
pub struct ApprovalService {
    store: Arc<dyn ApprovalsStore>,
    /// The approvals store's durable outbox; `None` when not wired (recall with
    /// FieldUpdates then fails closed).
    outbox: Option<Outbox>,
    planner: Arc<ApprovalPlanner>,
}

/// `instance` as a lifecycle call answers it, with the events it committed.
fn view_of_call(instance: Instance, events: &[NewEvent]) -> ApprovalView {
    let field_updates = events
        .iter()
        .find(|e| e.kind == kinds::FIELD_UPDATE)
        .map(|e| FieldUpdates {
            event_id: e.event_id.clone(),
            state: field_update_state(DeliveryStatus::Pending).into(),
        });
    ApprovalView {
        field_updates,
        ..view(instance, event_ids(events))
    }
}

fn view(instance: Instance, committed_events: Vec<String>) -> ApprovalView {
    ApprovalView {
        field_updates: None,
        id: instance.id,
        definition_id: instance.definition_id,
        definition_version: instance.definition_version,
        object: instance.object,
        record_id: instance.record_id,
        status: instance.status,
        step: instance.step_index + 1,
        submitted_by: instance.submitted_by,
        decided_by: instance.decided_by,
        transition_seq: instance.transition_seq,
        created_at: format_ms(instance.created_at_ms),
        updated_at: format_ms(instance.updated_at_ms),
        committed_events,
    }
}

fn event_ids(events: &[NewEvent]) -> Vec<String> {
    events.iter().map(|e| e.event_id.clone()).collect()
}

fn actor(viewer: &Viewer) -> ActorSnapshot {
    ActorSnapshot {
        name: viewer.name.clone(),
        role: viewer.role,
    }
}

impl ApprovalService {
    /// `outbox` must be the approvals store's own: a transition and its events
    /// commit in one transaction.
    pub fn new(
        store: impl ApprovalsStore + 'static,
        outbox: Option<Outbox>,
        planner: Arc<ApprovalPlanner>,
    ) -> Self {
        ApprovalService {
            store: Arc::new(store),
            outbox,
            planner,
        }
    }

    // ---- definitions -------------------------------------------------------

    /// Stores a definition (a new version when it changed). `viewer` None is the
    /// config file at start-up.
    pub async fn put_definition(
        &self,
        viewer: Option<&Viewer>,
        spec: DefinitionSpec,
    ) -> Result<Definition, ServiceError> {
        let by = require(viewer, Permission::DefinitionsManage)?.name.clone();
        self.store_definition(spec, &by).await
    }

    /// Loads the config file's definitions (system context).
    pub async fn load_configured(&self, specs: &[DefinitionSpec]) -> Result<(), ServiceError> {
        for spec in specs {
            self.store_definition(spec.clone(), "config").await?;
        }
        Ok(())
    }

    async fn store_definition(
        &self,
        spec: DefinitionSpec,
        by: &str,
    ) -> Result<Definition, ServiceError> {
        spec.validate(|route| self.planner.has_route(route))
            .map_err(|(part, message)| ServiceError::Invalid {
                field: match part.as_str() {
                    "id" => "id",
                    "object" => "object",
                    "run_types" => "run_types",
                    "steps" => "steps",
                    _ => "actions",
                },
                message,
            })?;
        Ok(self.store.put_definition(&spec, by).await?)
    }

    pub async fn definitions(
        &self,
        viewer: Option<&Viewer>,
    ) -> Result<Vec<Definition>, ServiceError> {
        require(viewer, Permission::RecordsRead)?;
        Ok(self.store.definitions().await?)
    }

    // ---- reading -----------------------------------------------------------

    pub async fn list(&self, viewer: Option<&Viewer>) -> Result<Vec<ApprovalView>, ServiceError> {
        require(viewer, Permission::RecordsRead)?;
        let instances = self.store.instances(200).await?;
        Ok(instances.into_iter().map(|i| view(i, Vec::new())).collect())
    }

    pub async fn get(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
    ) -> Result<ApprovalDetail, ServiceError> {
        let viewer = require(viewer, Permission::RecordsRead)?;
        let sees_data = viewer.can(Permission::DataRead);
        let instance = self
            .store
            .instance(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("approval {id:?}")))?;
        let nodes: Vec<Node> = self.store.nodes(id).await?;
        let items: Vec<WorkItem> = self.store.work_items(id).await?;
        let events = self
            .store
            .events_for_parent(PARENT_TYPE, id)
            .await?
            .into_iter()
            .map(|e| ApprovalEvent {
                field_updates: (e.kind == kinds::FIELD_UPDATE)
                    .then(|| field_update_state(e.status).to_string()),
                event_id: e.event_id,
                kind: e.kind,
                status: e.status.as_str().to_string(),
                attempts: e.attempts,
                last_error: redact(e.last_error.as_deref(), sees_data),
            })
            .collect();
        Ok(ApprovalDetail {
            approval: view(instance, Vec::new()),
            nodes: nodes
                .into_iter()
                .map(|n| serde_json::to_value(n).unwrap_or_default())
                .collect(),
            work_items: items
                .into_iter()
                .map(|w| serde_json::to_value(w).unwrap_or_default())
                .collect(),
            events,
        })
    }

    /// A run's approvals (DESIGN §9), newest first, with their nodes, work items
    /// and events: what the run page shows.
    pub async fn of_run(
        &self,
        viewer: Option<&Viewer>,
        run_id: &str,
    ) -> Result<Vec<ApprovalDetail>, ServiceError> {
        self.of_target(viewer, RUN_OBJECT, run_id).await
    }

    /// A record's approvals, newest first, with their nodes, work items and
    /// events (its field updates among them): the Records page's history.
    pub async fn of_record(
        &self,
        viewer: Option<&Viewer>,
        object: &str,
        record_id: &str,
    ) -> Result<Vec<ApprovalDetail>, ServiceError> {
        self.of_target(viewer, object, record_id).await
    }

    async fn of_target(
        &self,
        viewer: Option<&Viewer>,
        object: &str,
        id: &str,
    ) -> Result<Vec<ApprovalDetail>, ServiceError> {
        require(viewer, Permission::RecordsRead)?;
        let mut details = Vec::new();
        for instance in self.store.instances_of(object, id).await? {
            details.push(self.get(viewer, &instance.id).await?);
        }
        Ok(details)
    }

    /// Replay counts by status, and the failed replay rows with `data:read`.
    pub async fn replay_status(
        &self,
        viewer: Option<&Viewer>,
    ) -> Result<ReplayStatus, ServiceError> {
        let viewer = require(viewer, Permission::RecordsRead)?;
        if self.outbox.is_none() {
            return Err(ServiceError::CapabilityUnavailable(
                "no durable outbox is wired for approvals, so there is no replay to report".into(),
            ));
        }
        let counts = self.store.kind_counts(kinds::FIELD_UPDATE).await?;
        let full = viewer.can(Permission::DataRead);
        let rows = if full {
            self.store
                .events_of_kind(kinds::FIELD_UPDATE, "failed", 200)
                .await?
        } else {
            Vec::new()
        };
        let failed = rows
            .into_iter()
            .map(|e| FailedReplay {
                payload: full.then(|| serde_json::from_str(&e.payload).unwrap_or_default()),
                event_id: e.event_id,
                approval_id: e.parent_id,
                attempts: e.attempts,
                cycle: e.cycle,
                last_error: redact(e.last_error.as_deref(), full),
                failed_at: e.failed_at.map(format_ms),
                alerted_at: e.alerted_at.map(format_ms),
            })
            .collect();
        Ok(ReplayStatus {
            counts,
            failed,
            rows_visible: full,
        })
    }

    // ---- lifecycle ---------------------------------------------------------

    pub async fn submit(
        &self,
        viewer: Option<&Viewer>,
        request: SubmitRequest,
    ) -> Result<ApprovalView, ServiceError> {
        self.submit_keyed(viewer, request, None).await?.fresh()
    }

    /// [`ApprovalService::submit`] under an idempotency key: the approval and the
    /// key's answer commit together; a repeat gets the original answer and opens
    /// nothing (a second approval of the record would be `409` instead).
    pub async fn submit_once(
        &self,
        viewer: Option<&Viewer>,
        request: SubmitRequest,
        key: &IdempotencyKey,
    ) -> Result<Answered, ServiceError> {
        let who = require(viewer, Permission::ApprovalsSubmit)?;
        let keyed = Keyed::new(&who.name, key, "submit_approval", &request);
        if let Some(earlier) = keyed.earlier(&*self.store).await? {
            return Ok(earlier);
        }
        self.submit_keyed(viewer, request, Some(&keyed))
            .await?
            .answered(201)
    }

    /// Approve, reject or recall under an idempotency key (the console's forms
    /// send one too): the decision and the key's answer commit together, and a
    /// repeat — a double click, a retry after a lost answer — gets the original
    /// answer instead of deciding the next step.
    pub async fn decide_once(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
        decision: Decision,
        key: &IdempotencyKey,
    ) -> Result<Answered, ServiceError> {
        let who = viewer.ok_or(ServiceError::Unauthenticated)?;
        let keyed = Keyed::new(&who.name, key, decision.operation(), &id);
        if let Some(earlier) = keyed.earlier(&*self.store).await? {
            return Ok(earlier);
        }
        let made = match decision {
            Decision::Approve => {
                self.decide(viewer, id, LifecycleEvent::Approve, Some(&keyed))
                    .await?
            }
            Decision::Reject => {
                self.decide(viewer, id, LifecycleEvent::Reject, Some(&keyed))
                    .await?
            }
            Decision::Recall => self.recall_keyed(viewer, id, Some(&keyed)).await?,
        };
        made.answered(200)
    }

    /// Claims `keyed` (when given) first thing in `tx`: `Some` is the answer of
    /// a twin that committed first, to return instead of acting.
    async fn claim(
        &self,
        keyed: Option<&Keyed>,
        tx: &mut WriteTx,
    ) -> Result<Option<Made>, ServiceError> {
        match keyed {
            Some(keyed) => Ok(keyed.claim_in(&*self.store, tx).await?.map(Made::Repeat)),
            None => Ok(None),
        }
    }

    /// Stores `made` as `keyed`'s answer (when given) in the call's own `tx`.
    async fn answer(
        &self,
        keyed: Option<&Keyed>,
        tx: &mut WriteTx,
        status: u16,
        made: &ApprovalView,
    ) -> Result<(), ServiceError> {
        if let Some(keyed) = keyed {
            keyed.answer_in(&*self.store, tx, status, made).await?;
        }
        Ok(())
    }

    async fn submit_keyed(
        &self,
        viewer: Option<&Viewer>,
        request: SubmitRequest,
        keyed: Option<&Keyed>,
    ) -> Result<Made, ServiceError> {
        let viewer = require(viewer, Permission::ApprovalsSubmit)?;
        let definition = self
            .store
            .definition(&request.definition_id, None)
            .await?
            .ok_or_else(|| {
                ServiceError::invalid(
                    "definition_id",
                    format!("no definition is named {:?}", request.definition_id),
                )
            })?;
        if definition.target() == Target::Run {
            return Err(ServiceError::invalid(
                "definition_id",
                format!(
                    "definition {} approves runs, not records: a run asks for it by moving to awaiting_approval (POST /api/v1/runs/{{id}}/transitions with \"approval\")",
                    definition.id
                ),
            ));
        }
        let mut tx = self.store.begin_write().await?;
        if let Some(twin) = self.claim(keyed, &mut tx).await? {
            return Ok(twin);
        }
        let record = self
            .store
            .lock_record(&mut tx, &request.record_id)
            .await?
            .ok_or_else(|| {
                ServiceError::invalid(
                    "record_id",
                    format!("no record has id {:?}", request.record_id),
                )
            })?;
        if record.object != definition.object {
            return Err(ServiceError::invalid(
                "record_id",
                format!(
                    "record {} is a {}; definition {} approves {} records",
                    record.id, record.object, definition.id, definition.object
                ),
            ));
        }
        if let Some(pending) = self.store.pending_instance_of(&mut tx, &record.id).await? {
            return Err(ServiceError::Conflict(format!(
                "record {} already has a pending approval ({pending})",
                record.id
            )));
        }
        let instance = self
            .store
            .create_instance(
                &mut tx,
                &uuid::Uuid::now_v7().to_string(),
                &definition,
                &record.id,
                &viewer.name,
            )
            .await?;
        let mut events: Vec<NewEvent> = self
            .field_updates(
                &mut tx,
                &definition,
                &instance,
                LifecycleEvent::Submit,
                viewer,
            )
            .await?
            .into_iter()
            .collect();
        events.extend(self.planner.prompt(&definition, &instance));
        events.extend(self.planner.alerts(
            &definition,
            &instance,
            LifecycleEvent::Submit,
            &viewer.name,
        ));
        let submitted = view_of_call(instance, &events);
        self.answer(keyed, &mut tx, 201, &submitted).await?;
        self.commit(tx, &events).await?;
        tracing::info!(approval_id = %submitted.id, definition = %definition.id, by = %viewer.name, "approval submitted");
        Ok(Made::Fresh(Box::new(submitted)))
    }

    pub async fn approve(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
    ) -> Result<ApprovalView, ServiceError> {
        self.decide(viewer, id, LifecycleEvent::Approve, None)
            .await?
            .fresh()
    }

    pub async fn reject(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
    ) -> Result<ApprovalView, ServiceError> {
        self.decide(viewer, id, LifecycleEvent::Reject, None)
            .await?
            .fresh()
    }

    async fn open_instance(
        &self,
        tx: &mut WriteTx,
        id: &str,
        event: LifecycleEvent,
    ) -> Result<(Instance, Definition), ServiceError> {
        let instance = self
            .store
            .lock_instance(tx, id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("approval {id:?}")))?;
        if instance.status != InstanceStatus::Pending {
            return Err(ServiceError::Conflict(format!(
                "the approval is {}; only a pending approval can take {}",
                instance.status.as_str(),
                event.as_str()
            )));
        }
        let definition = self
            .store
            .definition_in(
                tx,
                &instance.definition_id,
                Some(instance.definition_version),
            )
            .await?
            .ok_or_else(|| {
                ServiceError::Internal(format!(
                    "definition {} v{} vanished",
                    instance.definition_id, instance.definition_version
                ))
            })?;
        Ok((instance, definition))
    }

    async fn decide(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
        event: LifecycleEvent,
        keyed: Option<&Keyed>,
    ) -> Result<Made, ServiceError> {
        let viewer = viewer.ok_or(ServiceError::Unauthenticated)?;
        let mut tx = self.store.begin_write().await?;
        if let Some(twin) = self.claim(keyed, &mut tx).await? {
            return Ok(twin);
        }
        let (instance, definition) = self.open_instance(&mut tx, id, event).await?;
        let step_index = instance.step_index;
        let step = definition.steps.get(step_index as usize).ok_or_else(|| {
            ServiceError::Internal(format!("approval {id} is past its last step"))
        })?;
        if !step.approver.includes(viewer) {
            return Err(ServiceError::Refused(format!(
                "step {:?} is decided by {} {}, not by {}",
                step.name,
                step.approver.kind(),
                step.approver.name(),
                viewer.name
            )));
        }
        let last = step_index as usize + 1 == definition.steps.len();
        let prompt = ApprovalPlanner::prompt_id(&instance.id, step_index);
        self.store
            .skip_pending_in(
                &mut tx,
                &prompt,
                &format!(
                    "the step was decided ({}) before the prompt was sent",
                    event.as_str()
                ),
            )
            .await?;
        let mut events = Vec::new();
        let instance = if event == LifecycleEvent::Approve && !last {
            let moved = self
                .store
                .transition_instance(
                    &mut tx,
                    &instance,
                    InstanceStatus::Pending,
                    step_index + 1,
                    &viewer.name,
                    false,
                )
                .await?;
            self.store
                .close_step(
                    &mut tx,
                    &instance.id,
                    step_index,
                    InstanceStatus::Approved,
                    &viewer.name,
                )
                .await?;
            self.store
                .open_step(
                    &mut tx,
                    &moved.id,
                    step_index + 1,
                    &definition.steps[step_index as usize + 1],
                )
                .await?;
            events.extend(self.planner.prompt(&definition, &moved));
            moved
        } else {
            let status = if event == LifecycleEvent::Approve {
                InstanceStatus::Approved
            } else {
                InstanceStatus::Rejected
            };
            let decided = self
                .store
                .transition_instance(&mut tx, &instance, status, step_index, &viewer.name, true)
                .await?;
            events.extend(
                self.field_updates(&mut tx, &definition, &decided, event, viewer)
                    .await?,
            );
            events.extend(
                self.planner
                    .alerts(&definition, &decided, event, &viewer.name),
            );
            if definition.target() == Target::Run {
                let decision = if status == InstanceStatus::Approved {
                    RunDecision::Approved
                } else {
                    RunDecision::Rejected
                };
                events.push(self.planner.continuation(&decided, decision, &viewer.name));
            }
            decided
        };
        let decided = view_of_call(instance, &events);
        self.answer(keyed, &mut tx, 200, &decided).await?;
        self.commit(tx, &events).await?;
        tracing::info!(approval_id = %decided.id, event = event.as_str(), by = %viewer.name, "approval decided");
        Ok(Made::Fresh(Box::new(decided)))
    }

    /// Recall: resolves the Recall FieldUpdates (lookups included) inside the
    /// transaction, writes ONE replay event with the frozen instructions, and marks
    /// the instance, its nodes and work items removed — all or nothing.
    pub async fn recall(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
    ) -> Result<ApprovalView, ServiceError> {
        self.recall_keyed(viewer, id, None).await?.fresh()
    }

    async fn recall_keyed(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
        keyed: Option<&Keyed>,
    ) -> Result<Made, ServiceError> {
        let viewer = require(viewer, Permission::ApprovalsSubmit)?;
        let mut tx = self.store.begin_write().await?;
        if let Some(twin) = self.claim(keyed, &mut tx).await? {
            return Ok(twin);
        }
        let (instance, definition) = self
            .open_instance(&mut tx, id, LifecycleEvent::Recall)
            .await?;
        if instance.submitted_by != viewer.name && viewer.role != Role::Admin {
            return Err(ServiceError::Refused(format!(
                "only the submitter ({}) or an admin may recall this approval",
                instance.submitted_by
            )));
        }
        let instructions = self
            .freeze(&mut tx, &definition, &instance, LifecycleEvent::Recall)
            .await?;
        let step_prompt = ApprovalPlanner::prompt_id(&instance.id, instance.step_index);
        self.store
            .skip_pending_in(
                &mut tx,
                &step_prompt,
                "the approval was recalled before the prompt was sent",
            )
            .await?;
        let removed = self
            .store
            .transition_instance(
                &mut tx,
                &instance,
                InstanceStatus::Removed,
                instance.step_index,
                &viewer.name,
                true,
            )
            .await?;
        let mut events: Vec<NewEvent> = self
            .replay(
                &definition,
                &removed,
                LifecycleEvent::Recall,
                viewer,
                instructions,
            )
            .into_iter()
            .collect();
        events.extend(self.planner.alerts(
            &definition,
            &removed,
            LifecycleEvent::Recall,
            &viewer.name,
        ));
        if definition.target() == Target::Run {
            events.push(
                self.planner
                    .continuation(&removed, RunDecision::Recalled, &viewer.name),
            );
        }
        let recalled = view_of_call(removed, &events);
        self.answer(keyed, &mut tx, 200, &recalled).await?;
        self.commit(tx, &events).await?;
        tracing::info!(approval_id = %recalled.id, by = %viewer.name, events = events.len(), "approval recalled");
        Ok(Made::Fresh(Box::new(recalled)))
    }

    /// Resolves `field_path` from the instance's record: each `Rel.` hop follows
    /// the lookup field `RelId` to a record of object `Rel`; the last part is the
    /// field. Reads (and locks) inside `tx`.
    async fn resolve(
        &self,
        tx: &mut WriteTx,
        instance: &Instance,
        field_path: &str,
    ) -> Result<FrozenTarget, ServiceError> {
        let parts: Vec<&str> = field_path.split('.').collect();
        let (field, hops) = parts
            .split_last()
            .ok_or_else(|| ServiceError::invalid("field_path", "is empty"))?;
        let mut record = self
            .store
            .lock_record(tx, &instance.record_id)
            .await?
            .ok_or_else(|| {
                ServiceError::Conflict(format!(
                    "the approval's record {} no longer exists",
                    instance.record_id
                ))
            })?;
        for hop in hops {
            let lookup = format!("{hop}Id");
            let next = record
                .fields
                .get(&lookup)
                .and_then(|v| v.as_str())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    ServiceError::Conflict(format!(
                        "field update {field_path:?}: lookup {lookup} of {} record {} is empty",
                        record.object, record.id
                    ))
                })?
                .to_string();
            let target = self.store.lock_record(tx, &next).await?;
            record = match target {
                Some(r) if r.object == *hop => r,
                _ => {
                    return Err(ServiceError::Conflict(format!(
                        "field update {field_path:?}: lookup {lookup} points at {next:?}, which is not a {hop} record"
                    )))
                }
            };
        }
        Ok(FrozenTarget {
            object: record.object,
            record_id: record.id,
            field: field.to_string(),
        })
    }

    /// The replay event `event` owes for its FieldUpdates, resolved and frozen
    /// inside `tx` (`instance` as the transition leaves it), or `None` when it
    /// owes none.
    async fn field_updates(
        &self,
        tx: &mut WriteTx,
        definition: &Definition,
        instance: &Instance,
        event: LifecycleEvent,
        viewer: &Viewer,
    ) -> Result<Option<NewEvent>, ServiceError> {
        let instructions = self.freeze(tx, definition, instance, event).await?;
        Ok(self.replay(definition, instance, event, viewer, instructions))
    }

    /// `event`'s FieldUpdate instructions with their targets resolved (lookups
    /// included, through the record as committed, not as later updates still
    /// queued in its lane will leave it) and frozen inside `tx`. Refused when
    /// there are some and no durable outbox to replay them: the caller's `tx` is
    /// then dropped, rolling back whatever it wrote.
    async fn freeze(
        &self,
        tx: &mut WriteTx,
        definition: &Definition,
        instance: &Instance,
        event: LifecycleEvent,
    ) -> Result<Vec<ReplayInstruction>, ServiceError> {
        let mut instructions = Vec::new();
        for action in definition.actions.for_event(event) {
            if let Action::FieldUpdate {
                id: action_id,
                name,
                field_path,
                value,
            } = action
            {
                let target = self.resolve(tx, instance, field_path).await?;
                instructions.push(ReplayInstruction {
                    action_id: action_id.clone(),
                    action_name: name.clone(),
                    field_path: field_path.clone(),
                    value: value.clone(),
                    target,
                });
            }
        }
        if !instructions.is_empty() && self.outbox.is_none() {
            return Err(ServiceError::CapabilityUnavailable(format!(
                "{} refused: the definition has {} FieldUpdates and no durable outbox is wired to apply them; nothing was changed",
                event.label(),
                event.as_str()
            )));
        }
        Ok(instructions)
    }

    /// The one replay event of `instructions` (none when there are none).
    fn replay(
        &self,
        definition: &Definition,
        instance: &Instance,
        event: LifecycleEvent,
        viewer: &Viewer,
        instructions: Vec<ReplayInstruction>,
    ) -> Option<NewEvent> {
        if instructions.is_empty() {
            return None;
        }
        Some(self.planner.replay(
            instance,
            &ReplayPayload {
                lifecycle_event: event,
                process_instance_id: instance.id.clone(),
                definition_id: definition.id.clone(),
                definition_version: definition.version,
                object: instance.object.clone(),
                record_id: instance.record_id.clone(),
                actor: actor(viewer),
                instructions,
            },
        ))
    }

    /// Commits `tx` with `events` enqueued in it (their ids are the call's
    /// `committed_events`, known before the commit so a key's answer holds them).
    async fn commit(&self, mut tx: WriteTx, events: &[NewEvent]) -> Result<(), ServiceError> {
        match &self.outbox {
            Some(outbox) => {
                for event in events {
                    outbox.enqueue_in(&mut tx, event).await?;
                }
                outbox.commit(tx).await?;
                Ok(())
            }
            // Approvers who are never prompted, or alerts that never go out, would
            // leave a process stuck while it looks healthy: a transition that owes
            // notifications fails closed and changes nothing. One that owes none
            // commits.
            None if !events.is_empty() => {
                tx.rollback()
                    .await
                    .map_err(|e| ServiceError::Internal(e.to_string()))?;
                Err(ServiceError::CapabilityUnavailable(format!(
                    "this approval step owes {} prompt or alert notification(s) or field update(s) and no durable outbox is wired to send them; nothing was changed",
                    events.len()
                )))
            }
            None => {
                tx.commit()
                    .await
                    .map_err(|e| ServiceError::Internal(e.to_string()))?;
                Ok(())
            }
        }
    }
}
