//! Per-destination state stays bounded (issue 19), on SQLite, PostgreSQL and
//! MariaDB: a claim leaves out at most `MAX_AVOIDED` origins however many are
//! sick, a node forgets destinations once they are healthy and idle, and its sync
//! reads only the breakers that are not closed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use herald::outbox::destinations::{
    Admission, DestinationHealth, HealthConfig, Ticket, BACKLOG_MEMORY, MAX_AVOIDED,
};
use herald::outbox::metrics::Metrics;
use herald::outbox::model::{ClaimedEvent, Settle, Source};
use herald::store::ports::DestinationStore;
use herald::store::SqlStore;
use testkit::TestDb;

testkit::contract_tests!(
    sick_destinations_bound_the_claim_and_healthy_ones_are_forgotten,
    only_busy_destinations_known_to_be_slow_are_metered,
);

const SICK: usize = 300;

fn health(store: &SqlStore) -> DestinationHealth {
    DestinationHealth::new(
        HealthConfig {
            failures: 5,
            open: Duration::from_secs(60),
            max_open: Duration::from_secs(600),
            default_max_in_flight: 16,
            routes: HashMap::new(),
            stale_probe: Duration::from_secs(30),
        },
        Arc::new(store.clone()),
        Arc::new(Metrics::new()),
    )
}

fn claimed(i: usize, origin: &str) -> ClaimedEvent {
    ClaimedEvent {
        event_id: format!("healthy-{i}"),
        source: Source::Jobs.as_str().into(),
        kind: "callback".into(),
        parent_type: "run".into(),
        parent_id: "bounded".into(),
        payload: "{}".into(),
        redeliverable: true,
        attempts: 1,
        cycle: 1,
        cycle_attempts: 1,
        max_attempts: 6,
        lease_token: "t".into(),
        destination: Some(origin.to_string()),
        trace_parent: None,
        lane: None,
    }
}

async fn sick_destinations_bound_the_claim_and_healthy_ones_are_forgotten(db: &TestDb) {
    let store = db.store().await;
    let health = health(&store);
    let sick: Vec<String> = (0..SICK)
        .map(|i| format!("http://sick-{i}.example"))
        .collect();
    for origin in &sick {
        store
            .open_breaker(origin, "callback", 5, 60_000)
            .await
            .unwrap();
    }
    health.sync().await.unwrap();
    assert_eq!(health.tracked(), SICK, "every open breaker is known");
    assert_eq!(
        health.avoid().len(),
        MAX_AVOIDED,
        "a claim leaves out at most {MAX_AVOIDED} origins, not {SICK}"
    );

    // Closed elsewhere (an operator, another node's probe): forgotten here.
    for origin in &sick {
        store.close_breaker(origin, None).await.unwrap();
    }
    assert!(store.unclosed_breakers().await.unwrap().is_empty());
    health.sync().await.unwrap();
    assert!(health.avoid().is_empty());
    assert_eq!(
        health.tracked(),
        0,
        "closed and idle destinations are forgotten"
    );

    // Many healthy destinations, one delivery each: nothing is kept.
    for i in 0..500 {
        let event = claimed(i, &format!("http://healthy-{i}.example"));
        let counted = health.took(&[], std::slice::from_ref(&event));
        assert_eq!(counted, [false], "unmetered: counted by admit");
        let Admission::Go(ticket) = health.admit(&event, false).await else {
            panic!("a healthy destination admits its event");
        };
        health.finished(ticket, &Settle::Completed, true).await;
    }
    assert_eq!(
        health.tracked(),
        0,
        "idle healthy destinations are forgotten"
    );
    store.close().await;
}

/// Claims `event` and admits it, as the worker does.
async fn admitted(health: &DestinationHealth, event: &ClaimedEvent) -> Ticket {
    let counted = health.took(&[], std::slice::from_ref(event));
    let Admission::Go(ticket) = health.admit(event, counted[0]).await else {
        panic!("a destination with free places admits its event");
    };
    ticket
}

/// A claim meters (`DestinationHealth::metered`) a destination only while it is
/// busy and known to be slow, at most its free places and the places its attempts
/// in flight free within half a second; an idle one only shortly after a metered
/// pick took all it was allowed.
async fn only_busy_destinations_known_to_be_slow_are_metered(db: &TestDb) {
    let store = db.store().await;
    let health = health(&store);
    let (slow, fast) = ("http://slow.example", "http://fast.example");
    // Their pace: one attempt each, of 200 ms and of nothing.
    for (origin, took) in [(slow, Duration::from_millis(200)), (fast, Duration::ZERO)] {
        let ticket = admitted(&health, &claimed(0, origin)).await;
        tokio::time::sleep(took).await;
        health.finished(ticket, &Settle::Completed, true).await;
    }
    assert!(health.metered(256).is_empty(), "idle destinations are not");

    // Busy, one attempt in flight each (cap 16).
    let in_flight = [
        admitted(&health, &claimed(1, slow)).await,
        admitted(&health, &claimed(1, fast)).await,
    ];
    let metered = health.metered(256);
    assert_eq!(metered.len(), 1, "{metered:?}");
    let (origin, room) = metered[0].clone();
    assert_eq!(origin, slow);
    // 15 free, and the attempt in flight turns over about 2.5 times in 500 ms.
    assert!((15..=17).contains(&room), "{room}");
    // At its cap of 16 it takes about 80 a second: a claim of 32 is not bounded.
    assert!(
        health.metered(32).is_empty(),
        "a claim it takes within the wait is not metered"
    );
    for ticket in in_flight {
        health.finished(ticket, &Settle::Completed, true).await;
    }
    assert!(health.metered(256).is_empty(), "idle again");

    // A metered pick that took all it was allowed: metered while idle, briefly.
    let share = [(slow.to_string(), 2)];
    let batch = [claimed(2, slow), claimed(3, slow)];
    let counted = health.took(&share, &batch);
    assert_eq!(
        counted,
        [true, true],
        "a metered destination's, from the claim on"
    );
    for event in &batch {
        let Admission::Go(ticket) = health.admit(event, true).await else {
            panic!("room for both");
        };
        health.finished(ticket, &Settle::Completed, true).await;
    }
    assert_eq!(health.metered(256), [(slow.to_string(), 16)], "its backlog");
    tokio::time::sleep(BACKLOG_MEMORY).await;
    assert!(health.metered(256).is_empty(), "forgotten after");
    store.close().await;
}
