//! The settler through store failures, with a real `herald serve` and a real
//! receiver, on SQLite, PostgreSQL and MariaDB: a short outage of the settle
//! statement loses no settlement (nothing is sent twice), and one event the
//! database refuses to settle neither sinks the rest of its batch nor holds up the
//! batches after it.

use std::time::Duration;

use herald::outbox::model::NewEvent;
use testkit::faults::StatusFault;
use testkit::{
    all_completed, enqueue, lines_with, parented, statuses, wait_for, HeraldProcess, Receiver,
    TestDb,
};
use testkit::{callback, worker_flags};
use vocab::DeliveryStatus;

/// The run every event of this file is filed under.
const PARENT: &str = "settle-outage";

testkit::contract_tests!(
    a_settle_outage_shorter_than_the_lease_loses_no_settlement,
    one_event_the_database_refuses_does_not_sink_its_batch,
    a_lone_refused_settlement_does_not_hold_up_the_next,
);

async fn a_settle_outage_shorter_than_the_lease_loses_no_settlement(db: &TestDb) {
    let store = db.store().await;
    let receiver = Receiver::start().await;
    // One claimed batch (the worker takes 8 at a time).
    let events: Vec<NewEvent> = (0..8)
        .map(|i| parented(callback(&format!("outage-{i}"), &receiver.url()), PARENT))
        .collect();
    enqueue(&store, &events).await;
    // Completions fail in the database, as during a failover.
    let outage = StatusFault {
        name: "refuse_completions",
        from: None,
        to: "completed",
        event_id: None,
    };
    outage.install(&store).await;

    let herald = HeraldProcess::spawn(&db.url, &worker_flags("3"));
    wait_for("every event sent", Duration::from_secs(30), async || {
        receiver.arrivals().len() >= 8
    })
    .await;
    // The outage outlasts the old settler's patience (~0.75 s), not the lease.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    outage.remove(&store).await;
    wait_for(
        "every event completed",
        Duration::from_secs(30),
        async || all_completed(&store, PARENT).await,
    )
    .await;
    // Past the lease: a dropped settlement would have been redelivered by now.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    drop(herald);
    let seen = receiver.arrivals_per_event();
    assert_eq!(seen.len(), 8);
    assert!(
        seen.values().all(|n| *n == 1),
        "a settlement was lost and its event sent again: {seen:?}"
    );
    receiver.stop();
    store.close().await;
}

async fn one_event_the_database_refuses_does_not_sink_its_batch(db: &TestDb) {
    let store = db.store().await;
    let receiver = Receiver::start().await;
    let mut events: Vec<NewEvent> = (0..10)
        .map(|i| parented(callback(&format!("batch-{i}"), &receiver.url()), PARENT))
        .collect();
    events.push(parented(callback("poison", &receiver.url()), PARENT));
    enqueue(&store, &events).await;
    StatusFault {
        name: "refuse_poison",
        from: None,
        to: "completed",
        event_id: Some("poison"),
    }
    .install(&store)
    .await;

    // A long lease: the others can only complete through their own settlement.
    let herald = HeraldProcess::spawn(&db.url, &worker_flags("60"));
    wait_for(
        "every other event completed and the poison sent",
        // Well inside the 60 s lease, with room for a loaded CI machine.
        Duration::from_secs(45),
        async || {
            // The poison may be claimed after the others complete: its send is
            // part of the precondition, not assumed (1 failure in a clean CI run).
            let poison_sent = receiver.arrivals().iter().any(|id| id == "poison");
            let now = statuses(&store, PARENT).await;
            poison_sent
                && now
                    .iter()
                    .filter(|(id, _)| id.as_str() != "poison")
                    .all(|(_, s)| *s == DeliveryStatus::Completed)
        },
    )
    .await;
    drop(herald);
    let seen = receiver.arrivals_per_event();
    assert_eq!(seen.len(), 11, "{seen:?}");
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    assert_eq!(
        statuses(&store, PARENT).await["poison"],
        DeliveryStatus::Processing,
        "the refused settlement is left to lease expiry"
    );
    receiver.stop();
    store.close().await;
}

/// The refused settlement is the only one in its batch (the poison went out
/// alone, before anything else was due): it is retried for as long as its lease
/// lives, and the events finished after it settle beside it meanwhile, long before
/// that lease (60 s) could run out (they used to wait behind it).
async fn a_lone_refused_settlement_does_not_hold_up_the_next(db: &TestDb) {
    let store = db.store().await;
    let receiver = Receiver::start().await;
    enqueue(
        &store,
        &[parented(callback("poison", &receiver.url()), PARENT)],
    )
    .await;
    StatusFault {
        name: "refuse_lone_poison",
        from: None,
        to: "completed",
        event_id: Some("poison"),
    }
    .install(&store)
    .await;
    let herald = HeraldProcess::spawn(&db.url, &worker_flags("60"));
    wait_for(
        "the poison's settlement refused",
        Duration::from_secs(30),
        async || !lines_with(&herald.log, "settling failed").is_empty(),
    )
    .await;
    let after: Vec<NewEvent> = (0..5)
        .map(|i| parented(callback(&format!("after-{i}"), &receiver.url()), PARENT))
        .collect();
    enqueue(&store, &after).await;
    wait_for(
        "the events after it completed",
        // A third of the poison's lease.
        Duration::from_secs(20),
        async || {
            let now = statuses(&store, PARENT).await;
            after
                .iter()
                .all(|e| now.get(&e.event_id) == Some(&DeliveryStatus::Completed))
        },
    )
    .await;
    assert_eq!(
        statuses(&store, PARENT).await["poison"],
        DeliveryStatus::Processing,
        "the refused settlement is left to lease expiry"
    );
    drop(herald);
    receiver.stop();
    store.close().await;
}
