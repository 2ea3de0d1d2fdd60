//! The approvals source's contract (seed 000's test list and the lifecycle), run
//! on SQLite, PostgreSQL and MariaDB through the real services, the real outbox
//! engine and the real `field_update` handler.

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald::approvals::model::{kinds, DefinitionSpec, ReplayPayload};
use herald::approvals::planner::ApprovalPlanner;
use herald::approvals::replay::{ReplayError, ReplayHandler};
use herald::config::{Settings, SettingsArgs};
use herald::outbox::handler::Registry;
use herald::outbox::metrics::Metrics;
use herald::outbox::model::{EventRecord, Source};
use herald::outbox::policy::RetryPolicy;
use herald::outbox::worker::{Worker, WorkerConfig};
use herald::outbox::Outbox;
use herald::runtime::{replay_policy, retry_policy};
use herald::service::approvals::{ApprovalService, SubmitRequest};
use herald::service::deliveries::{DeliveryService, RetryRequest};
use herald::service::records::{RecordInput, RecordService};
use herald::service::ServiceError;
use herald::store::ports::{ApprovalRepository, RecordRepository};
use herald::store::ports::{DeliveryReads, OutboxStore};
use herald::store::SqlStore;
use serde_json::{json, Value};
use testkit::TestDb;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use vocab::approvals::{Approver, InstanceStatus};
use vocab::{DeliveryStatus, Role, Viewer};

/// An operator's retry of a field-update replay the operator saw in `status`.
fn replay_retry(status: DeliveryStatus) -> RetryRequest {
    RetryRequest {
        kind: kinds::FIELD_UPDATE.into(),
        expected_status: status,
        expected_cycle: None,
        allow_uncertain: false,
    }
}

testkit::contract_tests!(
    recall_enqueues_one_replay_event_and_does_not_update_inline,
    recall_freezes_the_related_record_target_of_a_lookup_path,
    replay_writes_the_frozen_target_after_the_lookup_moved,
    a_pending_replay_drains_after_a_restart,
    a_failing_replay_retries_to_exhaustion_and_is_shelved_with_alerted_at,
    a_successful_replay_completes_in_the_same_pass_and_transaction,
    replay_backoff_follows_the_configured_policy,
    a_replay_skips_a_field_that_already_holds_the_value,
    submit_commits_the_prompt_with_the_approval,
    a_decided_approval_skips_its_undelivered_prompt,
    recall_fails_closed_without_a_durable_outbox,
    submit_fails_closed_when_prompts_have_no_durable_outbox,
    permissions_and_system_objects_are_enforced,
    an_instance_keeps_the_definition_version_it_started_with,
    a_recall_whose_enqueue_fails_rolls_back,
    a_failed_replay_is_retried_through_the_one_retry_entry_point,
    a_claimed_prompt_of_a_decided_approval_is_skipped_by_its_handler,
    a_prompt_whose_route_was_removed_fails_with_a_clear_error,
    a_replay_whose_last_lease_expires_is_failed_by_the_sweep_and_counted,
    nodes_loading_the_same_definition_at_once_agree_on_one_version,
    a_step_for_a_named_user_is_decided_by_that_user_alone,
    lifecycle_field_updates_apply_in_commit_order_per_record_through_a_failed_head,
    a_skipped_field_update_head_lets_the_records_later_updates_apply,
    lifecycle_field_updates_fail_closed_without_a_durable_outbox,
);

fn viewer(name: &str, role: Role) -> Viewer {
    Viewer {
        name: name.into(),
        role,
    }
}

fn alice() -> Viewer {
    viewer("alice", Role::Operator)
}

fn boss() -> Viewer {
    viewer("boss", Role::Admin)
}

struct Fixture {
    store: SqlStore,
    approvals: ApprovalService,
    records: RecordService,
    settings: Settings,
    metrics: Arc<Metrics>,
    _config: tempfile::NamedTempFile,
}

const CONFIG: &str = r#"
replay_max_attempts = 3
replay_initial_backoff_ms = 40
replay_max_backoff_ms = 100
backoff_jitter = false

[[routes]]
name = "approvers"
channel = "webhook"
url = "https://approvals.example.com/hook"
"#;

async fn fixture(db: &TestDb) -> Fixture {
    fixture_with(db, true).await
}

