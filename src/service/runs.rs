//! Runs: create, list and read, with redaction for viewers without `data:read`.

use std::sync::{Arc, OnceLock};

use app::dto::{DeliveryCounts, RunFacts, RunPage, RunQuery, RunSummary};

use serde::{Deserialize, Serialize};
use vocab::{Permission, RunStatus, Viewer};

use super::creations::{CreationOutcome, CreationWriter};
use super::deliveries::DeliveryService;
use super::idempotency::{Answered, IdempotencyKey, Keyed};
use super::run_approvals::ApprovalRequests;
use super::transitions::{Moved, TransitionItem, TransitionOutcome, TransitionWriter};
use super::{format_ms, parse_instant, require, ServiceError};
use crate::batcher::Batcher;
use crate::jobs::JobsPlanner;
use crate::outbox::best_effort::BestEffortSender;
use crate::outbox::model::NewEvent;
use crate::outbox::test_pause::TestPause;
use crate::outbox::Outbox;
use crate::routes::validate_url;
use crate::store::ports::{
    ApprovalRepository, IdempotencyKeys, NewRun, Run, RunFilter, RunRepository,
};
use vocab::run_approvals::ApprovalAsk;

pub const MAX_RUN_TYPE_LEN: usize = 64;
pub const MAX_TENANT_LEN: usize = 128;
/// The stored route list (JSON) fits the column that holds it.
pub const MAX_ROUTES_LEN: usize = 2048;

/// The body of `POST /api/v1/runs`.
#[derive(utoipa::ToSchema, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    #[serde(rename = "type")]
    #[schema(min_length = 1, max_length = 64)]
    pub run_type: String,
    #[schema(min_length = 1, max_length = 128)]
    pub tenant: String,
    #[serde(default)]
    pub callback_url: Option<String>,
    /// Names of configured delivery routes the result goes to.
    #[serde(default)]
    pub routes: Vec<String>,
}

/// The body of `POST /api/v1/runs/{id}/transitions`.
#[derive(utoipa::ToSchema, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TransitionRequest {
    pub to: RunStatus,
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    /// With `to = awaiting_approval`: the approval the run waits on (DESIGN §9).
    #[serde(default)]
    pub approval: Option<ApprovalAsk>,
}

/// Most items one `POST /api/v1/runs/transitions` may carry.
pub const MAX_BATCH_TRANSITIONS: usize = 500;

/// The body of `POST /api/v1/runs/transitions`.
#[derive(utoipa::ToSchema, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BatchTransitions {
    #[schema(min_items = 1, max_items = 500)]
    pub transitions: Vec<BatchItem>,
}

/// One item of a batch: a run and where it moves.
#[derive(utoipa::ToSchema, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BatchItem {
    pub run_id: String,
    pub to: RunStatus,
    #[serde(default)]
    pub result: Option<serde_json::Value>,
}

#[derive(utoipa::ToSchema, Debug, Serialize, Deserialize)]
pub struct TransitionResponse {
    pub run: RunDetail,
    /// Event ids of the notifications this transition committed (none on a replay,
    /// none on a store without a durable outbox, where they are sent best effort).
    pub notifications: Vec<String>,
    /// True when the run already stood where the request asked (a repeated request).
    pub replayed: bool,
}

