//! Per-destination state stays bounded (issue 19), on SQLite, PostgreSQL and
//! MariaDB: a claim leaves out at most `MAX_AVOIDED` origins however many are
//! sick, a node forgets destinations once they are healthy and idle, and its sync
//! reads only the breakers that are not closed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use herald::outbox::destinations::{Admission, DestinationHealth, HealthConfig, MAX_AVOIDED};
use herald::outbox::metrics::Metrics;
use herald::outbox::model::{ClaimedEvent, Settle, Source};
use herald::store::ports::DestinationStore;
use herald::store::SqlStore;
use testkit::TestDb;

testkit::contract_tests!(sick_destinations_bound_the_claim_and_healthy_ones_are_forgotten,);

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
        let Admission::Go(ticket) = health.admit(&event).await else {
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
