//! The destination-isolation scene (issue 10) the isolation test and its bench
//! share: 2,000 events per destination committed before a real `herald serve`
//! starts, one receiver hanging, one healthy.

use std::time::Duration;

use herald::outbox::model::{NewEvent, Source};
use herald::store::ports::OutboxStore;
use herald::store::Engine;

use crate::{enqueue, HeraldProcess, Receiver, TestDb};

pub const EVENTS: usize = 2_000;

/// How long the healthy receiver takes to answer.
pub const HEALTHY_LATENCY: Duration = Duration::from_millis(20);

/// The healthy route's in-flight cap (its solo rate is then about 8 / 20 ms: the
/// receiver's own, not the machine's).
pub const HEALTHY_CAP: usize = 8;

/// The hanging route's cap: the default `max_in_flight`.
pub const DEFAULT_CAP: usize = 16;

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
pub fn delivery(round: usize, i: usize, route: &str, url: &str) -> NewEvent {
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
        trace_parent: None,
        lane: None,
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
/// a send may go unanswered; `extra` flags (flag, value pairs) replace the defaults.
pub async fn spawn(
    db: &TestDb,
    config: &tempfile::NamedTempFile,
    http_timeout_ms: &str,
    extra: &[&str],
) -> (HeraldProcess, String) {
    let config = config.path().display().to_string();
    let mut args = vec![
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
    ];
    // A flag in `extra` (flag, value pairs) replaces the same flag above: clap
    // refuses a flag given twice.
    for pair in extra.chunks(2) {
        if let Some(at) = args.iter().position(|a| *a == pair[0]) {
            args.drain(at..at + 2);
        }
        args.extend_from_slice(pair);
    }
    let mut herald = HeraldProcess::spawn(&db.url, &args);
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
