//! Outbox throughput, latency and memory (issue: drain, sustained, commit-to-start, RSS).
//!
//! `cargo bench --bench outbox -- [sqlite|postgres] [drain N] [sustained SECS] [latency SECS [rate N]] [webhooks N] [rss N] [probe N]`
//! With no arguments: SQLite and PostgreSQL, every scenario at its documented size.
//! PostgreSQL comes from HERALD_BENCH_POSTGRES_URL (default: the local server).
//! Figures go to stdout as Markdown table rows for docs/BENCHMARKS.md.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use herald::outbox::handler::{Handler, Outcome, Registry};
use herald::outbox::metrics::Metrics;
use herald::outbox::model::{ClaimedEvent, NewEvent, Source};
use herald::outbox::policy::RetryPolicy;
use herald::outbox::worker::{Worker, WorkerConfig};
use herald::outbox::Outbox;
use herald::store::ports::OutboxStore;
use herald::store::ports::Transactions;
use herald::store::{Engine, SqlStore, StoreOptions};
use sqlx::{AnyConnection, Connection, Executor};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Counts handled events and when each started.
#[derive(Default)]
struct NoOp {
    started: Mutex<HashMap<String, Instant>>,
    handled: std::sync::atomic::AtomicU64,
    record_starts: bool,
}

#[async_trait]
impl Handler for NoOp {
    async fn handle(&self, event: &ClaimedEvent) -> Outcome {
        if self.record_starts {
            self.started
                .lock()
                .unwrap()
                .insert(event.event_id.clone(), Instant::now());
        }
        self.handled
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Outcome::Delivered { status_code: None }
    }
}

fn event(id: String) -> NewEvent {
    NewEvent {
        event_id: id,
        source: Source::Jobs,
        kind: "bench".into(),
        parent_type: "run".into(),
        parent_id: "bench".into(),
        payload: "{\"status\":\"succeeded\",\"result\":{\"rows\":1200}}".into(),
        redeliverable: true,
        max_attempts: 6,
        delay_ms: 0,
        destination: None,
        trace_parent: None,
        lane: None,
    }
}

struct Bench {
    url: String,
    admin: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl Bench {
    async fn new(engine: Engine) -> Bench {
        sqlx::any::install_default_drivers();
        match engine {
            Engine::Sqlite => {
                let dir = tempfile::tempdir_in(".").expect("temp dir");
                let url = format!("sqlite://{}/bench.db", dir.path().display());
                Bench {
                    url,
                    admin: None,
                    _dir: Some(dir),
                }
            }
            _ => {
                let admin = std::env::var("HERALD_BENCH_POSTGRES_URL")
                    .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
                let name = format!("herald_bench_{}", uuid::Uuid::new_v4().simple());
                let mut conn = AnyConnection::connect(&admin).await.unwrap();
                conn.execute(format!("CREATE DATABASE {name}").as_str())
                    .await
                    .unwrap();
                let mut url = url::Url::parse(&admin).unwrap();
                url.set_path(&format!("/{name}"));
                Bench {
                    url: url.to_string(),
                    admin: Some((admin, name)),
                    _dir: None,
                }
            }
        }
    }

    async fn store(&self) -> SqlStore {
        SqlStore::open(&StoreOptions {
            url: self.url.clone(),
            max_connections: 16,
        })
        .await
        .unwrap()
    }

    async fn finish(self) {
        if let Some((admin, name)) = &self.admin {
            let mut conn = AnyConnection::connect(admin).await.unwrap();
            let _ = conn
                .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                .await;
        }
    }
}

async fn backlog(store: &SqlStore, n: usize) -> Duration {
    let started = Instant::now();
    let mut i = 0;
    while i < n {
        let mut tx = store.begin_write().await.unwrap();
        for _ in 0..1000.min(n - i) {
            store
                .enqueue_in(&mut tx, &event(format!("ev-{i:08}")))
                .await
                .unwrap();
            i += 1;
        }
        tx.commit().await.unwrap();
    }
    let took = started.elapsed();
    if store.engine() == Engine::Postgres {
        // What autovacuum does after a bulk load; without statistics the planner
        // reads a fresh 100,000-row table as one row and claims by the wrong index.
        sqlx::query("ANALYZE outbox_events")
            .execute(store.pool())
            .await
            .unwrap();
    }
    took
}

fn start_worker(
    store: &SqlStore,
    handler: Arc<NoOp>,
    wake: Arc<Notify>,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let mut registry = Registry::new();
    registry.register("bench", Source::Jobs, RetryPolicy::default(), handler);
    let worker = Worker::new(
        Arc::new(store.clone()),
        Arc::new(registry),
        Arc::new(Metrics::new()),
        WorkerConfig {
            batch_size: 512,
            concurrency: 512,
            poll_interval: Duration::from_millis(50),
            ..WorkerConfig::default()
        },
        wake,
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move {
            worker.run(stop).await;
        }
    });
    (stop, task)
}

