//! Crash and drain, with real processes: `herald serve` is SIGKILLed mid-batch and
//! restarted, or SIGTERMed with work in flight, against a real receiver on loopback.

use std::collections::HashSet;
use std::time::Duration;

use herald::outbox::model::NewEvent;
use herald::store::ports::OutboxStore;
use herald::store::{Engine, SqlStore};
use testkit::{
    all_completed, callback, enqueue, statuses, wait_for, worker_flags, HeraldProcess, Receiver,
    TestDb,
};
use vocab::DeliveryStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_batch_loses_nothing_and_redelivers_with_the_same_id() {
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    receiver.set_hold(Duration::from_millis(300));
    let events: Vec<NewEvent> = (0..40)
        .map(|i| callback(&format!("kill-{i:02}"), &receiver.url()))
        .collect();
    enqueue(&store, &events).await;

    let herald = HeraldProcess::spawn(&db.url, &worker_flags("2"));
    wait_for(
        "deliveries under way",
        Duration::from_secs(30),
        async || receiver.arrivals().len() >= 12,
    )
    .await;
    // The kill lands with sends in flight: they are held, unanswered, at the gate.
    receiver.pause();
    wait_for(
        "a send held in flight",
        Duration::from_secs(30),
        async || !receiver.held_at_gate().is_empty(),
    )
    .await;
    herald.kill();
    receiver.resume();
    let at_kill = statuses(&store, "crash-test").await;
    let arrived: HashSet<String> = receiver.arrivals().into_iter().collect();
    let completed_at_kill: HashSet<String> = at_kill
        .iter()
        .filter(|(_, s)| **s == DeliveryStatus::Completed)
        .map(|(id, _)| id.clone())
        .collect();
    let in_flight: HashSet<String> = arrived.difference(&completed_at_kill).cloned().collect();
    assert!(
        !in_flight.is_empty(),
        "the kill landed with deliveries in flight"
    );
    assert!(
        at_kill.values().any(|s| *s == DeliveryStatus::Pending),
        "the kill landed mid-backlog"
    );

    let herald = HeraldProcess::spawn(&db.url, &worker_flags("2"));
    wait_for(
        "every event completed",
        Duration::from_secs(60),
        async || all_completed(&store, "crash-test").await,
    )
    .await;
    drop(herald);

    let seen = receiver.arrivals_per_event();
    for event in &events {
        assert!(
            seen.contains_key(&event.event_id),
            "{} was never delivered",
            event.event_id
        );
    }
    for id in &in_flight {
        assert!(
            seen[id] >= 2,
            "{id} was in flight at the kill and must be redelivered under the same id"
        );
    }
    for (id, count) in &seen {
        if *count > 1 {
            assert!(
                in_flight.contains(id),
                "{id} was delivered {count} times without having been in flight at the kill"
            );
        }
    }
    assert_eq!(seen.len(), 40);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_work_in_flight_then_exits_zero() {
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    // All five stay in flight, unanswered, until the test lets them go.
    receiver.pause();
    let events: Vec<NewEvent> = (0..5)
        .map(|i| callback(&format!("drain-{i}"), &receiver.url()))
        .collect();
    enqueue(&store, &events).await;

    let mut flags = worker_flags("30");
    flags.extend(["--drain-deadline-secs", "20"]);
    let mut herald = HeraldProcess::spawn(&db.url, &flags);
    wait_for("all five in flight", Duration::from_secs(30), async || {
        receiver.held_at_gate().len() >= 5
    })
    .await;
    herald.sigterm();
    // Asked to stop with work in flight, it waits for that work.
    assert!(
        herald.exited_within(Duration::from_secs(1)).is_none(),
        "it exited with five deliveries in flight"
    );
    receiver.resume();
    let status = herald
        .exited_within(Duration::from_secs(25))
        .expect("herald exits after draining");
    assert!(status.success(), "exit status {status:?}");

    let after = statuses(&store, "crash-test").await;
    assert!(
        after.values().all(|s| *s == DeliveryStatus::Completed),
        "{after:?}"
    );
    assert_eq!(receiver.arrivals().len(), 5, "nothing was sent twice");
    assert_eq!(receiver.answered().len(), 5);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

/// Asked to stop with work that never finishes, herald waits out its drain
/// deadline and no longer: it exits in order, says what it left, and the work it
/// left is neither lost nor settled wrongly. Its leases expire and the next
/// process delivers each event again under the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_whose_deadline_passes_exits_and_leaves_the_work_to_be_recovered() {
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    receiver.pause();
    let events: Vec<NewEvent> = (0..3)
        .map(|i| callback(&format!("stuck-{i}"), &receiver.url()))
        .collect();
    enqueue(&store, &events).await;

    let mut flags = worker_flags("2");
    flags.extend(["--drain-deadline-secs", "2", "--http-timeout-ms", "600000"]);
    let mut herald = HeraldProcess::spawn(&db.url, &flags);
    wait_for("all three in flight", Duration::from_secs(30), async || {
        receiver.held_at_gate().len() >= 3
    })
    .await;
    let asked = std::time::Instant::now();
    herald.sigterm();
    let status = herald
        .exited_within(Duration::from_secs(20))
        .expect("herald exits once its drain deadline has passed");
    let took = asked.elapsed();
    assert!(status.success(), "an orderly stop: {status:?}");
    assert!(
        took >= Duration::from_millis(1_900),
        "it waited for its deadline: exited after {took:?}"
    );
    let said = testkit::lines_with(&herald.log, "drain deadline passed");
    assert_eq!(said.len(), 1, "{said:?}");
    let left = statuses(&store, "crash-test").await;
    assert!(
        left.values().all(|s| *s == DeliveryStatus::Processing),
        "nothing settled while unanswered: {left:?}"
    );

    receiver.resume();
    let restarted = HeraldProcess::spawn(&db.url, &worker_flags("2"));
    wait_for(
        "every event recovered",
        Duration::from_secs(30),
        async || all_completed(&store, "crash-test").await,
    )
    .await;
    let seen = receiver.arrivals_per_event();
    for event in &events {
        assert_eq!(
            seen.get(&event.event_id),
            Some(&2),
            "{}: held once, delivered again under the same id",
            event.event_id
        );
    }
    drop(restarted);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

/// A node serving signed callbacks to a receiver on loopback, with an operator's
/// token and one run routed to it.
struct CallbackScene {
    db: TestDb,
    receiver: Receiver,
    token: String,
    client: reqwest::Client,
}

const SCENE_SECRET: &str = "whsec_aGFuZC1vZmYtY3Jhc2gtdGVzdC1zZWNyZXQtMDE=";

impl CallbackScene {
    async fn new() -> Self {
        herald::channels::install_crypto_provider();
        let db = TestDb::new(Engine::Sqlite).await;
        let receiver = Receiver::start().await;
        receiver.verify_with("hook", SCENE_SECRET);
        let token = testkit::api_token(&db.url, vocab::Role::Operator).await;
        CallbackScene {
            db,
            receiver,
            token,
            client: reqwest::Client::new(),
        }
    }

    /// A node with leases of `lease_secs` and `env` besides the signing
    /// secret. It polls every 100 ms, so claims are often in flight as the
    /// scene's transition commits; a claim holds only one of the node's eight
    /// places while it runs, so the commit still finds one for its lease.
    fn spawn(&self, lease_secs: &'static str, env: &[(&str, &str)]) -> HeraldProcess {
        let mut env = env.to_vec();
        env.push(("HERALD_WEBHOOK_SECRET", SCENE_SECRET));
        HeraldProcess::spawn_with_env(&self.db.url, &worker_flags(lease_secs), &env)
    }

    async fn run(&self, base: &str) -> String {
        testkit::create_run_via_api(&self.client, base, &self.token, Some(&self.receiver.url()))
            .await
    }

    /// Moves `run` to `succeeded`; its answer, if it comes.
    fn succeed(
        &self,
        base: &str,
        run: &str,
    ) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
        let sent = self
            .client
            .post(format!("{base}/api/v1/runs/{run}/transitions"))
            .bearer_auth(&self.token)
            .json(&serde_json::json!({"to": "succeeded"}))
            .timeout(Duration::from_secs(60))
            .send();
        tokio::spawn(sent)
    }

    /// Waits for `event` to be completed, then says it was sent once, signed.
    async fn completed_once(&self, store: &SqlStore, event: &str, run: &str) -> i64 {
        wait_for(
            "the callback delivered and its completion written",
            Duration::from_secs(30),
            async || {
                store.get_event(event).await.unwrap().unwrap().status == DeliveryStatus::Completed
            },
        )
        .await;
        let sent = self.receiver.requests();
        assert_eq!(sent.len(), 1, "sent once");
        assert_eq!(sent[0].verified, Some(true));
        assert_eq!(sent[0].body["run_id"], run);
        store.get_event(event).await.unwrap().unwrap().attempts
    }
}

/// An event leased to its node as its transition committed (`outbox::hand_off`)
/// is never claimed: when the node dies between that commit and the hand-off to
/// its worker, nothing was sent, and the event waits for its lease to expire.
/// Then a node takes it like any expired claim, and it goes out once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkill_between_the_commit_and_the_hand_off_leaves_the_event_to_its_lease() {
    let scene = CallbackScene::new().await;
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("committed");
    let hook = format!("committed:{}", marker.display());
    let mut herald = scene.spawn("2", &[(herald::outbox::HAND_OFF_PAUSE_ENV, &hook)]);
    let base = herald.ready().await;
    let run = scene.run(&base).await;
    let moved = scene.succeed(&base, &run);
    wait_for(
        "the transition to commit with its event leased",
        Duration::from_secs(30),
        async || marker.exists(),
    )
    .await;
    herald.kill();
    assert!(moved.await.unwrap().is_err(), "the answer was lost");

    let store = scene.db.store().await;
    let events = store.events_for_parent("run", &run).await.unwrap();
    assert_eq!(events.len(), 1, "the callback committed with the run");
    let leased = &events[0];
    assert_eq!(
        leased.status,
        DeliveryStatus::Processing,
        "leased at insert"
    );
    assert_eq!(leased.attempts, 1);
    assert!(scene.receiver.requests().is_empty(), "nothing was sent");

    // The expired lease is found by a claim.
    let mut herald = scene.spawn("2", &[]);
    herald.ready().await;
    assert_eq!(
        scene.completed_once(&store, &leased.event_id, &run).await,
        2,
        "the lost hand-off counts as an attempt, as a claim's would"
    );
    herald.kill();
    store.close().await;
}

/// The common case of the same path: the node lives, its worker had room, and
/// the callback goes out at once, leased at its insert (no claim), once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_callback_leased_at_insert_is_sent_once_without_a_claim() {
    let scene = CallbackScene::new().await;
    let mut herald = scene.spawn("30", &[]);
    let base = herald.ready().await;
    let metric = "herald_outbox_leased_at_insert_total{kind=\"callback\"}";
    let before = testkit::metrics_with(&base, metric, Duration::from_secs(5)).await;
    assert!(
        before.contains(&format!("{metric} 0")),
        "declared at 0 before any event: {before}"
    );
    let run = scene.run(&base).await;
    let moved = scene.succeed(&base, &run).await.unwrap().unwrap();
    assert_eq!(moved.status(), 200);
    let store = scene.db.store().await;
    let events = store.events_for_parent("run", &run).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(
        scene
            .completed_once(&store, &events[0].event_id, &run)
            .await,
        1,
        "one attempt, the insert's"
    );
    let after = testkit::metrics_with(&base, &format!("{metric} 1"), Duration::from_secs(5)).await;
    assert!(after.contains(&format!("{metric} 1")), "{after}");
    herald.kill();
    store.close().await;
}
