//! A claim and the events leased at insert share one worker's places (the real
//! worker on SQLite, whose one writer lets a test hold a claim in flight): a
//! claim holds one place while its statement runs, so a commit made meanwhile
//! is still leased at its insert; the events the claim got beyond its free
//! places wait for places to free; and a worker stopped while they wait gives
//! them back unattempted instead of waiting to run them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use herald::outbox::hand_off::{HandOff, Offer};
use herald::outbox::handler::{Handler, Outcome, Registry};
use herald::outbox::metrics::Metrics;
use herald::outbox::model::{ClaimedEvent, NewEvent, Source};
use herald::outbox::policy::RetryPolicy;
use herald::outbox::worker::{DrainReport, Worker, WorkerConfig};
use herald::outbox::Outbox;
use herald::store::ports::{OutboxStore, Transactions};
use herald::store::{Engine, SqlStore};
use testkit::{wait_for, TestDb};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vocab::DeliveryStatus;

const HOLDER: &str = "node-a";

/// Records each event it is called for, then holds it until the test lets
/// one attempt through (`gate`).
struct Gated {
    called: Mutex<BTreeSet<String>>,
    gate: Semaphore,
}

#[async_trait]
impl Handler for Gated {
    async fn handle(&self, event: &ClaimedEvent) -> Outcome {
        self.called.lock().unwrap().insert(event.event_id.clone());
        if let Ok(pass) = self.gate.acquire().await {
            pass.forget();
        }
        Outcome::Delivered { status_code: None }
    }
}

impl Gated {
    fn called(&self) -> BTreeSet<String> {
        self.called.lock().unwrap().clone()
    }
}

fn event(id: &str) -> NewEvent {
    NewEvent {
        kind: "gated".into(),
        ..testkit::test_event(id)
    }
}

/// A worker of two places on `store` with its hand-off, whose first claim is
/// in flight, holding one place, blocked behind the writer `held` by the test;
/// the events `pending` are due for it.
struct Scene {
    db: TestDb,
    store: SqlStore,
    outbox: Outbox,
    hand_off: Arc<HandOff>,
    handler: Arc<Gated>,
    stop: CancellationToken,
    running: Option<JoinHandle<DrainReport>>,
}

impl Scene {
    async fn new(pending: &[&str]) -> (Scene, herald::store::ports::WriteTx) {
        let db = TestDb::new(Engine::Sqlite).await;
        let store = db.store().await;
        let mut tx = store.begin_write().await.unwrap();
        let events: Vec<NewEvent> = pending.iter().map(|id| event(id)).collect();
        store.enqueue_all_in(&mut tx, &events).await.unwrap();
        tx.commit().await.unwrap();

        let handler = Arc::new(Gated {
            called: Mutex::new(BTreeSet::new()),
            gate: Semaphore::new(0),
        });
        let mut registry = Registry::new();
        registry.register(
            "gated",
            Source::Jobs,
            RetryPolicy::default(),
            handler.clone(),
        );
        let registry = Arc::new(registry);
        let metrics = Arc::new(Metrics::new());
        let wake = Arc::new(Notify::new());
        let hand_off = HandOff::new(HOLDER.into(), registry.clone(), 2, None, metrics.clone());
        let outbox = Outbox::new(Arc::new(store.clone()), wake.clone());
        outbox.add_hand_off(hand_off.clone());

        // The writer is the test's before the worker starts: its first claim
        // waits for it.
        let held = store.begin_write().await.unwrap();
        let worker = Worker::new(
            Arc::new(store.clone()),
            registry,
            metrics,
            WorkerConfig {
                holder: HOLDER.into(),
                batch_size: 8,
                concurrency: 2,
                // One claim at the start; no poll during the test.
                poll_interval: Duration::from_secs(600),
                drain_deadline: Duration::from_secs(20),
            },
            wake,
        )
        .with_hand_off(hand_off.clone());
        let stop = CancellationToken::new();
        let running = tokio::spawn(worker.run(stop.clone()));
        let places = hand_off.places();
        wait_for(
            "the worker's claim to hold one place of two",
            Duration::from_secs(10),
            async || places.available_permits() == 1,
        )
        .await;
        let scene = Scene {
            db,
            store,
            outbox,
            hand_off,
            handler,
            stop,
            running: Some(running),
        };
        (scene, held)
    }

