//! Events leased as they are written (`outbox::hand_off`), on SQLite,
//! PostgreSQL and MariaDB: inserted `processing` under a lease that fences its
//! settlement and expires like a claim's; an insert that meets an existing event
//! leases none; an offer hands its events to the worker only once committed, and
//! gives its places back when the unit fails.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use herald::outbox::destinations::{DestinationHealth, HealthConfig};
use herald::outbox::hand_off::HandOff;
use herald::outbox::handler::{Handler, Outcome, Registry};
use herald::outbox::metrics::Metrics;
use herald::outbox::model::{ClaimedEvent, NewEvent, Settle, Settlement, Source};
use herald::outbox::policy::RetryPolicy;
use herald::outbox::Outbox;
use herald::store::ports::{EventLease, OutboxStore, Transactions};
use herald::store::{SqlStore, StoreError};
use sqlx::Executor;
use testkit::{claim, claim_request, enqueue, settlement, TestDb};

use super::outbox::status;
use tokio::sync::Notify;
use vocab::DeliveryStatus;

testkit::contract_tests!(
    an_event_leased_at_insert_is_fenced_by_its_lease_and_taken_again_once_it_expires,
    a_leased_insert_that_meets_an_existing_event_leaves_none_leased,
    an_offer_hands_events_over_only_once_committed_and_gives_places_back_on_failure,
);

fn event(id: &str) -> NewEvent {
    testkit::test_event(id)
}

fn lease(token: &str) -> EventLease {
    EventLease {
        token: token.into(),
        holder: "node-a".into(),
        lease_ms: 30_000,
    }
}

/// The settlement the worker writes for an event leased at insert under `token`.
fn completion(id: &str, token: &str) -> Settlement {
    Settlement {
        event_id: id.into(),
        kind: "test".into(),
        lease_token: token.into(),
        attempt: 1,
        cycle: 1,
        worker: "node-a".into(),
        started_at_ms: 0,
        finished_at_ms: 1,
        settle: Settle::Completed,
        status_code: Some(200),
        error: None,
        dead_letter_event: None,
        laned: false,
    }
}

/// Whether the store accepts `settlement`.
async fn settles(store: &SqlStore, settlement: Settlement) -> bool {
    store.settle(&[settlement]).await.unwrap() == [true]
}

async fn leased_insert(store: &SqlStore, events: &[NewEvent], token: &str) -> bool {
    let mut tx = store.begin_write().await.unwrap();
    let kept = store
        .enqueue_leased_in(&mut tx, events, &lease(token))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    kept
}

async fn an_event_leased_at_insert_is_fenced_by_its_lease_and_taken_again_once_it_expires(
    db: &TestDb,
) {
    let store = db.store().await;
    assert!(leased_insert(&store, &[event("leased"), event("lost")], "t-insert").await);
    let row = store.get_event("leased").await.unwrap().unwrap();
    assert_eq!(row.status, DeliveryStatus::Processing);
    assert_eq!(row.attempts, 1, "the insert takes the first attempt");
    assert_eq!(row.lease_token.as_deref(), Some("t-insert"));
    assert!(
        claim(&store, &claim_request(10, 30_000)).await.is_empty(),
        "a live lease taken at insert is no claim's"
    );
    // Its worker sends and settles under the lease.
    assert!(settles(&store, completion("leased", "t-insert")).await);
    assert_eq!(status(&store, "leased").await, DeliveryStatus::Completed);
    // The other's worker died before sending: its lease runs out (set in the
    // past rather than waited for) and a claim takes it, its second attempt.
    store
        .pool()
        .execute("UPDATE outbox_events SET lease_expires_at = 1 WHERE event_id = 'lost'")
        .await
        .unwrap();
    let again = claim(&store, &claim_request(10, 30_000)).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].event_id, "lost");
    assert_eq!(again[0].attempts, 2);
    assert_ne!(again[0].lease_token, "t-insert");
    assert!(
        !settles(&store, completion("lost", "t-insert")).await,
        "the lapsed lease cannot settle it"
    );
    assert!(settles(&store, settlement(&again[0], Settle::Completed)).await);
    let attempts = store.attempts("lost").await.unwrap();
    assert_eq!(attempts.len(), 1, "one attempt logged, the one that sent");
    store.close().await;
}

async fn a_leased_insert_that_meets_an_existing_event_leaves_none_leased(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("older")]).await;
    assert!(
        !leased_insert(&store, &[event("newer"), event("older")], "t-dup").await,
        "one of them existed: the lease is not kept"
    );
    for id in ["newer", "older"] {
        let row = store.get_event(id).await.unwrap().unwrap();
        assert_eq!(row.status, DeliveryStatus::Pending, "{id}");
        assert_eq!(row.attempts, 0, "{id}");
        assert_eq!(row.lease_token, None, "{id}");
    }
    let claimed = claim(&store, &claim_request(10, 30_000)).await;
    let mut ids: Vec<&str> = claimed.iter().map(|e| e.event_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["newer", "older"], "both are left for a claim");
    store.close().await;
}

