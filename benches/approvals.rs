//! Recall latency (the recall transaction with its durable replay enqueue) and
//! replay drain throughput (the `field_update` worker applying frozen targets):
//! many records' lanes side by side, and one record's lane of Submit and Approve
//! FieldUpdates applied one at a time in commit order (issue 22).
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

/// The services a scenario drives, on one bench store.
struct Scene {
    settings: Settings,
    approvals: ApprovalService,
    records: RecordService,
    boss: Viewer,
}

fn fields(value: serde_json::Value) -> RecordInput {
    match value {
        serde_json::Value::Object(map) => RecordInput { fields: map },
        _ => unreachable!(),
    }
}

impl Scene {
    async fn new(store: SqlStore) -> Scene {
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
        let scene = Scene {
            records: RecordService::new(store),
            settings,
            approvals,
            boss: Viewer {
                name: "boss".into(),
                role: Role::Admin,
            },
        };
        // `deal`: two Recall FieldUpdates, one across a lookup. `ladder`: one
        // Submit and one final-Approve FieldUpdate on the record itself.
        for spec in [
            json!({
                "id": "deal", "object": "Opportunity",
                "steps": [{ "name": "Manager", "approver": { "role": "admin" } }],
                "actions": { "recall": [
                    { "type": "FieldUpdate", "id": "own", "field_path": "Stage", "value": "Open" },
                    { "type": "FieldUpdate", "id": "acct", "field_path": "Account.Status", "value": "Prospect" }
                ]}
            }),
            json!({
                "id": "ladder", "object": "Opportunity",
                "steps": [{ "name": "Manager", "approver": { "role": "admin" } }],
                "actions": {
                    "submit": [{ "type": "FieldUpdate", "id": "in", "field_path": "Stage", "value": "Submitted" }],
                    "approve": [{ "type": "FieldUpdate", "id": "won", "field_path": "Stage", "value": "Won" }]
                }
            }),
        ] {
            let spec: DefinitionSpec = serde_json::from_value(spec).unwrap();
            scene
                .approvals
                .put_definition(Some(&scene.boss), spec)
                .await
                .unwrap();
        }
        scene
    }

    async fn submit(&self, definition: &str, record_id: &str) -> String {
        self.approvals
            .submit(
                Some(&self.boss),
                SubmitRequest {
                    definition_id: definition.into(),
                    record_id: record_id.into(),
                },
            )
            .await
            .unwrap()
            .id
    }

    /// A new record of `object` with `values`; its id.
    async fn record(&self, object: &str, values: serde_json::Value) -> String {
        self.records
            .create(Some(&self.boss), object, fields(values))
            .await
            .unwrap()
            .id
    }

    /// `n` recalls, each of its own deal (each its own lane); their latencies.
    async fn recalls(&self, n: usize) -> Vec<Duration> {
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let account = self
                .record("Account", json!({ "Status": "Customer" }))
                .await;
            let deal = self
                .record(
                    "Opportunity",
                    json!({ "Stage": "Negotiation", "AccountId": account }),
                )
                .await;
            ids.push(self.submit("deal", &deal).await);
        }
        let mut latencies = Vec::with_capacity(n);
        for id in &ids {
            let started = Instant::now();
            self.approvals.recall(Some(&self.boss), id).await.unwrap();
            latencies.push(started.elapsed());
        }
        latencies.sort();
        latencies
    }

    /// One deal's lane of `2 * cycles` FieldUpdates (Submit, then the final
    /// Approve, `cycles` times), in commit order; the deal's id.
    async fn ladder(&self, cycles: usize) -> String {
        let deal = self
            .record("Opportunity", json!({ "Stage": "Negotiation" }))
            .await;
        for _ in 0..cycles {
            let approval = self.submit("ladder", &deal).await;
            self.approvals
                .approve(Some(&self.boss), &approval)
                .await
                .unwrap();
        }
        deal
    }
}

fn rate(rows: usize, elapsed: Duration) -> String {
    format!(
        "{:.0} rows/s ({:.2} s)",
        rows as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    )
}

