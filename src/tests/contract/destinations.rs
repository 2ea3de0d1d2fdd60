//! Per-destination state stays bounded (issue 19), on SQLite, PostgreSQL and
//! MariaDB: a claim leaves out at most `MAX_AVOIDED` origins however many are
//! sick, a node forgets destinations once they are healthy and idle, and its sync
//! reads only the breakers that are not closed. Room made at a full destination
//! reaches every worker that shares it, and only a destination known to be fast
//! is claimed ahead of its places.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use herald::outbox::destinations::{
    Admission, DestinationHealth, HealthConfig, Ticket, BACKLOG_MEMORY, CLAIM_AHEAD, MAX_AVOIDED,
};
use herald::outbox::metrics::Metrics;
use herald::outbox::model::{ClaimedEvent, Settle, Source};
use herald::store::ports::DestinationStore;
use herald::store::SqlStore;
use testkit::TestDb;

testkit::contract_tests!(
    sick_destinations_bound_the_claim_and_healthy_ones_are_forgotten,
    only_busy_destinations_known_to_be_slow_are_metered,
    room_at_a_full_destination_is_news_to_every_worker_sharing_it,
    only_destinations_known_to_be_fast_are_claimed_ahead_of_their_places,
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
        health.avoid(256).len(),
        MAX_AVOIDED,
        "a claim leaves out at most {MAX_AVOIDED} origins, not {SICK}"
    );

    // Closed elsewhere (an operator, another node's probe): forgotten here.
    for origin in &sick {
        store.close_breaker(origin, None).await.unwrap();
    }
    assert!(store.unclosed_breakers().await.unwrap().is_empty());
    health.sync().await.unwrap();
    assert!(health.avoid(256).is_empty());
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

/// Gives `slow` and `fast` their pace: one attempt each, of 200 ms and of
/// nothing.
async fn pace_slow_and_fast(health: &DestinationHealth, slow: &str, fast: &str) {
    for (origin, took) in [(slow, Duration::from_millis(200)), (fast, Duration::ZERO)] {
        let ticket = admitted(health, &claimed(0, origin)).await;
        tokio::time::sleep(took).await;
        health.finished(ticket, &Settle::Completed, true).await;
    }
}

/// A claim meters (`DestinationHealth::metered`) a destination only while it is
/// busy and known to be slow, at most its free places and the places its attempts
/// in flight free within half a second; an idle one only shortly after a metered
/// pick took all it was allowed.
async fn only_busy_destinations_known_to_be_slow_are_metered(db: &TestDb) {
    let store = db.store().await;
    let health = health(&store);
    let (slow, fast) = ("http://slow.example", "http://fast.example");
    pace_slow_and_fast(&health, slow, fast).await;
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

/// Fills `origin`'s 16 places: the tickets of its attempts in flight.
async fn fill(health: &DestinationHealth, origin: &str) -> Vec<Ticket> {
    let mut tickets = Vec::new();
    for i in 0..16 {
        tickets.push(admitted(health, &claimed(100 + i, origin)).await);
    }
    tickets
}

/// Every worker of a store shares its destinations (the jobs' and the approval
/// notices' pools), and each goes idle after a claim that left a full one out. A
/// place freed there must wake each of them: one wake-up, taken by the worker
/// with nothing to send there, left the other to its poll (a second) under a
/// backlog.
async fn room_at_a_full_destination_is_news_to_every_worker_sharing_it(db: &TestDb) {
    let store = db.store().await;
    let health = health(&store);
    let origin = "http://full.example";
    let mut workers = [health.room_changes(), health.room_changes()];
    let mut tickets = fill(&health, origin).await;
    assert_eq!(health.avoid(256), [origin.to_string()], "full: left out");
    assert!(
        workers.iter().all(|w| !w.has_changed().unwrap()),
        "no room yet"
    );

    let ticket = tickets.pop().unwrap();
    health.finished(ticket, &Settle::Completed, true).await;
    assert!(health.avoid(256).is_empty(), "a place is free");
    for (i, worker) in workers.iter_mut().enumerate() {
        assert!(
            worker.has_changed().unwrap(),
            "worker {i} hears of the room"
        );
        worker.mark_unchanged();
    }

    // A place freed while an event waits in memory goes to that event: no room.
    let waiting = claimed(200, origin);
    let _refill = admitted(&health, &waiting).await;
    let queued = claimed(201, origin);
    let admitting = health.admit(&queued, false);
    tokio::pin!(admitting);
    assert!(
        futures_util::poll!(&mut admitting).is_pending(),
        "the 17th event waits for a place"
    );
    health
        .finished(tickets.pop().unwrap(), &Settle::Completed, true)
        .await;
    assert!(
        matches!(admitting.await, Admission::Go(_)),
        "the waiting event takes the freed place"
    );
    assert!(
        workers.iter().all(|w| !w.has_changed().unwrap()),
        "the place went to the waiting event, not to a claim"
    );
    store.close().await;
}

/// A full destination is left out of claims, unless its pace is known to be fast:
/// then the events its places send within `CLAIM_AHEAD` may wait in memory, so
/// its places do not run dry while the next claim is made. A slow one is metered
/// instead, and one never yet measured is held to its cap.
async fn only_destinations_known_to_be_fast_are_claimed_ahead_of_their_places(db: &TestDb) {
    let store = db.store().await;
    let health = health(&store);
    let (new, slow, fast) = (
        "http://new.example",
        "http://slow.example",
        "http://fast.example",
    );
    pace_slow_and_fast(&health, slow, fast).await;
    let _tickets = [
        fill(&health, new).await,
        fill(&health, slow).await,
        fill(&health, fast).await,
    ];
    let mut left_out = health.avoid(256);
    left_out.sort();
    assert_eq!(
        left_out,
        [new.to_string(), slow.to_string()],
        "at their caps, only the fast one is claimed ahead"
    );

    // Its latency counts as a millisecond at least: at its cap of 16 it sends at
    // most 16 a millisecond, so this many waiting fill what it may be claimed ahead.
    let most_ahead = 16 * CLAIM_AHEAD.as_millis() as u32;
    let waiting: Vec<ClaimedEvent> = (0..most_ahead as usize)
        .map(|i| claimed(1_000 + i, fast))
        .collect();
    let counted = health.took(&[(fast.to_string(), most_ahead)], &waiting);
    assert!(
        counted.iter().all(|c| *c),
        "counted as waiting from the claim"
    );
    assert!(
        health.avoid(256).contains(&fast.to_string()),
        "claimed ahead by what its places send within {CLAIM_AHEAD:?}, no further"
    );
    store.close().await;
}
