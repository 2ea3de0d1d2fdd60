//! Destination isolation (issue 10's acceptance test): one receiver that hangs
//! 30 s per request (far past the delivery timeout) must not starve a healthy
//! one. Real `herald serve` processes drain 2,000 events per destination that
//! were committed before they started, to real receivers on loopback:
//!
//! 1. solo: only the healthy destination's 2,000 events;
//! 2. contended: the same 2,000 plus 2,000 for the hanging receiver, interleaved.
//!
//! The healthy receiver answers in 20 ms and its route allows 8 deliveries in
//! flight, so its solo rate is its own (about 8 / 20 ms, well under what Herald
//! can send), not the machine's: the ratio then measures what the hanging
//! neighbour takes from it, not the noise of a shared machine. Without the
//! per-destination cap the hanging receiver would hold every worker slot.
//! Each setting runs twice, alternating, on fresh databases, and the best rate of
//! each is compared: contended must stay at ≥ 90 % of solo. After the last contended
//! run the hanging receiver heals and every event of both destinations must end
//! delivered. The figures are printed (`ISOLATION …` lines) for docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use herald::outbox::model::{NewEvent, Source};
use herald::store::ports::OutboxStore;
use herald::store::Engine;

use crate::support::{enqueue, free_port, wait_for, wait_ready, HeraldProcess, Receiver, TestDb};

const EVENTS: usize = 2_000;
const ROUNDS: usize = 2;
/// How long the healthy receiver takes to answer.
const HEALTHY_LATENCY: Duration = Duration::from_millis(20);

fn routes_file(healthy: &Receiver, sick: &Receiver) -> tempfile::NamedTempFile {
    let text = format!(
        r#"
[[routes]]
name = "healthy"
channel = "webhook"
url = "{healthy}"
max_in_flight = 8

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
    }
}

/// A fresh database holding the round's events, committed before Herald starts.
async fn seeded(
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

fn spawn(db: &TestDb, config: &tempfile::NamedTempFile) -> (HeraldProcess, String) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let config = config.path().display().to_string();
    let herald = HeraldProcess::spawn(
        &db.url,
        &[
            "--listen",
            &listen,
            "--config",
            &config,
            "--destination-allowlist",
            "127.0.0.0/8",
            // The hanging receiver holds each request 30 s: far past this timeout.
            "--http-timeout-ms",
            "2000",
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
    (herald, format!("http://{listen}"))
}

/// The healthy receiver's rate over the arrivals of this round (from its 200th
/// to its last, leaving out the start-up transient), in events per second.
fn rate_since(receiver: &Receiver, before: usize) -> f64 {
    let times: Vec<Instant> = receiver.requests()[before..].iter().map(|a| a.at).collect();
    let from = times.len() / 10;
    let span = times[times.len() - 1].duration_since(times[from]);
    (times.len() - 1 - from) as f64 / span.as_secs_f64()
}

async fn completed(store: &herald::store::SqlStore) -> i64 {
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

/// Runs one round; returns the healthy destination's rate. With `heal`, the
/// hanging receiver heals afterwards and the round waits for every event;
/// returns the time that took too.
async fn round(
    n: usize,
    healthy: &Receiver,
    sick: Option<&Receiver>,
    config: &tempfile::NamedTempFile,
    heal: bool,
) -> (f64, Option<Duration>) {
    let (db, store) = seeded(n, healthy, sick).await;
    let before = healthy.count();
    let (herald, base) = spawn(&db, config);
    wait_ready(&reqwest::Client::new(), &base).await;
    wait_for(
        "the healthy destination's events",
        Duration::from_secs(60),
        async || healthy.count() >= before + EVENTS,
    )
    .await;
    let rate = rate_since(healthy, before);
    let mut drained = None;
    if heal {
        let sick = sick.expect("a sick receiver to heal");
        sick.set_hold(Duration::ZERO);
        let healed = Instant::now();
        wait_for(
            "every event of both destinations delivered",
            Duration::from_secs(60),
            async || completed(&store).await == 2 * EVENTS as i64,
        )
        .await;
        drained = Some(healed.elapsed());
        let prefix = format!("deliver_iso{n}-");
        let arrived = sick
            .arrivals_per_event()
            .keys()
            .filter(|id| id.starts_with(&prefix))
            .count();
        assert_eq!(arrived, EVENTS, "every sick-destination event arrived");
    }
    herald.kill();
    store.close().await;
    db.drop_db().await;
    (rate, drained)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_destination_does_not_starve_a_healthy_one() {
    herald::channels::install_crypto_provider();
    let healthy = Receiver::start().await;
    healthy.set_hold(HEALTHY_LATENCY);
    let sick = Receiver::start().await;
    sick.set_hold(Duration::from_secs(30));
    let config = routes_file(&healthy, &sick);

    let (mut solo, mut contended) = (Vec::new(), Vec::new());
    let mut drained = None;
    for n in 0..ROUNDS {
        solo.push(round(2 * n, &healthy, None, &config, false).await.0);
        let last = n + 1 == ROUNDS;
        let (rate, drain) = round(2 * n + 1, &healthy, Some(&sick), &config, last).await;
        contended.push(rate);
        drained = drain.or(drained);
    }
    let best = |rates: &[f64]| rates.iter().cloned().fold(0.0, f64::max);
    let ratio = best(&contended) / best(&solo);
    println!(
        "ISOLATION solo_rates_per_s={solo:.0?} contended_rates_per_s={contended:.0?} \
         best_solo={:.0} best_contended={:.0} ratio={ratio:.3} sick_drain_after_heal_s={:.1}",
        best(&solo),
        best(&contended),
        drained.unwrap_or_default().as_secs_f64()
    );
    assert!(
        ratio >= 0.9,
        "the healthy destination kept {:.0} % of its solo rate beside a hanging one",
        ratio * 100.0
    );
    healthy.stop();
    sick.stop();
}
