//! Record lanes (issue 22, docs/ORDERING.md §1–2) as real processes apply them:
//! one Opportunity's lifecycle FieldUpdates are replayed by `herald serve`
//! processes on one store. The first is SIGKILLed holding the lane's head while a
//! second runs, which claims nothing behind it; then a third starts, so two race
//! for the lane while more transitions commit into it. The lane is applied in
//! commit order, no row before the one ahead of it completed, each write once.

use std::sync::Arc;
use std::time::Duration;

use herald::approvals::planner::ApprovalPlanner;
use herald::config::{Settings, SettingsArgs};
use herald::outbox::Outbox;
use herald::runtime::{replay_policy, retry_policy};
use herald::service::approvals::{ApprovalService, ApprovalView, SubmitRequest};
use herald::service::records::{RecordInput, RecordService};
use herald::store::ports::{OutboxStore, RecordRepository};
use herald::store::SqlStore;
use serde_json::json;
use testkit::{wait_for, HeraldProcess, TestDb};
use tokio::sync::Notify;
use vocab::{DeliveryStatus, Role, Viewer};

testkit::contract_tests!(
    record_field_updates_apply_in_commit_order_through_a_sigkill_and_two_processes,
);

/// Submit-and-approve cycles before the last submit, which is recalled.
const APPROVED_CYCLES: usize = 2;

fn admin() -> Viewer {
    Viewer {
        name: "boss".into(),
        role: Role::Admin,
    }
}

fn approvals(db: &TestDb, store: &SqlStore) -> ApprovalService {
    let settings = Settings::resolve(&SettingsArgs {
        database_url: Some(db.url.clone()),
        ..Default::default()
    })
    .unwrap();
    let planner = Arc::new(ApprovalPlanner::new(
        Arc::new(herald::routes::Routes::new(&settings.routes)),
        &retry_policy(&settings),
        &replay_policy(&settings),
    ));
    let outbox = Outbox::new(Arc::new(store.clone()), Arc::new(Notify::new()));
    ApprovalService::new(store.clone(), Some(outbox), planner)
}

/// A deal under the `ladder` definition: every Submit writes `Stage =
/// Submitted`, every final Approve `Won`, a Recall `Open`. Committed in this
/// process, where no worker runs.
struct Deal {
    service: ApprovalService,
    id: String,
}

impl Deal {
    async fn new(db: &TestDb, store: &SqlStore) -> Deal {
        let service = approvals(db, store);
        let spec = serde_json::from_value(json!({
            "id": "ladder",
            "object": "Opportunity",
            "steps": [{ "name": "Manager", "approver": { "role": "admin" } }],
            "actions": {
                "submit": [{ "type": "FieldUpdate", "id": "in", "field_path": "Stage", "value": "Submitted" }],
                "approve": [{ "type": "FieldUpdate", "id": "won", "field_path": "Stage", "value": "Won" }],
                "recall": [{ "type": "FieldUpdate", "id": "out", "field_path": "Stage", "value": "Open" }]
            }
        }))
        .unwrap();
        service.put_definition(Some(&admin()), spec).await.unwrap();
        let serde_json::Value::Object(fields) = json!({ "Stage": "Negotiation" }) else {
            unreachable!()
        };
        let id = RecordService::new(store.clone())
            .create(Some(&admin()), "Opportunity", RecordInput { fields })
            .await
            .unwrap()
            .id;
        Deal { service, id }
    }

    /// Submitted, then approved or (`recall`) recalled: the two replay events, in
    /// commit order.
    async fn cycle(&self, recall: bool) -> [String; 2] {
        let owed = |view: ApprovalView| view.field_updates.expect("owes field updates").event_id;
        let submitted = self
            .service
            .submit(
                Some(&admin()),
                SubmitRequest {
                    definition_id: "ladder".into(),
                    record_id: self.id.clone(),
                },
            )
            .await
            .unwrap();
        let approval = submitted.id.clone();
        let decided = if recall {
            self.service.recall(Some(&admin()), &approval).await
        } else {
            self.service.approve(Some(&admin()), &approval).await
        };
        [owed(submitted), owed(decided.unwrap())]
    }
}