/// One run as the API returns it. `callback_url` and `result` are payload data and
/// appear only for viewers with `data:read`.
#[derive(utoipa::ToSchema, Debug, Serialize, Deserialize)]
pub struct RunDetail {
    pub routes: Vec<String>,
    pub id: String,
    #[serde(rename = "type")]
    pub run_type: String,
    pub tenant: String,
    pub status: RunStatus,
    pub callback_origin: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    pub transition_seq: i64,
    /// The approval the run waits on, while it waits (DESIGN §9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Clone)]
pub struct RunService {
    repo: Arc<dyn RunRepository>,
    outbox: Outbox,
    planner: Arc<JobsPlanner>,
    deliveries: DeliveryService,
    max_result_bytes: usize,
    /// Set on a store without a durable outbox: notifications are sent once after
    /// the commit instead of being enqueued.
    best_effort: Option<BestEffortSender>,
    /// Started on the first transition (`service::transitions`).
    transitions: Arc<OnceLock<Batcher<TransitionItem, TransitionOutcome>>>,
    /// Started on the first creation (`service::creations`).
    creations: Arc<OnceLock<Batcher<NewRun, CreationOutcome>>>,
    /// Moves that ask for an approval; none: refused (no approvals store wired).
    approval_requests: Option<ApprovalRequests>,
    /// Creates sent with an `Idempotency-Key`; none: such a create is refused.
    keys: Option<Arc<dyn IdempotencyKeys>>,
    /// Test-only (`CREATE_PAUSE_ENV`): a pause after a keyed create commits.
    create_pause: Arc<Option<TestPause>>,
}

/// How a batch's answer is written (the HTTP layer's: one item per transition,
/// each with its own status), so a keyed batch stores exactly what it answers.
pub type RenderBatch = fn(Vec<Result<TransitionResponse, ServiceError>>) -> serde_json::Value;

/// Test-only (`outbox::test_pause`): `committed` pauses a create under an
/// idempotency key after its commit, before its answer (a lost answer).
pub const CREATE_PAUSE_ENV: &str = "HERALD_TEST_PAUSE_CREATE";

impl RunService {
    /// `repo` and `outbox` must be the same (jobs) store: a transition and its events
    /// commit in one transaction.
    pub fn new(
        repo: Arc<dyn RunRepository>,
        outbox: Outbox,
        planner: Arc<JobsPlanner>,
        deliveries: DeliveryService,
        max_result_bytes: usize,
    ) -> Self {
        RunService {
            repo,
            outbox,
            planner,
            deliveries,
            max_result_bytes,
            best_effort: None,
            transitions: Arc::new(OnceLock::new()),
            creations: Arc::new(OnceLock::new()),
            approval_requests: None,
            keys: None,
            create_pause: Arc::new(TestPause::from_env(CREATE_PAUSE_ENV)),
        }
    }

    /// Lets creates carry an `Idempotency-Key`, kept in `keys` (the jobs store:
    /// the key commits with the run).
    pub fn with_idempotency_keys(mut self, keys: Arc<dyn IdempotencyKeys>) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Lets runs ask for approval on the definitions of `definitions` (the
    /// approvals store, wherever it is).
    pub fn with_run_approvals(mut self, definitions: Arc<dyn ApprovalRepository>) -> Self {
        self.approval_requests = Some(ApprovalRequests::new(
            self.repo.clone(),
            self.outbox.clone(),
            self.planner.clone(),
            definitions,
        ));
        self
    }

    /// The batcher creations go through.
    fn creations(&self) -> &Batcher<NewRun, CreationOutcome> {
        self.creations.get_or_init(|| {
            CreationWriter::new(self.repo.clone(), self.outbox.units().clone()).start()
        })
    }

    /// The batcher transitions go through, started with this service's settings.
    fn transitions(&self) -> &Batcher<TransitionItem, TransitionOutcome> {
        self.transitions.get_or_init(|| self.writer().start())
    }

    /// What writes transitions, with this service's settings.
    fn writer(&self) -> TransitionWriter {
        TransitionWriter::new(
            self.repo.clone(),
            self.outbox.clone(),
            self.planner.clone(),
            self.best_effort.is_none(),
        )
    }

    /// The most requests one batch of transitions and one of creations has held so
    /// far, in that order (0 before the first): whether concurrent requests really
    /// shared their writes.
    pub fn largest_batches(&self) -> (usize, usize) {
        (
            self.transitions.get().map_or(0, Batcher::largest_batch),
            self.creations.get().map_or(0, Batcher::largest_batch),
        )
    }

    /// For a store without a durable outbox: a terminal transition commits the run
    /// alone and hands its notifications to `sender` afterwards.
    pub fn with_best_effort(mut self, sender: BestEffortSender) -> Self {
        self.best_effort = Some(sender);
        // A batcher started before this point would enqueue; start afresh.
        self.transitions = Arc::new(OnceLock::new());
        self
    }

    /// Moves a run; a terminal move commits the run and every notification it owes in
    /// one transaction. Repeating a request that already took effect changes nothing.
    pub async fn transition(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
        request: TransitionRequest,
    ) -> Result<TransitionResponse, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?;
        let result = self.result_text(request.result.as_ref())?;
        let to = request.to;
        if let Some(ask) = request.approval {
            return self.request_approval(viewer, id, to, ask, result).await;
        }
        // Batched with concurrent transitions: one write unit (and, under group
        // commit, one fsync) for many; answered only after the commit.
        let moved = self
            .transitions()
            .submit(TransitionItem {
                run_id: id.to_string(),
                to,
                result,
                trace_parent: crate::telemetry::current_traceparent(),
            })
            .await
            .map_err(|lost| ServiceError::Internal(lost.to_string()))??;
        let (response, best_effort) = self.answer_of(moved, viewer);
        if !response.replayed {
            tracing::info!(run_id = %response.run.id, status = to.as_str(), notifications = response.notifications.len(), best_effort_notifications = best_effort.len(), by = %viewer.name, "run transitioned");
        }
        if let Some(sender) = &self.best_effort {
            sender.send(best_effort);
        }
        Ok(response)
    }