async fn run(engine: Engine, n: usize) {
    let (store, admin, _dir) = open(engine).await;
    let scene = Scene::new(store.clone()).await;
    let name = engine.name();

    let latencies = scene.recalls(n).await;
    println!(
        "| {name} | recall (2 FieldUpdates, one across a lookup; durable enqueue), {n} sequential | p50 {:.2} ms, p99 {:.2} ms |",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
    let mut completed = n;
    let many_lanes = drain(&store, &scene.settings, completed).await;
    println!(
        "| {name} | replay drain of {n} recall rows, one lane per record (2 record writes per row) | {} |",
        rate(n, many_lanes)
    );

    // One record's lane, applied one row at a time in commit order.
    let cycles = n / 2;
    scene.ladder(cycles).await;
    completed += 2 * cycles;
    let one_lane = drain(&store, &scene.settings, completed).await;
    println!(
        "| {name} | replay drain of one record's lane: {} Submit and Approve rows in commit order | {} |",
        2 * cycles,
        rate(2 * cycles, one_lane)
    );

    // Recalls beside a lane blocked by a failed head with `2 * cycles - 1` rows
    // waiting behind it, against the same recalls with no lane blocked, just
    // before and just after (the tables grow from drain to drain).
    scene.recalls(n).await;
    completed += n;
    let control_before = drain(&store, &scene.settings, completed).await;
    let blocked =
        herald::approvals::planner::record_lane("Opportunity", &scene.ladder(cycles).await);
    let head: String = sqlx::query_scalar(
        &store
            .engine()
            .sql("SELECT event_id FROM lane_members WHERE lane = ? ORDER BY seq LIMIT 1"),
    )
    .bind(&blocked)
    .fetch_one(store.pool())
    .await
    .unwrap();
    // The head stands failed, as after its last attempt.
    set_status(&store, &head, "failed").await;
    scene.recalls(n).await;
    completed += n;
    let beside_blocked = drain(&store, &scene.settings, completed).await;
    // Unblocked (the head made pending again), its lane drained, then the control.
    set_status(&store, &head, "pending").await;
    completed += 2 * cycles;
    drain(&store, &scene.settings, completed).await;
    scene.recalls(n).await;
    completed += n;
    let control_after = drain(&store, &scene.settings, completed).await;
    let control = (control_before + control_after) / 2;
    println!(
        "| {name} | replay drain of {n} recall rows beside a blocked lane ({} rows waiting), against no blocked lane just before and after | {} against {} and {} ({:.2}) |",
        2 * cycles - 1,
        rate(n, beside_blocked),
        rate(n, control_before),
        rate(n, control_after),
        control.as_secs_f64() / beside_blocked.as_secs_f64()
    );
    store.close().await;
    if let Some((admin, name)) = admin {
        let mut conn = AnyConnection::connect(&admin).await.unwrap();
        let _ = conn
            .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
            .await;
    }
}

async fn set_status(store: &SqlStore, event_id: &str, status: &str) {
    sqlx::query(
        &store
            .engine()
            .sql("UPDATE outbox_events SET status = ?, next_attempt_at = 0 WHERE event_id = ?"),
    )
    .bind(status)
    .bind(event_id)
    .execute(store.pool())
    .await
    .unwrap();
}

/// Runs a replay worker until `completed` FieldUpdate rows stand completed; how
/// long that took.
async fn drain(store: &SqlStore, settings: &Settings, completed: usize) -> Duration {
    // Fresh statistics first, as autovacuum (and Herald's upkeep) keep them on a
    // live store: these tables grew from empty seconds ago, and with stale
    // statistics PostgreSQL plans the claim through `(kind, status)`, reading
    // every parked lane member on each claim.
    if store.engine() == Engine::Postgres {
        for table in ["outbox_events", "lane_members"] {
            sqlx::query(&format!("ANALYZE {table}"))
                .execute(store.pool())
                .await
                .unwrap();
        }
    }
    let mut registry = Registry::new();
    registry.register(
        kinds::FIELD_UPDATE,
        Source::Approvals,
        replay_policy(settings),
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
        if done as usize >= completed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    stop.cancel();
    running.await.unwrap();
    elapsed
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