fn spawn(db: &TestDb, env: &[(&str, &str)]) -> HeraldProcess {
    HeraldProcess::spawn_with_env(
        &db.url,
        &[
            "--replay-poll-interval-ms",
            "50",
            "--replay-lease-secs",
            "2",
            "--maintenance-interval-ms",
            "200",
            "--listen",
            "127.0.0.1:0",
        ],
        env,
    )
}

async fn record_field_updates_apply_in_commit_order_through_a_sigkill_and_two_processes(
    db: &TestDb,
) {
    let store = db.store().await;
    let deal = Deal::new(db, &store).await;
    let mut lane = Vec::new();
    for _ in 0..APPROVED_CYCLES {
        lane.extend(deal.cycle(false).await);
    }
    let stage = async || {
        let record = store.get_record(&deal.id).await.unwrap().unwrap();
        (record.fields["Stage"].clone(), record.version)
    };
    assert_eq!(stage().await, (json!("Negotiation"), 1), "nothing inline");

    // The first process claims the lane's head and stops there (the test hook
    // pauses it after the claim); then it is SIGKILLed holding the lease.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("claimed");
    let hook = format!("claimed:{}", marker.display());
    let first = spawn(db, &[(herald::approvals::replay::TEST_PAUSE_ENV, &hook)]);
    wait_for(
        "the head to be claimed",
        Duration::from_secs(30),
        async || marker.exists(),
    )
    .await;
    let mut second = spawn(db, &[]);
    second.ready().await;
    // The second process polls every 50 ms: a second of polls finds nothing it
    // may take, because the lane's head is held.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let head = store.get_event(&lane[0]).await.unwrap().unwrap();
    assert_eq!(head.status, DeliveryStatus::Processing);
    for later in &lane[1..] {
        let event = store.get_event(later).await.unwrap().unwrap();
        assert_eq!(
            (event.status, event.attempts),
            (DeliveryStatus::Pending, 0),
            "{later} waits behind the held head"
        );
    }
    first.kill();

    // Two processes race for the lane once the lease expires, while the last
    // cycle (a submit, then a recall) commits into it.
    let mut third = spawn(db, &[]);
    third.ready().await;
    lane.extend(deal.cycle(true).await);
    let last = lane.last().unwrap().clone();
    wait_for("the lane to drain", Duration::from_secs(60), async || {
        store.get_event(&last).await.unwrap().unwrap().status == DeliveryStatus::Completed
    })
    .await;
    // A replay completes in its FieldUpdate's own transaction; its attempt is
    // logged by the settlement just after. Both processes stay up until it is.
    wait_for(
        "every attempt logged",
        Duration::from_secs(30),
        async || {
            for id in &lane {
                if store.attempts(id).await.unwrap().is_empty() {
                    return false;
                }
            }
            true
        },
    )
    .await;
    drop(second);
    drop(third);
    let mut previous_done = 0;
    for (place, id) in lane.iter().enumerate() {
        let event = store.get_event(id).await.unwrap().unwrap();
        assert_eq!(event.status, DeliveryStatus::Completed, "{id}");
        let expected_attempts = if place == 0 { 2 } else { 1 };
        assert_eq!(event.attempts, expected_attempts, "{id}");
        // The attempt's start (the claiming process's clock) against the
        // completion ahead of it (the database's): one host's clock here.
        let started = store.attempts(id).await.unwrap()[0].started_at;
        assert!(
            started >= previous_done,
            "{id} (place {place}) started at {started}, before the one ahead finished at {previous_done}"
        );
        previous_done = event.completed_at.unwrap();
    }
    // Every transition changed the stage, and each wrote it exactly once, in
    // commit order: the last write is the recall's.
    assert_eq!(stage().await, (json!("Open"), 1 + lane.len() as i64));
    store.close().await;
}