    /// A request's result as stored JSON text, held to `max_result_bytes`.
    fn result_text(
        &self,
        result: Option<&serde_json::Value>,
    ) -> Result<Option<String>, ServiceError> {
        let Some(value) = result.filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let text = serde_json::to_string(value)
            .map_err(|e| ServiceError::invalid("result", e.to_string()))?;
        if text.len() > self.max_result_bytes {
            return Err(ServiceError::TooLarge {
                field: "result",
                message: format!(
                    "is {} bytes of JSON; the limit is {} (max_result_bytes)",
                    text.len(),
                    self.max_result_bytes
                ),
            });
        }
        Ok(Some(text))
    }

    /// What a transition answers, and the events to hand to the best-effort
    /// sender (none with a durable outbox: they were enqueued with the move).
    /// Logs nothing: it may run before the commit.
    fn answer_of(&self, moved: Moved, viewer: &Viewer) -> (TransitionResponse, Vec<NewEvent>) {
        let (run, events) = match moved {
            Moved::Replayed(current) => {
                let replay = TransitionResponse {
                    run: detail(current, viewer),
                    notifications: Vec::new(),
                    replayed: true,
                };
                return (replay, Vec::new());
            }
            Moved::Transitioned { run, events } => (run, events),
        };
        if self.best_effort.is_some() {
            let moved = TransitionResponse {
                run: detail(run, viewer),
                notifications: Vec::new(),
                replayed: false,
            };
            return (moved, events);
        }
        let moved = TransitionResponse {
            run: detail(run, viewer),
            notifications: events.into_iter().map(|e| e.event_id).collect(),
            replayed: false,
        };
        (moved, Vec::new())
    }

    /// [`RunService::transition`] under an idempotency key: the move and the key's
    /// answer commit in one write unit, and a repeat gets the original answer. A
    /// refused move (404, 409, …) stores nothing: its repeat is judged afresh. A
    /// move that asks for an approval takes no key: that ask is idempotent by
    /// itself (a repeat answers `replayed`).
    pub async fn transition_once(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
        request: TransitionRequest,
        key: &IdempotencyKey,
    ) -> Result<Answered, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?.clone();
        if request.approval.is_some() {
            return Err(ServiceError::invalid(
                "Idempotency-Key",
                "is not taken on a move that asks for an approval: that move is idempotent by itself (a repeat answers \"replayed\": true)",
            ));
        }
        let keyed = Keyed::new(&viewer.name, key, "transition_run", &(id, &request));
        if let Some(earlier) = keyed.earlier(&*keyed_store(&self.keys)?).await? {
            return Ok(earlier);
        }
        let item = TransitionItem {
            run_id: id.to_string(),
            to: request.to,
            result: self.result_text(request.result.as_ref())?,
            trace_parent: crate::telemetry::current_traceparent(),
        };
        self.write_keyed(keyed, vec![Ok(item)], &viewer, |mut outcomes| {
            let response = outcomes.pop().unwrap_or_else(|| {
                Err(ServiceError::Internal("a transition was skipped".into()))
            })?;
            Ok((200, serde_json::to_value(response)))
        })
        .await
    }

