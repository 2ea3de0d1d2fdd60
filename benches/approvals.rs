//! Recall latency (the recall transaction with its durable replay enqueue) and
//! replay drain throughput (the `field_update` worker applying frozen targets).
//!
//! `cargo bench --bench approvals -- [sqlite|postgres] [N]` (default: both, N = 500).
//! PostgreSQL comes from HERALD_BENCH_POSTGRES_URL (default: the local server).

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald::approvals::model::{kinds, DefinitionSpec};
use herald::approvals::planner::ApprovalPlanner;
use herald::approvals::replay::ReplayHandler;
use herald::config::{Settings, SettingsArgs};
use herald::outbox::handler::Registry;
use herald::outbox::metrics::Metrics;
use herald::outbox::model::Source;
use herald::outbox::worker::{Worker, WorkerConfig};
use herald::outbox::Outbox;
use herald::runtime::{replay_policy, retry_policy};
use herald::service::approvals::{ApprovalService, SubmitRequest};
use herald::service::records::{RecordInput, RecordService};
use herald::store::{Engine, SqlStore, StoreOptions};
use serde_json::json;
use sqlx::{AnyConnection, Connection, Executor};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use vocab::{Role, Viewer};

async fn open(
    engine: Engine,
) -> (
    SqlStore,
    Option<(String, String)>,
    Option<tempfile::TempDir>,
) {
    sqlx::any::install_default_drivers();
    let (url, admin, dir) = match engine {
        Engine::Sqlite => {
            let dir = tempfile::tempdir_in(".").unwrap();
            (
                format!("sqlite://{}/bench.db", dir.path().display()),
                None,
                Some(dir),
            )
        }
        _ => {
            let admin = std::env::var("HERALD_BENCH_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
            let name = format!("herald_b_{}", uuid::Uuid::new_v4().simple());
            let mut conn = AnyConnection::connect(&admin).await.unwrap();
            conn.execute(format!("CREATE DATABASE {name}").as_str())
                .await
                .unwrap();
            let mut url = url::Url::parse(&admin).unwrap();
            url.set_path(&format!("/{name}"));
            (url.to_string(), Some((admin, name)), None)
        }
    };
    let store = SqlStore::open(&StoreOptions {
        url,
        max_connections: 16,
    })
    .await
    .unwrap();
    (store, admin, dir)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

async fn run(engine: Engine, n: usize) {
    let (store, admin, _dir) = open(engine).await;
    let settings = Settings::resolve(&SettingsArgs::default()).unwrap();
    let planner = Arc::new(ApprovalPlanner::new(
        Arc::new(herald::routes::Routes::new(&settings.routes)),
        &retry_policy(&settings),
        &replay_policy(&settings),
    ));
    let approvals = ApprovalService::new(
        store.clone(),
        Some(Outbox::new(
            Arc::new(store.clone()),
            Arc::new(Notify::new()),
        )),
        planner,
    );
    let records = RecordService::new(store.clone());
    let boss = Viewer {
        name: "boss".into(),
        role: Role::Admin,
    };
    let spec: DefinitionSpec = serde_json::from_value(json!({
        "id": "deal", "object": "Opportunity",
        "steps": [{ "name": "Manager", "approver": { "role": "admin" } }],
        "actions": { "recall": [
            { "type": "FieldUpdate", "id": "own", "field_path": "Stage", "value": "Open" },
            { "type": "FieldUpdate", "id": "acct", "field_path": "Account.Status", "value": "Prospect" }
        ]}
    }))
    .unwrap();
    approvals.put_definition(Some(&boss), spec).await.unwrap();
    let fields = |v: serde_json::Value| match v {
        serde_json::Value::Object(map) => RecordInput { fields: map },
        _ => unreachable!(),
    };
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let account = records
            .create(
                Some(&boss),
                "Account",
                fields(json!({ "Status": "Customer" })),
            )
            .await
            .unwrap();
        let deal = records
            .create(
                Some(&boss),
                "Opportunity",
                fields(json!({ "Stage": "Negotiation", "AccountId": account.id })),
            )
            .await
            .unwrap();
        let approval = approvals
            .submit(
                Some(&boss),
                SubmitRequest {
                    definition_id: "deal".into(),
                    record_id: deal.id,
                },
            )
            .await
            .unwrap();
        ids.push(approval.id);
    }
    let mut latencies = Vec::with_capacity(n);
    for id in &ids {
        let started = Instant::now();
        approvals.recall(Some(&boss), id).await.unwrap();
        latencies.push(started.elapsed());
    }
    latencies.sort();
    println!(
        "| {} | recall (2 FieldUpdates, one across a lookup; durable enqueue), {n} sequential | p50 {:.2} ms, p99 {:.2} ms |",
        engine.name(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );

    let mut registry = Registry::new();
    registry.register(
        kinds::FIELD_UPDATE,
        Source::Approvals,
        replay_policy(&settings),
        Arc::new(ReplayHandler::new(store.clone())),
    );
    let worker = Worker::new(
        Arc::new(store.clone()),
        Arc::new(registry),
        Arc::new(Metrics::new()),
        WorkerConfig {
            batch_size: 32,
            concurrency: 32,
            poll_interval: Duration::from_millis(10),
            ..WorkerConfig::default()
        },
        Arc::new(Notify::new()),
    );
    let stop = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn(worker.run(stop.clone()));
    loop {
        let done: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM outbox_events WHERE kind = 'field_update' AND status = 'completed'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        if done as usize >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    stop.cancel();
    running.await.unwrap();
    println!(
        "| {} | replay drain of {n} recall rows (2 record writes per row) | {:.0} rows/s ({:.2} s) |",
        engine.name(),
        n as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    store.close().await;
    if let Some((admin, name)) = admin {
        let mut conn = AnyConnection::connect(&admin).await.unwrap();
        let _ = conn
            .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
            .await;
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let engines = match args.first().map(String::as_str) {
        Some("sqlite") => vec![Engine::Sqlite],
        Some("postgres") => vec![Engine::Postgres],
        _ => vec![Engine::Sqlite, Engine::Postgres],
    };
    let n = args.iter().find_map(|a| a.parse().ok()).unwrap_or(500);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("| engine | scenario | result |\n| --- | --- | --- |");
    runtime.block_on(async {
        for engine in engines {
            run(engine, n).await;
        }
    });
}
