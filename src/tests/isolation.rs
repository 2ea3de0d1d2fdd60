//! Destination isolation (issue 10): one receiver that hangs 30 s per request (far
//! past the delivery timeout) must not starve a healthy one. A real `herald serve`
//! drains events for both destinations, committed before it started, to real
//! receivers on loopback.
//!
//! The test asserts the property that keeps them apart, whatever the machine's
//! speed: the hanging destination never holds more requests than its in-flight cap
//! (so it cannot take the worker slots), the healthy one is served at its full
//! width while the hanging one holds its cap and gets every event, and once the
//! hanging one heals every event of both is delivered. (Its hang is a pause with a
//! send timeout longer than the test; timeouts opening and closing the breaker are
//! the `destinations` tests' and the bench's.) How much of its solo rate the healthy destination
//! keeps is a speed figure: `cargo bench --bench isolation` measures it (solo and
//! contended rounds alternating) for docs/BENCHMARKS.md, from this same scene.

use std::time::Duration;

use herald::outbox::model::{NewEvent, Source};
use herald::store::ports::OutboxStore;
use herald::store::Engine;

use crate::support::{enqueue, wait_for, HeraldProcess, Receiver, TestDb};

pub const EVENTS: usize = 2_000;
/// How long the healthy receiver takes to answer.
pub const HEALTHY_LATENCY: Duration = Duration::from_millis(20);
/// The healthy route's in-flight cap (its solo rate is then about 8 / 20 ms: the
/// receiver's own, not the machine's).
const HEALTHY_CAP: usize = 8;
/// The hanging route's cap: the default `max_in_flight`.
const DEFAULT_CAP: usize = 16;

pub fn routes_file(healthy: &Receiver, sick: &Receiver) -> tempfile::NamedTempFile {
    let text = format!(
        r#"
[[routes]]
name = "healthy"
channel = "webhook"
url = "{healthy}"
max_in_flight = {HEALTHY_CAP}

[[routes]]
name = "sick"
channel = "webhook"
url = "{sick}"
"#,
        healthy = healthy.url_for("healthy"),
        sick = sick.url_for("sick"),
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

/// A `delivery` event for `route` at `url`, as the planner freezes a webhook route.
fn delivery(round: usize, i: usize, route: &str, url: &str) -> NewEvent {
    let run = format!("iso{round}-{i}");
    NewEvent {
        event_id: format!("deliver_{run}_{route}"),
        source: Source::Jobs,
        kind: "delivery".into(),
        parent_type: "run".into(),
        parent_id: run.clone(),
        payload: serde_json::json!({
            "channel": "webhook",
            "url": url,
            "body": {"event": "run.finished", "run_id": run, "status": "succeeded"},
        })
        .to_string(),
        redeliverable: true,
        max_attempts: 6,
        delay_ms: 0,
        destination: herald::outbox::destinations::destination_of(url),
    }
}

/// A fresh database holding the round's events, committed before Herald starts.
pub async fn seeded(
    round: usize,
    healthy: &Receiver,
    sick: Option<&Receiver>,
) -> (TestDb, herald::store::SqlStore) {
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let mut events = Vec::new();
    for i in 0..EVENTS {
        events.push(delivery(round, i, "healthy", &healthy.url_for("healthy")));
        if let Some(sick) = sick {
            events.push(delivery(round, i, "sick", &sick.url_for("sick")));
        }
    }
    for chunk in events.chunks(500) {
        enqueue(&store, chunk).await;
    }
    (db, store)
}

/// `herald serve` on `db` with the routes of `config`; `http_timeout_ms` is how long
/// a send may go unanswered.
pub async fn spawn(
    db: &TestDb,
    config: &tempfile::NamedTempFile,
    http_timeout_ms: &str,
) -> (HeraldProcess, String) {
    let config = config.path().display().to_string();
    let mut herald = HeraldProcess::spawn(
        &db.url,
        &[
            "--config",
            &config,
            "--destination-allowlist",
            "127.0.0.0/8",
            "--http-timeout-ms",
            http_timeout_ms,
            "--breaker-failures",
            "5",
            "--breaker-open-ms",
            "2000",
            "--initial-backoff-ms",
            "500",
            "--max-backoff-ms",
            "4000",
            "--maintenance-interval-ms",
            "500",
        ],
    );
    let base = herald.ready().await;
    (herald, base)
}

pub async fn completed(store: &herald::store::SqlStore) -> i64 {
    store
        .stats(true)
        .await
        .unwrap()
        .rows
        .iter()
        .filter(|r| r.kind == "delivery" && r.status == "completed")
        .map(|r| r.count)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_destination_does_not_starve_a_healthy_one() {
    herald::channels::install_crypto_provider();
    let healthy = Receiver::start().await;
    healthy.set_hold(HEALTHY_LATENCY);
    // The hanging receiver answers nothing until it heals, and Herald waits for it
    // (a send timeout longer than the test): its requests stay in flight.
    let sick = Receiver::start().await;
    sick.pause();
    let config = routes_file(&healthy, &sick);
    let (db, store) = seeded(0, &healthy, Some(&sick)).await;
    let (herald, _base) = spawn(&db, &config, "600000").await;

    wait_for(
        "the hanging destination to hold its cap of sends",
        Duration::from_secs(60),
        async || sick.held_at_gate().len() >= DEFAULT_CAP,
    )
    .await;
    // From here on the hanging destination holds its cap (it answers nothing).
    healthy.reset_max_in_flight();
    wait_for(
        "every healthy event delivered beside the hanging destination",
        Duration::from_secs(300),
        async || healthy.count() >= EVENTS,
    )
    .await;
    println!(
        "ISOLATION healthy_max_in_flight={} sick_max_in_flight={}",
        healthy.max_in_flight(),
        sick.max_in_flight(),
    );
    // Without the per-destination cap the hanging receiver would hold every
    // worker slot (256) while the healthy one waited for a free one.
    assert_eq!(
        sick.max_in_flight(),
        DEFAULT_CAP,
        "the hanging destination held more requests at once than its cap"
    );
    assert_eq!(
        healthy.max_in_flight(),
        HEALTHY_CAP,
        "the healthy destination was served at its full width while the hanging one held its cap"
    );

    // Healed, the hanging destination's events all go.
    sick.resume();
    wait_for(
        "every event of both destinations delivered",
        Duration::from_secs(300),
        async || completed(&store).await == 2 * EVENTS as i64,
    )
    .await;
    let arrived = sick.arrivals_per_event();
    assert_eq!(
        arrived.len(),
        EVENTS,
        "every hanging-destination event arrived"
    );
    assert!(arrived.values().all(|n| *n == 1), "none sent twice");
    drop(herald);
    store.close().await;
    db.drop_db().await;
    healthy.stop();
    sick.stop();
}