    /// [`RunService::transition_batch`] under an idempotency key: every move of
    /// the batch and the key's answer (`render`ed, each item's own outcome in it)
    /// commit in one write unit, and a repeat gets the original answer.
    pub async fn transition_batch_once(
        &self,
        viewer: Option<&Viewer>,
        batch: BatchTransitions,
        key: &IdempotencyKey,
        render: RenderBatch,
    ) -> Result<Answered, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?.clone();
        check_batch_size(batch.transitions.len())?;
        let keyed = Keyed::new(&viewer.name, key, "transition_runs", &batch);
        if let Some(earlier) = keyed.earlier(&*keyed_store(&self.keys)?).await? {
            return Ok(earlier);
        }
        let items = batch
            .transitions
            .into_iter()
            .map(|item| {
                Ok(TransitionItem {
                    result: self.result_text(item.result.as_ref())?,
                    run_id: item.run_id,
                    to: item.to,
                    trace_parent: crate::telemetry::current_traceparent(),
                })
            })
            .collect();
        self.write_keyed(keyed, items, &viewer, move |outcomes| {
            Ok((200, Ok(render(outcomes))))
        })
        .await
    }

    /// One keyed write unit of transitions: claims the key, moves the `items`
    /// that passed their checks (the others keep their errors), and stores what
    /// `answer` makes of the outcomes as the key's answer. An `Err` from `answer`
    /// stores nothing (the unit rolls back).
    async fn write_keyed<A>(
        &self,
        keyed: Keyed,
        items: Vec<Result<TransitionItem, ServiceError>>,
        viewer: &Viewer,
        answer: A,
    ) -> Result<Answered, ServiceError>
    where
        A: FnOnce(
                Vec<Result<TransitionResponse, ServiceError>>,
            )
                -> Result<(u16, serde_json::Result<serde_json::Value>), ServiceError>
            + Send
            + 'static,
    {
        let keys = keyed_store(&self.keys)?;
        let (service, moved_by) = (self.clone(), viewer.clone());
        let writer = self.writer();
        let (answered, best_effort) = self
            .outbox
            .write_offering(move |tx, offer| {
                Box::pin(async move {
                    if let Some(twin) = keyed.claim_in(&*keys, tx).await? {
                        return Ok::<_, ServiceError>((twin, Vec::new()));
                    }
                    let checked: Vec<TransitionItem> = items
                        .iter()
                        .filter_map(|i| i.as_ref().ok().cloned())
                        .collect();
                    let mut moved = writer.write_in(tx, checked, &offer).await?.into_iter();
                    let mut best_effort = Vec::new();
                    let mut outcomes = Vec::with_capacity(items.len());
                    for item in items {
                        outcomes.push(match item {
                            Err(refused) => Err(refused),
                            Ok(_) => match moved.next() {
                                Some(Ok(done)) => {
                                    let (response, events) = service.answer_of(done, &moved_by);
                                    best_effort.extend(events);
                                    Ok(response)
                                }
                                Some(Err(refused)) => Err(refused),
                                None => {
                                    Err(ServiceError::Internal("a transition was skipped".into()))
                                }
                            },
                        });
                    }
                    let (status, body) = answer(outcomes)?;
                    let body = body.map_err(|e| ServiceError::Internal(e.to_string()))?;
                    let answered = keyed.answer_in(&*keys, tx, status, &body).await?;
                    Ok((answered, best_effort))
                })
            })
            .await?;
        if !answered.replayed {
            tracing::info!(status = answered.status, by = %viewer.name, "runs moved under an idempotency key");
        }
        if let Some(sender) = &self.best_effort {
            sender.send(best_effort);
        }
        Ok(answered)
    }

    /// A move to `awaiting_approval` that asks for an approval: committed with its
    /// `approval_request` (not batched: it is rare, and reads a definition first).
    async fn request_approval(
        &self,
        viewer: &Viewer,
        id: &str,
        to: RunStatus,
        ask: ApprovalAsk,
        result: Option<String>,
    ) -> Result<TransitionResponse, ServiceError> {
        let viewer = require(Some(viewer), Permission::ApprovalsSubmit)?;
        if to != RunStatus::AwaitingApproval {
            return Err(ServiceError::invalid(
                "approval",
                format!(
                    "only a move to awaiting_approval asks for an approval, not one to {}",
                    to.as_str()
                ),
            ));
        }
        let requests = match (&self.approval_requests, &self.best_effort) {
            (Some(requests), None) => requests,
            _ => {
                return Err(ServiceError::CapabilityUnavailable(
                    "a run approval needs a durable outbox in both stores, and this store has none; nothing was changed".into(),
                ))
            }
        };
        match requests.request(&viewer.name, id, ask, result).await? {
            Moved::Replayed(current) => Ok(TransitionResponse {
                run: detail(current, viewer),
                notifications: Vec::new(),
                replayed: true,
            }),
            Moved::Transitioned { run, events } => {
                tracing::info!(run_id = %run.id, approval_id = run.approval_id.as_deref().unwrap_or_default(), by = %viewer.name, "run awaits approval");
                Ok(TransitionResponse {
                    run: detail(run, viewer),
                    notifications: events.into_iter().map(|e| e.event_id).collect(),
                    replayed: false,
                })
            }
        }
    }

    /// Several transitions at once, each exactly as [`RunService::transition`] would
    /// make it (they run concurrently, so under group commit they share commits).
    /// One result per item, in order; one item's failure never fails another.
    pub async fn transition_batch(
        &self,
        viewer: Option<&Viewer>,
        batch: BatchTransitions,
    ) -> Result<Vec<Result<TransitionResponse, ServiceError>>, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?.clone();
        let n = batch.transitions.len();
        check_batch_size(n)?;
        let mut tasks = tokio::task::JoinSet::new();
        for (index, item) in batch.transitions.into_iter().enumerate() {
            let (service, viewer) = (self.clone(), viewer.clone());
            tasks.spawn(async move {
                let request = TransitionRequest {
                    to: item.to,
                    result: item.result,
                    approval: None,
                };
                let outcome = service
                    .transition(Some(&viewer), &item.run_id, request)
                    .await;
                (index, outcome)
            });
        }
        let mut results: Vec<Option<Result<TransitionResponse, ServiceError>>> =
            (0..n).map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            let (index, outcome) = joined
                .map_err(|e| ServiceError::Internal(format!("a batch item panicked: {e}")))?;
            results[index] = Some(outcome);
        }
        Ok(results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(ServiceError::Internal("a batch item was lost".into())))
            })
            .collect())
    }

    pub async fn create(
        &self,
        viewer: Option<&Viewer>,
        input: CreateRun,
    ) -> Result<RunDetail, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?;
        let new_run = self.checked(input)?;
        // Batched with concurrent creations: one write unit for many.
        let run = self
            .creations()
            .submit(new_run)
            .await
            .map_err(|lost| ServiceError::Internal(lost.to_string()))??;
        tracing::info!(run_id = %run.id, run_type = %run.run_type, by = %viewer.name, "run created");
        Ok(detail(run, viewer))
    }

    /// [`RunService::create`] under an idempotency key: the run and the key's
    /// answer commit together, and a repeat of the request (the answer lost, or a
    /// concurrent twin) gets the original answer and creates nothing.
    pub async fn create_once(
        &self,
        viewer: Option<&Viewer>,
        input: CreateRun,
        key: &IdempotencyKey,
    ) -> Result<Answered, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?.clone();
        let keys = keyed_store(&self.keys)?;
        let keyed = Keyed::new(&viewer.name, key, "create_run", &input);
        if let Some(earlier) = keyed.earlier(&*keys).await? {
            return Ok(earlier);
        }
        let new_run = self.checked(input)?;
        let repo = self.repo.clone();
        let answered = self
            .outbox
            .units()
            .run(move |tx| {
                Box::pin(async move {
                    if let Some(twin) = keyed.claim_in(&*keys, tx).await? {
                        return Ok::<_, ServiceError>(twin);
                    }
                    let run = repo.create_run_in(tx, new_run).await?;
                    tracing::info!(run_id = %run.id, run_type = %run.run_type, by = %viewer.name, "run created under an idempotency key");
                    keyed
                        .answer_in(&*keys, tx, 201, &detail(run, &viewer))
                        .await
                })
            })
            .await?;
        if !answered.replayed {
            TestPause::at(&self.create_pause, "committed").await;
        }
        Ok(answered)
    }

    /// A create's input, validated, its routes known.
    fn checked(&self, input: CreateRun) -> Result<NewRun, ServiceError> {
        let new_run = validate_new_run(input)?;
        if let Some(unknown) = new_run.routes.iter().find(|r| !self.planner.has_route(r)) {
            return Err(ServiceError::invalid(
                "routes",
                format!("no delivery route is named {unknown:?}"),
            ));
        }
        Ok(new_run)
    }

    pub async fn get(&self, viewer: Option<&Viewer>, id: &str) -> Result<RunDetail, ServiceError> {
        let viewer = require(viewer, Permission::RunsRead)?;
        let run = self
            .repo
            .get_run(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("run {id:?}")))?;
        Ok(detail(run, viewer))
    }

    /// A run with its deliveries and their attempt timelines, redacted for the viewer.
    pub async fn view(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
    ) -> Result<app::dto::RunView, ServiceError> {
        let run = self.get(viewer, id).await?;
        let (deliveries, deliveries_unavailable) = if self.deliveries.is_durable() {
            (self.deliveries.details_for_run(viewer, id).await?, None)
        } else {
            (
                Vec::new(),
                Some(super::deliveries::NO_DURABLE_OUTBOX.to_string()),
            )
        };
        Ok(app::dto::RunView {
            run: RunFacts {
                result: run
                    .result
                    .as_ref()
                    .map(|r| serde_json::to_string_pretty(r).unwrap_or_default()),
                id: run.id,
                run_type: run.run_type,
                tenant: run.tenant,
                status: run.status,
                callback_origin: run.callback_origin,
                callback_url: run.callback_url,
                routes: run.routes,
                transition_seq: run.transition_seq,
                created_at: run.created_at,
                updated_at: run.updated_at,
            },
            deliveries,
            deliveries_unavailable,
        })
    }

    /// One page of runs, newest first, each with its deliveries counted by state
    /// (one grouped query for the whole page).
    pub async fn list(
        &self,
        viewer: Option<&Viewer>,
        query: RunQuery,
    ) -> Result<RunPage, ServiceError> {
        require(viewer, Permission::RunsRead)?;
        let limit = query.effective_limit();
        let created_from_ms = query
            .created_from
            .as_deref()
            .filter(|v| !v.is_empty())
            .map(|v| parse_instant("created_from", v, false))
            .transpose()?;
        let created_to_ms = query
            .created_to
            .as_deref()
            .filter(|v| !v.is_empty())
            .map(|v| parse_instant("created_to", v, true))
            .transpose()?;
        let filter = RunFilter {
            run_type: query.run_type.filter(|t| !t.is_empty()),
            status: query.status,
            tenant: query.tenant.filter(|t| !t.is_empty()),
            delivery_states: query.delivery.map(|d| d.states()).unwrap_or_default(),
            created_from_ms,
            created_to_ms,
            before_id: query.after.filter(|a| !a.is_empty()),
            limit: limit + 1,
        };
        let mut runs = self.repo.list_runs(&filter).await?;
        let next_cursor = if runs.len() > limit as usize {
            runs.truncate(limit as usize);
            runs.last().map(|run| run.id.clone())
        } else {
            None
        };
        let ids: Vec<String> = runs.iter().map(|r| r.id.clone()).collect();
        let mut counts = self.deliveries.counts_for_runs(&ids).await?;
        Ok(RunPage {
            runs: runs
                .into_iter()
                .map(|run| {
                    let deliveries = counts.remove(&run.id).unwrap_or_default();
                    summary(run, deliveries)
                })
                .collect(),
            next_cursor,
            run_types: self.repo.run_types().await?,
            status_counts: self
                .repo
                .count_by_status(app::dto::STATUS_COUNT_CAP)
                .await?,
        })
    }
}