struct NeverCalled;

#[async_trait]
impl Handler for NeverCalled {
    async fn handle(&self, _event: &ClaimedEvent) -> Outcome {
        Outcome::Permanent {
            error: "no worker runs in this test".into(),
            status_code: None,
        }
    }
}

/// A unit's own failure (its work returned an error), or the store's.
#[derive(Debug)]
struct UnitFailed(Option<String>);

impl From<StoreError> for UnitFailed {
    fn from(err: StoreError) -> Self {
        UnitFailed(Some(err.to_string()))
    }
}

async fn an_offer_hands_events_over_only_once_committed_and_gives_places_back_on_failure(
    db: &TestDb,
) {
    const ORIGIN: &str = "https://receiver.example";
    let store = db.store().await;
    let wake = Arc::new(Notify::new());
    let outbox = Outbox::new(Arc::new(store.clone()), wake.clone());
    let mut registry = Registry::new();
    registry.register(
        "test",
        Source::Jobs,
        RetryPolicy::default(),
        Arc::new(NeverCalled),
    );
    let metrics = Arc::new(Metrics::new());
    // One place at the destination, one in the worker.
    let health = Arc::new(DestinationHealth::new(
        HealthConfig {
            failures: 5,
            open: Duration::from_secs(60),
            max_open: Duration::from_secs(600),
            default_max_in_flight: 1,
            routes: HashMap::new(),
            stale_probe: Duration::from_secs(30),
        },
        Arc::new(store.clone()),
        metrics.clone(),
    ));
    let hand_off = HandOff::new(
        "node-a".into(),
        Arc::new(registry),
        1,
        Some(health.clone()),
        metrics,
    );
    outbox.add_hand_off(hand_off.clone());
    let mut queue = hand_off.take_receiver().expect("the queue is taken once");
    let to_receiver = |id: &str| NewEvent {
        destination: Some(ORIGIN.into()),
        ..event(id)
    };

    // A unit that leases its event, then fails: nothing is written or handed
    // over, and both places are free again.
    let writer = outbox.clone();
    let failed = outbox
        .write_offering(move |tx, offer| {
            Box::pin(async move {
                let events = [to_receiver("rolled-back")];
                writer.enqueue_offering_in(tx, &events, &offer).await?;
                Err::<(), UnitFailed>(UnitFailed(None))
            })
        })
        .await;
    assert!(
        matches!(failed, Err(UnitFailed(None))),
        "the unit's own failure"
    );
    assert!(store.get_event("rolled-back").await.unwrap().is_none());
    assert!(queue.try_recv().is_err(), "nothing handed over");
    assert_eq!(hand_off.places().available_permits(), 1);
    assert!(health.reserve(ORIGIN), "the destination's place is free");
    health.unreserve(ORIGIN);

    // Two events, one place: the first is leased and handed over after the
    // commit, the second is left for a claim and the workers are woken for it.
    let writer = outbox.clone();
    outbox
        .write_offering(move |tx, offer| {
            Box::pin(async move {
                let events = [to_receiver("first"), to_receiver("second")];
                writer.enqueue_offering_in(tx, &events, &offer).await?;
                Ok::<(), UnitFailed>(())
            })
        })
        .await
        .unwrap();
    let handed = queue.try_recv().expect("the leased event is handed over");
    assert_eq!(handed.event.event_id, "first");
    assert_eq!(handed.event.attempts, 1);
    assert!(handed.counted, "counted at its destination");
    let row = store.get_event("first").await.unwrap().unwrap();
    assert_eq!(row.status, DeliveryStatus::Processing);
    assert_eq!(row.lease_token, Some(handed.event.lease_token.clone()));
    assert_eq!(status(&store, "second").await, DeliveryStatus::Pending);
    assert!(queue.try_recv().is_err());
    assert!(
        tokio::time::timeout(Duration::from_millis(1), wake.notified())
            .await
            .is_ok(),
        "an event left pending wakes the workers"
    );

    // Its attempt ends (the worker's place and the destination's are freed):
    // an event with no destination is leased whole, and nobody is woken.
    drop(handed);
    health.unreserve(ORIGIN);
    let writer = outbox.clone();
    outbox
        .write_offering(move |tx, offer| {
            Box::pin(async move {
                writer
                    .enqueue_offering_in(tx, &[event("third")], &offer)
                    .await?;
                Ok::<(), UnitFailed>(())
            })
        })
        .await
        .unwrap();
    assert_eq!(queue.try_recv().unwrap().event.event_id, "third");
    assert!(
        tokio::time::timeout(Duration::from_millis(1), wake.notified())
            .await
            .is_err(),
        "no claim is owed: no wake"
    );
    store.close().await;
}