async fn fixture_with(db: &TestDb, wired: bool) -> Fixture {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), CONFIG).unwrap();
    let settings = Settings::resolve(&SettingsArgs {
        database_url: Some(db.url.clone()),
        config: Some(file.path().to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    let store = db.store().await;
    let planner = Arc::new(ApprovalPlanner::new(
        Arc::new(herald::routes::Routes::new(&settings.routes)),
        &retry_policy(&settings),
        &replay_policy(&settings),
    ));
    let outbox = wired.then(|| Outbox::new(Arc::new(store.clone()), Arc::new(Notify::new())));
    Fixture {
        approvals: ApprovalService::new(store.clone(), outbox, planner),
        records: RecordService::new(store.clone()),
        store,
        settings,
        metrics: Arc::new(Metrics::new()),
        _config: file,
    }
}

fn spec(value: Value) -> DefinitionSpec {
    serde_json::from_value(value).unwrap()
}

/// Opportunity approvals by an admin; Recall reopens the opportunity and its account.
fn deal_definition() -> DefinitionSpec {
    spec(json!({
        "id": "deal",
        "object": "Opportunity",
        "steps": [{ "name": "Manager", "approver": { "role": "admin" }, "route": "approvers" }],
        "actions": {
            "approve": [{ "type": "FieldUpdate", "id": "won", "field_path": "Stage", "value": "Won" }],
            "recall": [
                { "type": "FieldUpdate", "id": "reopen", "name": "Reopen", "field_path": "Stage", "value": "Open" },
                { "type": "FieldUpdate", "id": "acct", "name": "Account back to prospect", "field_path": "Account.Status", "value": "Prospect" }
            ]
        }
    }))
}

impl Fixture {
    /// Runs one statement with one bound id, written with `?` placeholders.
    async fn exec(&self, sql: &str, id: &str) {
        sqlx::query(&self.store.engine().sql(sql))
            .bind(id)
            .execute(self.store.pool())
            .await
            .unwrap();
    }

    async fn record(&self, object: &str, fields: Value) -> String {
        let Value::Object(fields) = fields else {
            panic!("fields")
        };
        self.records
            .create(Some(&alice()), object, RecordInput { fields })
            .await
            .unwrap()
            .id
    }

    async fn field(&self, id: &str, field: &str) -> Value {
        let record = self.store.get_record(id).await.unwrap().unwrap();
        record.fields.get(field).cloned().unwrap_or(Value::Null)
    }

    async fn version(&self, id: &str) -> i64 {
        self.store.get_record(id).await.unwrap().unwrap().version
    }

    /// An account and an opportunity pointing at it; a submitted approval.
    async fn submitted(&self) -> (String, String, String) {
        let (account, deal) = self.deal_under(deal_definition()).await;
        let approval = self.submit_as("deal", &deal).await;
        (account, deal, approval.id)
    }

    /// `definition` stored; an account and an opportunity pointing at it.
    async fn deal_under(&self, definition: DefinitionSpec) -> (String, String) {
        self.approvals
            .put_definition(Some(&boss()), definition)
            .await
            .unwrap();
        let account = self
            .record("Account", json!({ "Name": "Acme", "Status": "Customer" }))
            .await;
        let deal = self
            .record(
                "Opportunity",
                json!({ "Name": "Big deal", "Stage": "Negotiation", "AccountId": account }),
            )
            .await;
        (account, deal)
    }

    /// Alice submits `deal` for approval under `definition`.
    async fn submit_as(
        &self,
        definition: &str,
        deal: &str,
    ) -> herald::service::approvals::ApprovalView {
        self.approvals
            .submit(
                Some(&alice()),
                SubmitRequest {
                    definition_id: definition.into(),
                    record_id: deal.into(),
                },
            )
            .await
            .unwrap()
    }

    async fn replay_event(&self, approval: &str) -> EventRecord {
        let events = self
            .store
            .events_for_parent("approval", approval)
            .await
            .unwrap();
        let replays: Vec<EventRecord> = events
            .into_iter()
            .filter(|e| e.kind == kinds::FIELD_UPDATE)
            .collect();
        assert_eq!(replays.len(), 1, "exactly one replay event per recall");
        replays.into_iter().next().unwrap()
    }

    fn replay_worker(&self, store: &SqlStore, policy: RetryPolicy) -> Worker {
        let mut registry = Registry::new();
        registry.register(
            kinds::FIELD_UPDATE,
            Source::Approvals,
            policy,
            Arc::new(ReplayHandler::new(store.clone())),
        );
        Worker::new(
            Arc::new(store.clone()),
            Arc::new(registry),
            self.metrics.clone(),
            WorkerConfig {
                batch_size: 8,
                concurrency: 4,
                poll_interval: Duration::from_millis(20),
                drain_deadline: Duration::from_secs(5),
                ..WorkerConfig::default()
            },
            Arc::new(Notify::new()),
        )
    }

    /// Runs a replay worker on `store` until `event_id` reaches `status`.
    async fn replay_until(
        &self,
        store: &SqlStore,
        event_id: &str,
        status: DeliveryStatus,
    ) -> EventRecord {
        let worker = self.replay_worker(store, replay_policy(&self.settings));
        let stop = CancellationToken::new();
        let running = tokio::spawn(worker.run(stop.clone()));
        let deadline = Instant::now() + Duration::from_secs(20);
        let event = loop {
            let event = store.get_event(event_id).await.unwrap().unwrap();
            if event.status == status {
                break event;
            }
            assert!(
                Instant::now() < deadline,
                "{event_id} never became {status:?}: {event:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        stop.cancel();
        running.await.unwrap();
        event
    }

    /// The operators' retry and skip, with the approvals store as a source.
    fn deliveries(&self) -> DeliveryService {
        let mut registry = Registry::new();
        registry.register(
            kinds::FIELD_UPDATE,
            Source::Approvals,
            replay_policy(&self.settings),
            Arc::new(ReplayHandler::new(self.store.clone())),
        );
        DeliveryService::new(
            Arc::new(self.store.clone()),
            Arc::new(self.store.clone()),
            Arc::new(Registry::new()),
            6,
        )
        .with_source(Arc::new(self.store.clone()), Arc::new(registry))
    }

    /// `prompt` handled by the approvals' prompt handler, as if a worker had just
    /// claimed it (its first attempt).
    async fn handle_prompt(&self, prompt: &EventRecord) -> herald::outbox::handler::Outcome {
        use herald::outbox::handler::Handler;
        let (delivery, _) = herald::runtime::delivery_handler(&self.settings).unwrap();
        let handler = herald::approvals::prompts::PromptHandler {
            store: std::sync::Arc::new(self.store.clone()),
            delivery,
        };
        let claimed = herald::outbox::model::ClaimedEvent {
            event_id: prompt.event_id.clone(),
            source: prompt.source.clone(),
            kind: prompt.kind.clone(),
            parent_type: prompt.parent_type.clone(),
            parent_id: prompt.parent_id.clone(),
            payload: prompt.payload.clone(),
            redeliverable: prompt.redeliverable,
            attempts: 1,
            cycle: 1,
            cycle_attempts: 1,
            max_attempts: prompt.max_attempts,
            lease_token: "t".into(),
            destination: None,
            trace_parent: None,
            lane: None,
        };
        handler.handle(&claimed).await
    }

    async fn close(self) {
        self.store.close().await;
    }
}

async fn recall_enqueues_one_replay_event_and_does_not_update_inline(db: &TestDb) {
    let f = fixture(db).await;
    let (account, deal, approval) = f.submitted().await;
    let recalled = f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    assert_eq!(recalled.status.as_str(), "removed");
    let replay_id = format!("recall_{approval}_{}", recalled.transition_seq);
    assert!(recalled.committed_events.contains(&replay_id));
    // Nothing was written inline: the targets still hold their old values.
    assert_eq!(f.field(&deal, "Stage").await, "Negotiation");
    assert_eq!(f.field(&account, "Status").await, "Customer");
    assert_eq!(f.version(&deal).await, 1);
    let event = f.replay_event(&approval).await;
    assert_eq!(event.event_id, replay_id);
    assert_eq!(event.status, DeliveryStatus::Pending);
    assert_eq!(event.source, "approvals");
    let prompt = f
        .store
        .get_event(&format!("approval_{approval}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        prompt.status,
        DeliveryStatus::Skipped,
        "a recalled approval is never prompted"
    );
    // Instance, nodes and work items are removed in the same transaction.
    let detail = f.approvals.get(Some(&alice()), &approval).await.unwrap();
    assert!(detail.nodes.iter().all(|n| n["status"] == "removed"));
    assert!(detail.work_items.iter().all(|w| w["status"] == "removed"));
    assert!(!detail.work_items.is_empty());
    // A second recall is refused and writes nothing.
    let again = f.approvals.recall(Some(&alice()), &approval).await;
    assert!(matches!(again, Err(ServiceError::Conflict(_))), "{again:?}");
    f.replay_event(&approval).await;
    f.close().await;
}

async fn recall_freezes_the_related_record_target_of_a_lookup_path(db: &TestDb) {
    let f = fixture(db).await;
    let (account, deal, approval) = f.submitted().await;
    f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    let event = f.replay_event(&approval).await;
    let payload: ReplayPayload = serde_json::from_str(&event.payload).unwrap();
    assert_eq!(payload.lifecycle_event.as_str(), "Recall");
    assert_eq!(payload.process_instance_id, approval);
    assert_eq!(payload.definition_id, "deal");
    assert_eq!(payload.definition_version, 1);
    assert_eq!(payload.object, "Opportunity");
    assert_eq!(payload.record_id, deal);
    assert_eq!(payload.actor.name, "alice");
    assert_eq!(payload.actor.role, Role::Operator);
    assert_eq!(payload.instructions.len(), 2);
    let own = &payload.instructions[0];
    assert_eq!(
        (own.action_id.as_str(), own.action_name.as_str()),
        ("reopen", "Reopen")
    );
    assert_eq!(own.target.object, "Opportunity");
    assert_eq!(own.target.record_id, deal);
    assert_eq!(own.target.field, "Stage");
    let related = &payload.instructions[1];
    assert_eq!(related.field_path, "Account.Status");
    assert_eq!(related.value, "Prospect");
    assert_eq!(related.target.object, "Account");
    assert_eq!(related.target.record_id, account);
    assert_eq!(related.target.field, "Status");
    f.close().await;
}

async fn replay_writes_the_frozen_target_after_the_lookup_moved(db: &TestDb) {
    let f = fixture(db).await;
    let (account, deal, approval) = f.submitted().await;
    f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    // After the recall committed, the opportunity moves to another account.
    let other = f
        .record("Account", json!({ "Name": "Other", "Status": "Customer" }))
        .await;
    let Value::Object(moved) = json!({ "AccountId": other }) else {
        unreachable!()
    };
    f.records
        .update(
            Some(&alice()),
            "Opportunity",
            &deal,
            RecordInput { fields: moved },
        )
        .await
        .unwrap();
    let event = f.replay_event(&approval).await;
    f.replay_until(&f.store, &event.event_id, DeliveryStatus::Completed)
        .await;
    assert_eq!(
        f.field(&account, "Status").await,
        "Prospect",
        "the frozen target"
    );
    assert_eq!(
        f.field(&other, "Status").await,
        "Customer",
        "never re-resolved"
    );
    assert_eq!(f.version(&other).await, 1);
    assert_eq!(f.field(&deal, "Stage").await, "Open");
    f.close().await;
}

async fn a_pending_replay_drains_after_a_restart(db: &TestDb) {
    let f = fixture(db).await;
    let (account, deal, approval) = f.submitted().await;
    f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    let event_id = f.replay_event(&approval).await.event_id;
    // "Restart": a new store connection and a new worker over the same database.
    let restarted = db.store().await;
    let event = f
        .replay_until(&restarted, &event_id, DeliveryStatus::Completed)
        .await;
    assert_eq!(event.attempts, 1);
    assert_eq!(f.field(&deal, "Stage").await, "Open");
    assert_eq!(f.field(&account, "Status").await, "Prospect");
    restarted.close().await;
    f.close().await;
}

async fn a_failing_replay_retries_to_exhaustion_and_is_shelved_with_alerted_at(db: &TestDb) {
    let logs = testkit::logs::capture();
    let f = fixture(db).await;
    let (account, deal, approval) = f.submitted().await;
    f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    // The frozen target of instruction 2 disappears: every replay attempt fails
    // after instruction 1 (the opportunity's own Stage) was applied in its pass.
    f.exec("DELETE FROM records WHERE id = ?", &account).await;
    let event_id = f.replay_event(&approval).await.event_id;
    let failed = f
        .replay_until(&f.store, &event_id, DeliveryStatus::Failed)
        .await;
    assert_eq!(failed.attempts, 3, "replay_max_attempts = 3");
    // Seed 000 Worker Design §4: one transaction per replay, so instruction 1 was
    // rolled back with the failure, three times.
    assert_eq!(
        f.field(&deal, "Stage").await,
        "Negotiation",
        "instruction 1 rolled back"
    );
    assert_eq!(f.version(&deal).await, 1, "never written");
    let alerts = logs.lines_with(&event_id);
    assert!(
        alerts
            .iter()
            .any(|line| line.contains("ERROR") && line.contains("OPERATOR_ALERT")),
        "the exhaustion is an OPERATOR_ALERT naming the event: {alerts:?}"
    );
    assert!(failed.failed_at.is_some());
    assert!(failed.alerted_at.is_some());
    assert!(
        failed
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("does not exist"),
        "{failed:?}"
    );
    assert_eq!(f.store.dead_letter_count(&event_id).await.unwrap(), 1);
    // The attempt log, the counters and the operators' shelf.
    assert_eq!(f.store.attempts(&event_id).await.unwrap().len(), 3);
    let metrics = f.metrics.render();
    assert!(
        metrics.contains(
            "herald_approval_action_replay_exhausted_total{lifecycle_event=\"recall\"} 1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains(
        "herald_approval_action_replay_attempts_total{lifecycle_event=\"recall\",outcome=\"retry\"} 2"
    ));
    let shelf = f.approvals.replay_status(Some(&boss())).await.unwrap();
    assert_eq!(shelf.failed.len(), 1);
    assert!(shelf.failed[0].payload.is_some(), "admins see the payload");
    let redacted = f
        .approvals
        .replay_status(Some(&viewer("rita", Role::Reader)))
        .await
        .unwrap();
    assert!(
        redacted.failed.is_empty() && !redacted.rows_visible,
        "readers see counts only (DESIGN §7: replay rows need data:read)"
    );
    assert_eq!(redacted.counts, shelf.counts);
    assert!(shelf.rows_visible);
    assert!(shelf
        .counts
        .iter()
        .any(|c| c.status == "failed" && c.count == 1));
    f.close().await;
}

async fn a_successful_replay_completes_in_the_same_pass_and_transaction(db: &TestDb) {
    let f = fixture(db).await;
    let (account, deal, approval) = f.submitted().await;
    f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    let event = f.replay_event(&approval).await;
    let payload: ReplayPayload = serde_json::from_str(&event.payload).unwrap();
    // Without the event's lease the completion is refused, and the mutation with it.
    let handler = ReplayHandler::new(f.store.clone());
    let lost = handler
        .replay(&event.event_id, "not-the-lease", &payload)
        .await;
    assert!(matches!(lost, Err(ReplayError::LeaseLost)), "{lost:?}");
    assert_eq!(f.field(&deal, "Stage").await, "Negotiation", "rolled back");
    assert_eq!(f.version(&deal).await, 1);
    // One worker pass: the target and the completion commit together.
    let done = f
        .replay_until(&f.store, &event.event_id, DeliveryStatus::Completed)
        .await;
    assert_eq!(done.attempts, 1, "completed in the pass that claimed it");
    assert!(done.completed_at.is_some());
    assert_eq!(f.version(&deal).await, 2, "written exactly once");
    assert_eq!(f.version(&account).await, 2);
    let attempts = f.store.attempts(&event.event_id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, "completed");
    assert!(f.metrics.render().contains(
        "herald_approval_action_replay_attempts_total{lifecycle_event=\"recall\",outcome=\"completed\"} 1"
    ));
    f.close().await;
}

async fn replay_backoff_follows_the_configured_policy(db: &TestDb) {
    let f = fixture(db).await;
    let policy = replay_policy(&f.settings);
    assert_eq!(policy.max_attempts, 3);
    assert_eq!(policy.backoff(1, None), Duration::from_millis(40));
    assert_eq!(policy.backoff(2, None), Duration::from_millis(80));
    assert_eq!(
        policy.backoff(3, None),
        Duration::from_millis(100),
        "capped"
    );
    assert_eq!(policy.lease, Duration::from_secs(30));
    // A slow policy on a failing replay: after the first attempt the event waits.
    let (account, _deal, approval) = f.submitted().await;
    f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    f.exec("DELETE FROM records WHERE id = ?", &account).await;
    let event_id = f.replay_event(&approval).await.event_id;
    let slow = RetryPolicy {
        initial_backoff: Duration::from_secs(600),
        max_backoff: Duration::from_secs(900),
        ..policy
    };
    let worker = f.replay_worker(&f.store, slow);
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    let deadline = Instant::now() + Duration::from_secs(20);
    let event = loop {
        let event = f.store.get_event(&event_id).await.unwrap().unwrap();
        if event.attempts == 1 && event.status == DeliveryStatus::Pending {
            break event;
        }
        assert!(Instant::now() < deadline, "{event:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.cancel();
    running.await.unwrap();
    let wait = event.next_attempt_at - event.updated_at;
    assert!(
        (600_000..=600_100).contains(&wait),
        "next attempt after the initial backoff: {wait} ms"
    );
    let still = f.store.get_event(&event_id).await.unwrap().unwrap();
    assert_eq!(still.attempts, 1, "not retried before its backoff");
    f.close().await;
}

async fn a_replay_skips_a_field_that_already_holds_the_value(db: &TestDb) {
    let f = fixture(db).await;
    let (account, deal, approval) = f.submitted().await;
    f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    // The "target committed, status mark did not" edge: the value is already there.
    let Value::Object(done) = json!({ "Stage": "Open" }) else {
        unreachable!()
    };
    f.records
        .update(
            Some(&alice()),
            "Opportunity",
            &deal,
            RecordInput { fields: done },
        )
        .await
        .unwrap();
    let event = f.replay_event(&approval).await;
    f.replay_until(&f.store, &event.event_id, DeliveryStatus::Completed)
        .await;
    assert_eq!(f.version(&deal).await, 2, "not written a second time");
    assert_eq!(f.field(&account, "Status").await, "Prospect");
    f.close().await;
}

async fn submit_commits_the_prompt_with_the_approval(db: &TestDb) {
    let f = fixture(db).await;
    let (_account, deal, approval) = f.submitted().await;
    let prompt = f
        .store
        .get_event(&format!("approval_{approval}"))
        .await
        .unwrap()
        .expect("the prompt committed with the approval");
    assert_eq!(prompt.kind, kinds::APPROVAL_PROMPT);
    assert_eq!(prompt.status, DeliveryStatus::Pending);
    assert_eq!(prompt.parent_id, approval);
    // Held to its destination's cap and breaker: its route's origin is stored with
    // it, though the URL is nested in the prompt's payload (issue 19).
    let sql =
        format!("SELECT destination FROM outbox_events WHERE event_id = 'approval_{approval}'");
    let row = sqlx::query(&sql).fetch_one(f.store.pool()).await.unwrap();
    assert_eq!(
        herald::store::row::opt_text(&row, "destination")
            .unwrap()
            .as_deref(),
        Some("https://approvals.example.com")
    );
    let detail = f.approvals.get(Some(&alice()), &approval).await.unwrap();
    assert_eq!(detail.approval.status.as_str(), "pending");
    assert_eq!(detail.nodes.len(), 1);
    assert_eq!(detail.work_items[0]["approver"], "admin");
    assert_eq!(detail.events.len(), 1);
    // A submit that fails (unknown definition) commits nothing.
    let bad = f
        .approvals
        .submit(
            Some(&alice()),
            SubmitRequest {
                definition_id: "nope".into(),
                record_id: deal.clone(),
            },
        )
        .await;
    assert!(matches!(
        bad,
        Err(ServiceError::Invalid {
            field: "definition_id",
            ..
        })
    ));
    assert_eq!(f.approvals.list(Some(&alice())).await.unwrap().len(), 1);
    f.close().await;
}

async fn a_decided_approval_skips_its_undelivered_prompt(db: &TestDb) {
    let f = fixture(db).await;
    let (_account, deal, approval) = f.submitted().await;
    let approved = f.approvals.approve(Some(&boss()), &approval).await.unwrap();
    assert_eq!(approved.status.as_str(), "approved");
    assert_eq!(approved.decided_by.as_deref(), Some("boss"));
    let prompt = f
        .store
        .get_event(&format!("approval_{approval}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(prompt.status, DeliveryStatus::Skipped, "never sent");
    // The final approval's FieldUpdate is written by its replay, after the
    // answer (docs/ORDERING.md §5).
    let owed = approved.field_updates.as_ref().unwrap();
    assert_eq!(owed.state, "applying");
    assert_eq!(f.field(&deal, "Stage").await, "Negotiation");
    f.replay_until(&f.store, &owed.event_id, DeliveryStatus::Completed)
        .await;
    assert_eq!(f.field(&deal, "Stage").await, "Won");
    let detail = f.approvals.get(Some(&alice()), &approval).await.unwrap();
    assert!(detail.work_items.iter().all(|w| w["status"] == "approved"));
    let again = f.approvals.reject(Some(&boss()), &approval).await;
    assert!(matches!(again, Err(ServiceError::Conflict(_))));
    f.close().await;
}

async fn recall_fails_closed_without_a_durable_outbox(db: &TestDb) {
    let wired = fixture(db).await;
    let (_account, deal, approval) = wired.submitted().await;
    let unwired = fixture_with(db, false).await;
    let refused = unwired.approvals.recall(Some(&alice()), &approval).await;
    assert!(
        matches!(refused, Err(ServiceError::CapabilityUnavailable(_))),
        "{refused:?}"
    );
    let detail = wired
        .approvals
        .get(Some(&alice()), &approval)
        .await
        .unwrap();
    assert_eq!(
        detail.approval.status.as_str(),
        "pending",
        "nothing committed"
    );
    assert!(detail.work_items.iter().all(|w| w["status"] == "pending"));
    assert!(detail.events.iter().all(|e| e.kind != kinds::FIELD_UPDATE));
    assert_eq!(wired.field(&deal, "Stage").await, "Negotiation");
    unwired.close().await;
    wired.close().await;
}

/// A step that owes approver prompts is refused without a durable outbox (as on
/// `memory://`), and nothing it would have written is kept.
async fn submit_fails_closed_when_prompts_have_no_durable_outbox(db: &TestDb) {
    let f = fixture_with(db, false).await;
    f.approvals
        .put_definition(Some(&boss()), deal_definition())
        .await
        .unwrap();
    let account = f
        .record("Account", json!({ "Name": "Acme", "Status": "Customer" }))
        .await;
    let deal = f
        .record(
            "Opportunity",
            json!({ "Name": "Big deal", "Stage": "Negotiation", "AccountId": account }),
        )
        .await;
    let refused = f
        .approvals
        .submit(
            Some(&alice()),
            SubmitRequest {
                definition_id: "deal".into(),
                record_id: deal.clone(),
            },
        )
        .await;
    assert!(
        matches!(refused, Err(ServiceError::CapabilityUnavailable(_))),
        "{refused:?}"
    );
    assert!(f.approvals.list(Some(&alice())).await.unwrap().is_empty());
    assert_eq!(f.field(&deal, "Stage").await, "Negotiation");
    f.close().await;
}

async fn permissions_and_system_objects_are_enforced(db: &TestDb) {
    let f = fixture(db).await;
    let (_account, deal, approval) = f.submitted().await;
    let reader = viewer("rita", Role::Reader);
    let submitted = f
        .approvals
        .submit(
            Some(&reader),
            SubmitRequest {
                definition_id: "deal".into(),
                record_id: deal.clone(),
            },
        )
        .await;
    assert!(
        matches!(submitted, Err(ServiceError::Forbidden(_))),
        "{submitted:?}"
    );
    // The step is decided by an admin: an operator is not its approver.
    let approved = f.approvals.approve(Some(&alice()), &approval).await;
    assert!(
        matches!(approved, Err(ServiceError::Refused(_))),
        "{approved:?}"
    );
    // Only the submitter or an admin recalls.
    let other = viewer("olga", Role::Operator);
    let recalled = f.approvals.recall(Some(&other), &approval).await;
    assert!(
        matches!(recalled, Err(ServiceError::Refused(_))),
        "{recalled:?}"
    );
    // Definitions are managed by admins only.
    let managed = f
        .approvals
        .put_definition(Some(&alice()), deal_definition())
        .await;
    assert!(matches!(managed, Err(ServiceError::Forbidden(_))));
    // System objects: never written, read only with data:read.
    let Value::Object(fields) = json!({ "Status": "x" }) else {
        unreachable!()
    };
    let write = f
        .records
        .create(
            Some(&boss()),
            "_System_ApprovalActionOutbox",
            RecordInput { fields },
        )
        .await;
    assert!(matches!(write, Err(ServiceError::Refused(_))), "{write:?}");
    let read = f
        .records
        .list(Some(&alice()), "_System_ApprovalActionOutbox", None, 10)
        .await;
    assert!(matches!(read, Err(ServiceError::Forbidden(_))), "{read:?}");
    let admin_read = f
        .records
        .list(Some(&boss()), "_System_ApprovalActionOutbox", None, 10)
        .await
        .unwrap();
    assert!(
        admin_read.is_empty(),
        "the outbox is never reachable as records"
    );
    let reader_write = f
        .records
        .get(Some(&reader), "Opportunity", &deal)
        .await
        .unwrap();
    assert_eq!(reader_write.id, deal);
    // A record id under another object is as unknown as a missing one, read or written.
    let elsewhere = f.records.get(Some(&boss()), "Account", &deal).await;
    assert!(
        matches!(elsewhere, Err(ServiceError::NotFound(_))),
        "{elsewhere:?}"
    );
    let Value::Object(fields) = json!({ "Status": "moved" }) else {
        unreachable!()
    };
    let elsewhere = f
        .records
        .update(Some(&boss()), "Account", &deal, RecordInput { fields })
        .await;
    assert!(
        matches!(elsewhere, Err(ServiceError::NotFound(_))),
        "{elsewhere:?}"
    );
    f.close().await;
}

async fn an_instance_keeps_the_definition_version_it_started_with(db: &TestDb) {
    let f = fixture(db).await;
    let (_account, deal, first) = f.submitted().await;
    let mut changed = deal_definition();
    changed.actions.approve.clear();
    changed.steps[0].route = None;
    let v2 = f
        .approvals
        .put_definition(Some(&boss()), changed.clone())
        .await
        .unwrap();
    assert_eq!(v2.version, 2);
    let same = f
        .approvals
        .put_definition(Some(&boss()), changed)
        .await
        .unwrap();
    assert_eq!(same.version, 2, "an unchanged definition is no new version");
    let approved = f.approvals.approve(Some(&boss()), &first).await.unwrap();
    let owed = approved.field_updates.unwrap().event_id;
    f.replay_until(&f.store, &owed, DeliveryStatus::Completed)
        .await;
    assert_eq!(
        f.field(&deal, "Stage").await,
        "Won",
        "v1's approve action ran"
    );
    let second = f
        .approvals
        .submit(
            Some(&alice()),
            SubmitRequest {
                definition_id: "deal".into(),
                record_id: deal.clone(),
            },
        )
        .await
        .unwrap();
    assert_eq!(second.definition_version, 2);
    assert!(second.committed_events.is_empty(), "v2 has no prompt route");
    f.close().await;
}

async fn a_recall_whose_enqueue_fails_rolls_back(db: &TestDb) {
    let f = fixture(db).await;
    let (account, deal, approval) = f.submitted().await;
    // The outbox table is gone: the replay enqueue inside the recall fails.
    sqlx::query("ALTER TABLE outbox_events RENAME TO outbox_events_gone")
        .execute(f.store.pool())
        .await
        .unwrap();
    let failed = f.approvals.recall(Some(&alice()), &approval).await;
    assert!(
        matches!(failed, Err(ServiceError::Internal(_))),
        "{failed:?}"
    );
    sqlx::query("ALTER TABLE outbox_events_gone RENAME TO outbox_events")
        .execute(f.store.pool())
        .await
        .unwrap();
    let detail = f.approvals.get(Some(&alice()), &approval).await.unwrap();
    assert_eq!(
        detail.approval.status.as_str(),
        "pending",
        "the recall rolled back"
    );
    assert!(detail.nodes.iter().all(|n| n["status"] == "pending"));
    assert!(detail.work_items.iter().all(|w| w["status"] == "pending"));
    assert!(detail.events.iter().all(|e| e.kind != kinds::FIELD_UPDATE));
    assert_eq!(f.field(&deal, "Stage").await, "Negotiation");
    assert_eq!(f.field(&account, "Status").await, "Customer");
    // Once the outbox is back, the recall goes through.
    f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    f.replay_event(&approval).await;
    f.close().await;
}

async fn a_failed_replay_is_retried_through_the_one_retry_entry_point(db: &TestDb) {
    let f = fixture(db).await;
    let (account, _deal, approval) = f.submitted().await;
    f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    f.exec("UPDATE records SET object = 'Gone' WHERE id = ?", &account)
        .await;
    let event_id = f.replay_event(&approval).await.event_id;
    let failed = f
        .replay_until(&f.store, &event_id, DeliveryStatus::Failed)
        .await;
    assert!(failed
        .last_error
        .unwrap()
        .contains("not the frozen Account"));
    // The cause is fixed; the operator retries through DeliveryService::retry.
    f.exec(
        "UPDATE records SET object = 'Account' WHERE id = ?",
        &account,
    )
    .await;
    let deliveries = f.deliveries();
    let retry = || replay_retry(DeliveryStatus::Failed);
    let reader = deliveries
        .retry(Some(&viewer("rita", Role::Reader)), &event_id, retry())
        .await;
    assert!(matches!(reader, Err(ServiceError::Forbidden(_))));
    let retried = deliveries
        .retry(Some(&alice()), &event_id, retry())
        .await
        .unwrap();
    assert_eq!(retried.status, DeliveryStatus::Pending);
    let done = f
        .replay_until(&f.store, &event_id, DeliveryStatus::Completed)
        .await;
    assert_eq!(done.cycle, 2);
    assert_eq!(done.attempts, 4, "cumulative attempts are kept");
    assert_eq!(f.field(&account, "Status").await, "Prospect");
    f.close().await;
}

async fn a_claimed_prompt_of_a_decided_approval_is_skipped_by_its_handler(db: &TestDb) {
    use herald::outbox::handler::Outcome;
    let f = fixture(db).await;
    let (_account, _deal, approval) = f.submitted().await;
    let prompt = f
        .store
        .get_event(&format!("approval_{approval}"))
        .await
        .unwrap()
        .unwrap();
    // As if a worker had claimed the prompt just before the decision committed.
    f.approvals.reject(Some(&boss()), &approval).await.unwrap();
    match f.handle_prompt(&prompt).await {
        Outcome::Skipped { reason } => assert!(reason.contains("rejected"), "{reason}"),
        other => panic!("a decided approval's prompt must be skipped, not {other:?}"),
    }
    f.close().await;
}

/// A definition stored while its step's route existed, and a config that no longer
/// has it: the prompt is still recorded, and fails with an error that names the
/// route, as a run's delivery to a removed route does (issue 19).
async fn a_prompt_whose_route_was_removed_fails_with_a_clear_error(db: &TestDb) {
    use herald::outbox::handler::Outcome;
    let f = fixture(db).await;
    let mut gone = deal_definition();
    gone.id = "deal-gone".into();
    gone.steps[0].route = Some("removed-route".into());
    // As stored back when the route was configured (the service checks routes).
    f.store.put_definition(&gone, "config").await.unwrap();
    let deal = f
        .record(
            "Opportunity",
            json!({ "Name": "Orphan deal", "Stage": "Negotiation" }),
        )
        .await;
    let approval = f
        .approvals
        .submit(
            Some(&alice()),
            SubmitRequest {
                definition_id: "deal-gone".into(),
                record_id: deal,
            },
        )
        .await
        .unwrap();
    let prompt = f
        .store
        .get_event(&format!("approval_{}", approval.id))
        .await
        .unwrap()
        .expect("the prompt is recorded, not silently skipped");
    match f.handle_prompt(&prompt).await {
        Outcome::Permanent { error, .. } => {
            assert!(
                error.contains("\"removed-route\" was not configured"),
                "{error}"
            )
        }
        other => panic!("a prompt to a removed route must fail, not {other:?}"),
    }
    f.close().await;
}

async fn a_replay_whose_last_lease_expires_is_failed_by_the_sweep_and_counted(db: &TestDb) {
    use herald::outbox::maintenance::Maintenance;
    use herald::store::ports::ClaimRequest;
    let f = fixture(db).await;
    let (_account, _deal, approval) = f.submitted().await;
    f.approvals.recall(Some(&alice()), &approval).await.unwrap();
    let event_id = f.replay_event(&approval).await.event_id;
    f.exec(
        "UPDATE outbox_events SET cycle_attempts = max_attempts - 1 WHERE event_id = ?",
        &event_id,
    )
    .await;
    // A worker claims the last attempt and dies with it.
    let claimed = f
        .store
        .claim(&ClaimRequest {
            lease_token: "dead-worker".into(),
            holder: "dead".into(),
            limit: 1,
            kinds: vec![kinds::FIELD_UPDATE.into()],
            lease_ms_by_kind: vec![(kinds::FIELD_UPDATE.into(), 50)],
            default_lease_ms: 50,
            due_within_ms: None,
            readmitted: Vec::new(),
            metered: Vec::new(),
            take_expired: true,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut registry = Registry::new();
    registry.register(
        kinds::FIELD_UPDATE,
        Source::Approvals,
        replay_policy(&f.settings),
        Arc::new(ReplayHandler::new(f.store.clone())),
    );
    let maintenance = Maintenance {
        store: Arc::new(f.store.clone()),
        metrics: f.metrics.clone(),
        sources: vec!["approvals"],
        interval: Duration::from_secs(1),
        dead_letter: None,
        registries: vec![Arc::new(registry)],
        passes: Default::default(),
        health: herald::outbox::availability::StoreHealth::new(
            f.metrics.clone(),
            vec!["approvals"],
        ),
        rollups: None,
    };
    assert!(maintenance.run_once().await);
    let event = f.store.get_event(&event_id).await.unwrap().unwrap();
    assert_eq!(event.status, DeliveryStatus::Failed);
    assert!(event.alerted_at.is_some());
    assert!(f
        .metrics
        .render()
        .contains("herald_approval_action_replay_exhausted_total{lifecycle_event=\"recall\"} 1"));
    f.close().await;
}

async fn nodes_loading_the_same_definition_at_once_agree_on_one_version(db: &TestDb) {
    let f = fixture(db).await;
    let mut loads = Vec::new();
    for _ in 0..6 {
        let store = f.store.clone();
        loads.push(tokio::spawn(async move {
            store.put_definition(&deal_definition(), "config").await
        }));
    }
    for load in loads {
        let definition = load.await.unwrap().expect("every node starts");
        assert_eq!(definition.version, 1);
    }
    assert_eq!(f.store.definitions().await.unwrap().len(), 1);
    f.close().await;
}

/// A step whose approver is a named user (`{"user": "bob"}`): neither another
/// operator nor an admin may decide it; bob may, whatever his role.
async fn a_step_for_a_named_user_is_decided_by_that_user_alone(db: &TestDb) {
    let f = fixture(db).await;
    let mut bobs = deal_definition();
    bobs.id = "deal-bob".into();
    bobs.steps[0].approver = Approver::User("bob".into());
    f.approvals
        .put_definition(Some(&boss()), bobs)
        .await
        .unwrap();
    let deal = f
        .record(
            "Opportunity",
            json!({ "Name": "Bob's deal", "Stage": "Negotiation" }),
        )
        .await;
    let approval = f
        .approvals
        .submit(
            Some(&alice()),
            SubmitRequest {
                definition_id: "deal-bob".into(),
                record_id: deal,
            },
        )
        .await
        .unwrap()
        .id;
    for other in [viewer("olga", Role::Operator), boss()] {
        let refused = f.approvals.approve(Some(&other), &approval).await;
        assert!(
            matches!(&refused, Err(ServiceError::Refused(m)) if m.contains("user bob")),
            "{}: {refused:?}",
            other.name
        );
    }
    let pending = f.approvals.get(Some(&boss()), &approval).await.unwrap();
    assert_eq!(
        pending.approval.status,
        InstanceStatus::Pending,
        "nothing decided"
    );
    let approved = f
        .approvals
        .approve(Some(&viewer("bob", Role::Operator)), &approval)
        .await
        .unwrap();
    assert_eq!(approved.status, InstanceStatus::Approved);
    assert_eq!(approved.decided_by.as_deref(), Some("bob"));
    f.close().await;
}

/// FieldUpdates on every lifecycle event of one Opportunity: Submit writes its
/// Account (through the lookup), the final Approve and the Recall its Stage.
fn ordered_definition() -> DefinitionSpec {
    spec(json!({
        "id": "ordered",
        "object": "Opportunity",
        "steps": [{ "name": "Manager", "approver": { "role": "admin" } }],
        "actions": {
            "submit": [{ "type": "FieldUpdate", "id": "review", "field_path": "Account.Status", "value": "Reviewing" }],
            "approve": [{ "type": "FieldUpdate", "id": "won", "field_path": "Stage", "value": "Won" }],
            "recall": [{ "type": "FieldUpdate", "id": "reopen", "field_path": "Stage", "value": "Open" }]
        }
    }))
}

/// The replay event a lifecycle call answered with, still to be applied.
fn applying(view: &herald::service::approvals::ApprovalView) -> String {
    let owed = view
        .field_updates
        .as_ref()
        .expect("the call owes field updates");
    assert_eq!(owed.state, "applying", "answered before the write");
    assert!(view.committed_events.contains(&owed.event_id));
    owed.event_id.clone()
}

async fn lifecycle_field_updates_apply_in_commit_order_per_record_through_a_failed_head(
    db: &TestDb,
) {
    let f = fixture(db).await;
    let (account, deal) = f.deal_under(ordered_definition()).await;
    // Four transitions on one record: A1 submitted and approved, A2 submitted
    // and recalled. None writes its fields inside its own transaction.
    let first = f.submit_as("ordered", &deal).await;
    let submit1 = applying(&first);
    assert_eq!(
        f.field(&account, "Status").await,
        "Customer",
        "not written inline"
    );
    let approved = f.approvals.approve(Some(&boss()), &first.id).await.unwrap();
    let approve1 = applying(&approved);
    assert_eq!(
        f.field(&deal, "Stage").await,
        "Negotiation",
        "not written inline"
    );
    let second = f.submit_as("ordered", &deal).await;
    let submit2 = applying(&second);
    let recalled = f
        .approvals
        .recall(Some(&alice()), &second.id)
        .await
        .unwrap();
    let recall2 = applying(&recalled);
    let lane_order = [&submit1, &approve1, &submit2, &recall2];

    // The head (A1's Submit update) cannot write its Account: it fails, and
    // the three behind it are never attempted while it blocks the lane.
    f.exec("UPDATE records SET object = 'Gone' WHERE id = ?", &account)
        .await;
    let head = f
        .replay_until(&f.store, &submit1, DeliveryStatus::Failed)
        .await;
    assert_eq!(head.attempts, 3);
    for later in &lane_order[1..] {
        let waiting = f.store.get_event(later).await.unwrap().unwrap();
        assert_eq!(waiting.status, DeliveryStatus::Pending, "{later}");
        assert_eq!(waiting.attempts, 0, "{later} waited behind the failed head");
    }
    assert_eq!(f.field(&deal, "Stage").await, "Negotiation");
    let (blocked, open) = f.store.blocked_lanes(50).await.unwrap();
    assert_eq!(open, 1);
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0].lane, format!("record:Opportunity:{deal}"));
    assert_eq!(blocked[0].head.event_id, submit1);
    assert_eq!(blocked[0].waiting, 3);
    let detail = f.approvals.get(Some(&alice()), &first.id).await.unwrap();
    let states: Vec<_> = detail
        .events
        .iter()
        .filter_map(|e| e.field_updates.clone().map(|s| (e.event_id.clone(), s)))
        .collect();
    assert!(
        states.contains(&(submit1.clone(), "blocked".to_string())),
        "{states:?}"
    );
    assert!(
        states.contains(&(approve1.clone(), "applying".to_string())),
        "{states:?}"
    );

    // Fixed and retried: the lane drains in commit order.
    f.exec(
        "UPDATE records SET object = 'Account' WHERE id = ?",
        &account,
    )
    .await;
    f.deliveries()
        .retry(
            Some(&alice()),
            &submit1,
            replay_retry(DeliveryStatus::Failed),
        )
        .await
        .unwrap();
    f.replay_until(&f.store, &recall2, DeliveryStatus::Completed)
        .await;
    let mut previous_done = 0;
    for id in lane_order {
        let event = f.store.get_event(id).await.unwrap().unwrap();
        assert_eq!(event.status, DeliveryStatus::Completed, "{id}");
        let attempts = f.store.attempts(id).await.unwrap();
        let started = attempts.iter().map(|a| a.started_at).min().unwrap();
        assert!(
            started >= previous_done,
            "{id} started at {started}, before the one ahead of it finished at {previous_done}"
        );
        previous_done = event.completed_at.unwrap();
    }
    // Won (A1's approval) was written before Open (A2's recall): Open stands.
    assert_eq!(f.field(&deal, "Stage").await, "Open");
    assert_eq!(f.field(&account, "Status").await, "Reviewing");
    let detail = f.approvals.get(Some(&alice()), &first.id).await.unwrap();
    assert!(detail
        .events
        .iter()
        .filter(|e| e.kind == kinds::FIELD_UPDATE)
        .all(|e| e.field_updates.as_deref() == Some("applied")));
    let (blocked, open) = f.store.blocked_lanes(50).await.unwrap();
    assert!(blocked.is_empty());
    assert_eq!(open, 0, "every member left its lane");
    f.close().await;
}

async fn a_skipped_field_update_head_lets_the_records_later_updates_apply(db: &TestDb) {
    use app::dto::SkipCommand;
    let f = fixture(db).await;
    let (account, deal) = f.deal_under(ordered_definition()).await;
    let first = f.submit_as("ordered", &deal).await;
    let submit1 = applying(&first);
    let approve1 = applying(&f.approvals.approve(Some(&boss()), &first.id).await.unwrap());
    f.exec("UPDATE records SET object = 'Gone' WHERE id = ?", &account)
        .await;
    f.replay_until(&f.store, &submit1, DeliveryStatus::Failed)
        .await;
    assert_eq!(
        f.store
            .get_event(&approve1)
            .await
            .unwrap()
            .unwrap()
            .attempts,
        0
    );
    f.deliveries()
        .skip(
            Some(&alice()),
            &submit1,
            SkipCommand {
                kind: kinds::FIELD_UPDATE.into(),
                expected_status: DeliveryStatus::Failed,
                expected_cycle: Some(1),
                allow_uncertain: false,
                reason: "the account was merged away".into(),
            },
        )
        .await
        .unwrap();
    f.replay_until(&f.store, &approve1, DeliveryStatus::Completed)
        .await;
    assert_eq!(f.field(&deal, "Stage").await, "Won");
    let detail = f.approvals.get(Some(&alice()), &first.id).await.unwrap();
    let skipped = detail
        .events
        .iter()
        .find(|e| e.event_id == submit1)
        .unwrap();
    assert_eq!(skipped.field_updates.as_deref(), Some("skipped"));
    let audit = f.store.audit(None, 10).await.unwrap();
    let row = audit.iter().find(|a| a.event_id == submit1).unwrap();
    assert_eq!(row.action, "skip");
    assert_eq!(row.reason.as_deref(), Some("the account was merged away"));
    // Retrying the skipped update now would write it after the later one:
    // refused, nothing changed.
    let retried = f
        .deliveries()
        .retry(
            Some(&alice()),
            &submit1,
            replay_retry(DeliveryStatus::Skipped),
        )
        .await;
    assert!(
        matches!(&retried, Err(ServiceError::Conflict(m)) if m.contains("out of order")),
        "{retried:?}"
    );
    let still = f.store.get_event(&submit1).await.unwrap().unwrap();
    assert_eq!(still.status, DeliveryStatus::Skipped);
    f.close().await;
}

/// Submit and final-Approve FieldUpdates, like Recall's, need the durable outbox
/// that applies them: without it (`memory://`) the transition is refused and
/// nothing it wrote is kept.
async fn lifecycle_field_updates_fail_closed_without_a_durable_outbox(db: &TestDb) {
    let wired = fixture(db).await;
    let unwired = fixture_with(db, false).await;
    // `ordered` owes a Submit FieldUpdate and no prompt.
    let (account, deal) = wired.deal_under(ordered_definition()).await;
    let refused = unwired
        .approvals
        .submit(
            Some(&alice()),
            SubmitRequest {
                definition_id: "ordered".into(),
                record_id: deal.clone(),
            },
        )
        .await;
    assert!(
        matches!(&refused, Err(ServiceError::CapabilityUnavailable(m)) if m.contains("Submit FieldUpdates")),
        "{refused:?}"
    );
    assert!(wired
        .approvals
        .of_record(Some(&alice()), "Opportunity", &deal)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(wired.field(&account, "Status").await, "Customer");
    // An approval submitted where the outbox is wired, decided where it is not.
    let approval = wired.submit_as("ordered", &deal).await;
    let refused = unwired.approvals.approve(Some(&boss()), &approval.id).await;
    assert!(
        matches!(&refused, Err(ServiceError::CapabilityUnavailable(m)) if m.contains("Approve FieldUpdates")),
        "{refused:?}"
    );
    let detail = wired
        .approvals
        .get(Some(&alice()), &approval.id)
        .await
        .unwrap();
    assert_eq!(
        detail.approval.status.as_str(),
        "pending",
        "nothing committed"
    );
    assert_eq!(wired.field(&deal, "Stage").await, "Negotiation");
    unwired.close().await;
    wired.close().await;
}