fn check_batch_size(n: usize) -> Result<(), ServiceError> {
    if n == 0 || n > MAX_BATCH_TRANSITIONS {
        return Err(ServiceError::invalid(
            "transitions",
            format!("holds {n} items; a batch holds 1 to {MAX_BATCH_TRANSITIONS}"),
        ));
    }
    Ok(())
}

/// Where this server keeps idempotency keys, or why a keyed request is refused.
fn keyed_store(
    keys: &Option<Arc<dyn IdempotencyKeys>>,
) -> Result<Arc<dyn IdempotencyKeys>, ServiceError> {
    keys.clone().ok_or_else(|| {
        ServiceError::CapabilityUnavailable("idempotency keys are not kept on this server".into())
    })
}

fn validate_new_run(input: CreateRun) -> Result<NewRun, ServiceError> {
    let run_type = input.run_type.trim().to_string();
    if run_type.is_empty() || run_type.len() > MAX_RUN_TYPE_LEN {
        return Err(ServiceError::invalid(
            "type",
            format!("must be 1 to {MAX_RUN_TYPE_LEN} characters"),
        ));
    }
    if !run_type
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
    {
        return Err(ServiceError::invalid(
            "type",
            "may hold only letters, digits and _ - . :",
        ));
    }
    let tenant = input.tenant.trim().to_string();
    if tenant.is_empty() || tenant.len() > MAX_TENANT_LEN {
        return Err(ServiceError::invalid(
            "tenant",
            format!("must be 1 to {MAX_TENANT_LEN} characters"),
        ));
    }
    if tenant.chars().any(char::is_control) {
        return Err(ServiceError::invalid(
            "tenant",
            "must not contain control characters",
        ));
    }
    let callback_url = match input.callback_url {
        Some(url) if !url.trim().is_empty() => Some(validate_url("callback_url", url.trim())?),
        _ => None,
    };
    let mut routes = input.routes;
    routes.sort();
    routes.dedup();
    if serde_json::to_string(&routes).map_or(0, |s| s.len()) > MAX_ROUTES_LEN {
        return Err(ServiceError::invalid(
            "routes",
            format!("the route list is longer than {MAX_ROUTES_LEN} characters"),
        ));
    }
    Ok(NewRun {
        run_type,
        tenant,
        callback_url,
        routes,
    })
}

