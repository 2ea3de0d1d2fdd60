//! A destination's breaker through a process death, on SQLite, PostgreSQL and
//! MariaDB: the node holding the half-open probe is SIGKILLed mid-probe, the
//! receiver heals, and a fresh node takes the abandoned probe over once the
//! probe's lease has passed: every event is delivered and the breaker closes,
//! with no operator in between.

use std::time::Duration;

use herald::store::ports::{DeliveryReads, DestinationStore};
use testkit::{all_completed, callback, enqueue, parented, wait_for, worker_flags};
use testkit::{HeraldProcess, Receiver, TestDb};

testkit::contract_tests!(a_probe_abandoned_by_a_killed_node_is_taken_over_by_another,);

/// The run every event of this file is filed under.
const PARENT: &str = "breaker-takeover";

/// Leases (and so the probe's) of 3 s; two failures open the breaker for 1 s.
fn flags() -> Vec<&'static str> {
    let mut flags = worker_flags("3");
    flags.extend([
        "--breaker-failures",
        "2",
        "--breaker-open-ms",
        "1000",
        "--max-backoff-ms",
        "2000",
    ]);
    flags
}

async fn breaker_state(store: &herald::store::SqlStore) -> Option<String> {
    let rows = store.breakers().await.unwrap();
    rows.into_iter().next().map(|row| row.state)
}

async fn a_probe_abandoned_by_a_killed_node_is_taken_over_by_another(db: &TestDb) {
    let store = db.store().await;
    let receiver = Receiver::start().await;
    receiver.set_status(503);
    let events: Vec<_> = (0..8)
        .map(|i| parented(callback(&format!("probe-{i}"), &receiver.url()), PARENT))
        .collect();
    enqueue(&store, &events).await;

    let first = HeraldProcess::spawn(&db.url, &flags());
    wait_for("the breaker to open", Duration::from_secs(30), async || {
        breaker_state(&store).await.as_deref() == Some("open")
    })
    .await;
    // The probe must hang at the receiver, so that its node dies holding it.
    receiver.pause();
    wait_for(
        "the half-open probe to be held at the receiver",
        Duration::from_secs(30),
        async || {
            breaker_state(&store).await.as_deref() == Some("half_open")
                && !receiver.held_at_gate().is_empty()
        },
    )
    .await;
    first.kill();
    assert_eq!(
        breaker_state(&store).await.as_deref(),
        Some("half_open"),
        "the killed node's probe is still recorded"
    );

    receiver.set_status(200);
    receiver.resume();
    let second = HeraldProcess::spawn(&db.url, &flags());
    // Ten leases: a breaker stuck half-open would hold these events for ever.
    wait_for(
        "every event to be delivered without an operator",
        Duration::from_secs(30),
        async || all_completed(&store, PARENT).await,
    )
    .await;
    wait_for(
        "the breaker to close",
        Duration::from_secs(10),
        async || breaker_state(&store).await.as_deref() == Some("closed"),
    )
    .await;
    let audit = store.audit(None, 50).await.unwrap();
    assert!(
        audit.iter().all(|row| row.action != "close_breaker"),
        "nobody closed it by hand: {audit:?}"
    );
    second.kill();
}