async fn wait_handled(handler: &NoOp, n: u64, limit: Duration) -> Duration {
    let started = Instant::now();
    while handler.handled.load(std::sync::atomic::Ordering::Relaxed) < n {
        assert!(started.elapsed() < limit, "timed out");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

async fn completed(store: &SqlStore) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM outbox_events WHERE status = 'completed'")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

async fn drain(engine: Engine, n: usize) {
    let bench = Bench::new(engine).await;
    let store = bench.store().await;
    let filled = backlog(&store, n).await;
    let handler = Arc::new(NoOp::default());
    let started = Instant::now();
    let (stop, task) = start_worker(&store, handler.clone(), Arc::new(Notify::new()));
    wait_handled(&handler, n as u64, Duration::from_secs(900)).await;
    while completed(&store).await < n as i64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = started.elapsed();
    stop.cancel();
    let _ = task.await;
    println!(
        "| {} | drain {} pending events, no-op handler | {:.0} events/s ({:.2} s; backlog written at {:.0} events/s) |",
        engine.name(), n, n as f64 / took.as_secs_f64(), took.as_secs_f64(), n as f64 / filled.as_secs_f64()
    );
    store.close().await;
    bench.finish().await;
}

/// Producers each commit one event per transaction as fast as they can.
async fn sustained(engine: Engine, seconds: u64, producers: usize) {
    let bench = Bench::new(engine).await;
    let store = bench.store().await;
    let wake = Arc::new(Notify::new());
    let outbox = Outbox::new(Arc::new(store.clone()), wake.clone());
    let handler = Arc::new(NoOp::default());
    let (stop, task) = start_worker(&store, handler.clone(), wake);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for p in 0..producers {
        let outbox = outbox.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let mut tx = outbox.begin().await.unwrap();
                outbox
                    .enqueue_in(&mut tx, &event(format!("p{p}-{n}")))
                    .await
                    .unwrap();
                outbox.commit(tx).await.unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut produced = 0;
    for t in tasks {
        produced += t.await.unwrap();
    }
    let caught_up = wait_handled(&handler, produced, Duration::from_secs(300)).await;
    stop.cancel();
    let _ = task.await;
    println!(
        "| {} | sustained: {} producers, one event per transaction, {} s | {:.0} events/s committed and handled (workers caught up {:.2} s after producers stopped) |",
        engine.name(), producers, seconds, produced as f64 / seconds as f64, caught_up.as_secs_f64()
    );
    store.close().await;
    bench.finish().await;
}

/// A fixed offered load: commit-to-handler-start latency.
async fn latency(engine: Engine, seconds: u64, per_second: u64) {
    let bench = Bench::new(engine).await;
    let store = bench.store().await;
    let wake = Arc::new(Notify::new());
    let outbox = Outbox::new(Arc::new(store.clone()), wake.clone());
    let handler = Arc::new(NoOp {
        record_starts: true,
        ..NoOp::default()
    });
    let (stop, task) = start_worker(&store, handler.clone(), wake);
    let committed: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let total = seconds * per_second;
    let interval = Duration::from_secs_f64(1.0 / per_second as f64);
    let started = Instant::now();
    let mut producers = tokio::task::JoinSet::new();
    for i in 0..total {
        let due = started + interval * i as u32;
        tokio::time::sleep_until(due.into()).await;
        let outbox = outbox.clone();
        let committed = committed.clone();
        producers.spawn(async move {
            let id = format!("lat-{i}");
            let mut tx = outbox.begin().await.unwrap();
            outbox
                .enqueue_in(&mut tx, &event(id.clone()))
                .await
                .unwrap();
            tx.commit().await.unwrap();
            let at = Instant::now();
            outbox.wake_handle().notify_one();
            committed.lock().unwrap().insert(id, at);
        });
    }
    while producers.join_next().await.is_some() {}
    wait_handled(&handler, total, Duration::from_secs(120)).await;
    stop.cancel();
    let _ = task.await;
    let mut micros: Vec<i128> = {
        let starts = handler.started.lock().unwrap();
        let committed = committed.lock().unwrap();
        committed
            .iter()
            .map(|(id, at)| starts[id].saturating_duration_since(*at).as_micros() as i128)
            .collect()
    };
    micros.sort_unstable();
    let pct =
        |p: f64| micros[((micros.len() as f64 * p) as usize).min(micros.len() - 1)] as f64 / 1000.0;
    println!(
        "| {} | commit → handler start at {} events/s for {} s | p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms |",
        engine.name(), per_second, seconds, pct(0.50), pct(0.99), pct(1.0)
    );
    store.close().await;
    bench.finish().await;
}

/// End to end: runs finish through `RunService::transition` (run update and signed
/// callback event in one transaction), workers deliver them to a local receiver.
async fn webhooks(engine: Engine, runs: usize) {
    use herald::config::{Settings, SettingsArgs};
    use herald::service::runs::{CreateRun, RunService, TransitionRequest};
    use vocab::{Role, RunStatus, Viewer};

    // The receiver: records when each run's callback arrived.
    let arrived: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = arrived.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let seen = seen.clone();
            async move {
                let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let run = json["run_id"].as_str().unwrap_or_default().to_string();
                seen.lock().unwrap().insert(run, Instant::now());
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let bench = Bench::new(engine).await;
    std::env::set_var(
        "HERALD_BENCH_WEBHOOK_SECRET",
        "whsec_YmVuY2gtc2VjcmV0LWtleS0xMjM0NTY3ODk=",
    );
    let settings = Settings::resolve(&SettingsArgs {
        database_url: Some(bench.url.clone()),
        destination_allowlist: Some("127.0.0.0/8".into()),
        callback_secret_ref: Some("env:HERALD_BENCH_WEBHOOK_SECRET".into()),
        worker_concurrency: Some(256),
        worker_batch_size: Some(256),
        ..Default::default()
    })
    .unwrap();
    let store = bench.store().await;
    let planner = Arc::new(herald::runtime::jobs_planner(&settings));
    let stop = CancellationToken::new();
    let metrics = Arc::new(Metrics::new());
    let runtime =
        herald::runtime::Runtime::start(&settings, &store, &planner, metrics, stop.clone())
            .await
            .unwrap();
    let jobs = runtime.source(herald::outbox::model::Source::Jobs);
    let deliveries = herald::service::deliveries::DeliveryService::new(
        jobs.outbox.store().clone(),
        Arc::new(store.clone()),
        jobs.registry.clone(),
        settings.max_attempts,
    );
    let service = RunService::new(
        Arc::new(store.clone()),
        jobs.outbox.clone(),
        planner,
        deliveries,
        1 << 20,
    );
    let viewer = Viewer {
        name: "bench".into(),
        role: Role::Operator,
    };
    let mut ids = Vec::with_capacity(runs);
    for i in 0..runs {
        let run = service
            .create(
                Some(&viewer),
                CreateRun {
                    run_type: "etl".into(),
                    tenant: format!("t{}", i % 8),
                    callback_url: Some(hook.clone()),
                    routes: vec![],
                },
            )
            .await
            .unwrap();
        ids.push(run.id);
    }
    let committed: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let started = Instant::now();
    let mut producers = tokio::task::JoinSet::new();
    for chunk in ids.chunks(runs.div_ceil(16)) {
        let chunk = chunk.to_vec();
        let service = service.clone();
        let viewer = viewer.clone();
        let committed = committed.clone();
        producers.spawn(async move {
            for id in chunk {
                service
                    .transition(
                        Some(&viewer),
                        &id,
                        TransitionRequest {
                            approval: None,
                            to: RunStatus::Succeeded,
                            result: Some(serde_json::json!({"rows": 1200})),
                        },
                    )
                    .await
                    .unwrap();
                committed.lock().unwrap().insert(id, Instant::now());
            }
        });
    }
    while producers.join_next().await.is_some() {}
    while arrived.lock().unwrap().len() < runs {
        assert!(started.elapsed() < Duration::from_secs(600), "timed out");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = started.elapsed();
    stop.cancel();
    runtime.drain().await;
    server.abort();
    let mut micros: Vec<u128> = {
        let arrived = arrived.lock().unwrap();
        let committed = committed.lock().unwrap();
        committed
            .iter()
            .map(|(id, at)| arrived[id].saturating_duration_since(*at).as_micros())
            .collect()
    };
    micros.sort_unstable();
    let pct =
        |p: f64| micros[((micros.len() as f64 * p) as usize).min(micros.len() - 1)] as f64 / 1000.0;
    println!(
        "| {} | {} runs finished by 16 concurrent producers, signed callback to a local receiver | {:.0} deliveries/s end to end ({:.2} s); commit → 2xx p50 {:.1} ms, p99 {:.1} ms |",
        engine.name(), runs, runs as f64 / took.as_secs_f64(), took.as_secs_f64(), pct(0.5), pct(0.99)
    );
    store.close().await;
    bench.finish().await;
}

/// Where the time goes: claim and settle of full batches, without the worker.
async fn probe(engine: Engine, n: usize) {
    use herald::outbox::model::{Settle, Settlement};
    use herald::store::ports::ClaimRequest;
    let bench = Bench::new(engine).await;
    let store = bench.store().await;
    backlog(&store, n).await;
    if let Ok(drop) = std::env::var("PROBE_DROP") {
        for index in drop.split(',') {
            sqlx::query(&format!("DROP INDEX {index}"))
                .execute(store.pool())
                .await
                .unwrap();
        }
    }
    let (mut claim_t, mut settle_t, mut batches) = (Duration::ZERO, Duration::ZERO, 0);
    loop {
        let t0 = Instant::now();
        let claimed = store
            .claim(&ClaimRequest {
                lease_token: uuid::Uuid::new_v4().simple().to_string(),
                holder: "probe".into(),
                limit: 512,
                kinds: vec!["bench".into()],
                lease_ms_by_kind: vec![("bench".into(), 60_000)],
                default_lease_ms: 60_000,
                due_within_ms: None,
                readmitted: Vec::new(),
                metered: Vec::new(),
                take_expired: true,
            })
            .await
            .unwrap();
        claim_t += t0.elapsed();
        if claimed.is_empty() {
            break;
        }
        let batch: Vec<Settlement> = claimed
            .iter()
            .map(|e| Settlement {
                event_id: e.event_id.clone(),
                kind: e.kind.clone(),
                lease_token: e.lease_token.clone(),
                attempt: e.attempts,
                cycle: e.cycle,
                worker: "probe".into(),
                started_at_ms: 0,
                finished_at_ms: 0,
                settle: Settle::Completed,
                status_code: None,
                error: None,
                dead_letter_event: None,
                laned: e.lane.is_some(),
            })
            .collect();
        let t1 = Instant::now();
        store.settle(&batch).await.unwrap();
        settle_t += t1.elapsed();
        batches += 1;
    }
    println!(
        "| {} | probe: {batches} batches of 512 | claim {:.1} ms/batch, settle {:.1} ms/batch → {:.0} events/s without the worker |",
        engine.name(),
        claim_t.as_secs_f64() * 1000.0 / batches as f64,
        settle_t.as_secs_f64() * 1000.0 / batches as f64,
        n as f64 / (claim_t + settle_t).as_secs_f64()
    );
    store.close().await;
    bench.finish().await;
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let engines: Vec<Engine> = match args.first().map(String::as_str) {
        Some("sqlite") => vec![Engine::Sqlite],
        Some("postgres") => vec![Engine::Postgres],
        _ => vec![Engine::Sqlite, Engine::Postgres],
    };
    let arg = |name: &str, default: u64| -> Option<u64> {
        match args.iter().position(|a| a == name) {
            Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()),
            None if args.iter().any(|a| {
                ["drain", "sustained", "latency", "rss", "webhooks", "probe"].contains(&a.as_str())
            }) =>
            {
                None
            }
            None => Some(default),
        }
    };
    println!("| engine | scenario | result |\n| --- | --- | --- |");
    runtime.block_on(async {
        for engine in engines {
            if let Some(n) = arg("drain", 100_000) {
                drain(engine, n as usize).await;
            }
            if let Some(s) = arg("sustained", 10) {
                sustained(engine, s, 16).await;
            }
            if let Some(s) = arg("latency", 10) {
                let rate = args
                    .iter()
                    .position(|a| a == "rate")
                    .and_then(|i| args.get(i + 1))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1000);
                latency(engine, s, rate).await;
            }
            if let Some(n) = arg("probe", 0).filter(|n| *n > 0) {
                probe(engine, n as usize).await;
            }
            if let Some(n) = arg("webhooks", 20_000) {
                webhooks(engine, n as usize).await;
            }
        }
        if let Some(n) = arg("rss", 1_000_000) {
            drain(Engine::Sqlite, n as usize).await;
            println!("| sqlite | peak RSS of this process (writing then draining {n} events) | {:.0} MB |", testkit::bench::peak_rss_mb("self"));
        }
    });
}