fn summary(run: Run, deliveries: DeliveryCounts) -> RunSummary {
    RunSummary {
        deliveries,
        callback_origin: run.callback_url.as_deref().and_then(crate::routes::origin),
        id: run.id,
        run_type: run.run_type,
        tenant: run.tenant,
        status: run.status,
        created_at: format_ms(run.created_at_ms),
        updated_at: format_ms(run.updated_at_ms),
    }
}

fn detail(run: Run, viewer: &Viewer) -> RunDetail {
    let sees_data = viewer.can(Permission::DataRead);
    RunDetail {
        callback_origin: run.callback_url.as_deref().and_then(crate::routes::origin),
        callback_url: run.callback_url.filter(|_| sees_data),
        result: run
            .result
            .filter(|_| sees_data)
            .and_then(|text| serde_json::from_str(&text).ok()),
        id: run.id,
        run_type: run.run_type,
        tenant: run.tenant,
        status: run.status,
        transition_seq: run.transition_seq,
        routes: run.routes,
        approval_id: run.approval_id,
        created_at: format_ms(run.created_at_ms),
        updated_at: format_ms(run.updated_at_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(run_type: &str, tenant: &str, url: Option<&str>) -> CreateRun {
        CreateRun {
            run_type: run_type.into(),
            tenant: tenant.into(),
            callback_url: url.map(Into::into),
            routes: Vec::new(),
        }
    }

    fn field_of(err: ServiceError) -> &'static str {
        match err {
            ServiceError::Invalid { field, .. } => field,
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    #[test]
    fn validation_names_the_field() {
        assert_eq!(
            field_of(validate_new_run(input("", "t", None)).unwrap_err()),
            "type"
        );
        assert_eq!(
            field_of(validate_new_run(input("a b", "t", None)).unwrap_err()),
            "type"
        );
        assert_eq!(
            field_of(validate_new_run(input("etl", " ", None)).unwrap_err()),
            "tenant"
        );
        for bad in ["ftp://x/y", "not a url", "http://", "http://exa mple.com/"] {
            assert_eq!(
                field_of(validate_new_run(input("etl", "t", Some(bad))).unwrap_err()),
                "callback_url",
                "{bad}"
            );
        }
        let ok = validate_new_run(input(
            " etl.daily ",
            "acme",
            Some("https://hooks.example.com/x?k=1"),
        ))
        .unwrap();
        assert_eq!(ok.run_type, "etl.daily");
        assert_eq!(
            ok.callback_url.as_deref(),
            Some("https://hooks.example.com/x?k=1")
        );
    }
}