    /// Commits `id` in `held`, through an offer as a transition does.
    async fn commit_offered(&self, mut held: herald::store::ports::WriteTx, id: &str) {
        let offer = Offer::default();
        self.outbox
            .enqueue_offering_in(&mut held, &[event(id)], &offer)
            .await
            .unwrap();
        assert!(offer.holds_any(), "{id} leased at its insert");
        held.commit().await.unwrap();
        offer.hand_off();
    }

    /// Stops the worker; whether it drained.
    async fn drained(&mut self) -> bool {
        self.stop.cancel();
        let running = self.running.take().expect("stopped once");
        running.await.unwrap().drained
    }

    async fn row(&self, id: &str) -> herald::outbox::model::EventRecord {
        self.store.get_event(id).await.unwrap().unwrap()
    }

    async fn called(&self, ids: &[&str], what: &str) {
        let want: BTreeSet<String> = ids.iter().map(|id| id.to_string()).collect();
        wait_for(what, Duration::from_secs(10), async || {
            self.handler.called() == want
        })
        .await;
    }
}

/// The claim in flight holds one place; the commit made meanwhile takes the
/// other and is sent at once. The claim then got two events with no place free
/// for the second: it waits, claimed, until an attempt settles, then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_during_a_claim_is_leased_and_the_claim_waits_for_its_places() {
    let (mut scene, held) = Scene::new(&["due-1", "due-2"]).await;
    scene.commit_offered(held, "committed").await;
    assert_eq!(scene.hand_off.places().available_permits(), 0);
    let leased = scene.row("committed").await;
    assert_eq!(leased.status, DeliveryStatus::Processing);
    assert_eq!(leased.attempts, 1, "leased at insert");

    scene
        .called(
            &["committed", "due-1"],
            "the leased event and the claim's first to run",
        )
        .await;
    let waiting = scene.row("due-2").await;
    assert_eq!(waiting.status, DeliveryStatus::Processing, "claimed");
    assert_eq!(waiting.lease_holder.as_deref(), Some(HOLDER));
    // Held long enough for a dispatched attempt to have reached the handler.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !scene.handler.called().contains("due-2"),
        "no place for it yet"
    );

    // One attempt through: its settlement frees a place, and due-2 takes it.
    scene.handler.gate.add_permits(1);
    scene
        .called(
            &["committed", "due-1", "due-2"],
            "the waiting event to run once a place freed",
        )
        .await;
    scene.handler.gate.add_permits(2);
    wait_for("all three completed", Duration::from_secs(10), async || {
        let mut done = 0;
        for id in ["committed", "due-1", "due-2"] {
            if scene.row(id).await.status == DeliveryStatus::Completed {
                done += 1;
            }
        }
        done == 3
    })
    .await;
    for id in ["committed", "due-1", "due-2"] {
        assert_eq!(scene.row(id).await.attempts, 1, "{id}: one attempt");
    }
    assert!(scene.drained().await);
    scene.store.close().await;
    scene.db.drop_db().await;
}

/// Stopped while a claimed event waits for a place, the worker gives it back
/// unattempted (pending, its attempt returned, due now) rather than waiting to
/// run it; the attempts in flight drain as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_stopped_while_claimed_events_wait_for_places_gives_them_back() {
    let (mut scene, held) = Scene::new(&["due-1", "due-2"]).await;
    scene.commit_offered(held, "committed").await;
    scene
        .called(
            &["committed", "due-1"],
            "the leased event and the claim's first to run",
        )
        .await;
    assert_eq!(scene.row("due-2").await.status, DeliveryStatus::Processing);

    scene.stop.cancel();
    wait_for(
        "the waiting event to be given back",
        Duration::from_secs(10),
        async || scene.row("due-2").await.status == DeliveryStatus::Pending,
    )
    .await;
    let given_back = scene.row("due-2").await;
    assert_eq!(given_back.attempts, 0, "its claim's attempt returned");
    assert_eq!(given_back.lease_token, None);
    // The drain still waits for the two attempts in flight; they finish.
    scene.handler.gate.add_permits(2);
    assert!(scene.drained().await);
    assert!(
        !scene.handler.called().contains("due-2"),
        "never attempted by the stopping worker"
    );
    for id in ["committed", "due-1"] {
        assert_eq!(
            scene.row(id).await.status,
            DeliveryStatus::Completed,
            "{id}"
        );
    }
    scene.store.close().await;
    scene.db.drop_db().await;
}
