//! End to end through the HTTP API (issue 9): signed webhooks per second from
//! transitions of pre-created runs to a verifying receiver, commit → receiver
//! latency, Herald's CPU and peak RSS, and the bare loopback ceiling.
//!
//! `cargo bench --bench e2e -- [sqlite|postgres] [closed] [concurrency N] [runs N] [rate N] [seconds N] [repeat N] [connections N] [soak DURATION] [backup-at SECONDS] [ordered-keys N] [batch N] [result-bytes N]`
//!
//! Three processes: the release `herald serve` on a fresh database; this process,
//! which is the receiver (it verifies every Standard Webhooks signature and counts
//! only verified callbacks); and the load client, this same binary started again
//! with a role argument. The client first creates the runs (not timed), then moves
//! each to `succeeded` through `POST /api/v1/runs/{id}/transitions`, either closed
//! loop at `concurrency` connections (the throughput figure) or open loop at `rate`
//! per second for `seconds` (the latency figure). Afterwards the same client sends
//! the same number of signed webhooks straight to the same receiver at the same
//! concurrency: the loopback ceiling, of which Herald's figure is printed as a ratio.
//! Without `rate`, both a closed-loop run (`runs`, default 20,000) and an open-loop
//! run at 1,000/s for 10 s are made (`closed`: only the closed-loop run). `repeat` runs everything that many times.
//! `connections` sets Herald's `--database-max-connections` (default 8).
//! `soak DURATION` (with `rate` and `seconds`): over time rather than at speed — no
//! runs are made in advance, each tick creates its run and moves it, Herald keeps
//! settled events and finished runs DURATION long (`[retention]`), and every
//! minute Herald's RSS, the database's size and the rows retention removed are
//! printed beside that minute's commit → receiver p50 / p99.
//! `backup-at SECONDS` (SQLite, with `soak`): that long into the load, `herald
//! backup` copies the store while it serves; the bench prints how long the copy
//! took, its size, the commit → receiver latency while it ran against the rest of
//! the load, and checks that every run whose move was acknowledged before the copy
//! began is in the copy, `succeeded`.
//! `ordered-keys N` (issue 22): Herald orders callbacks by tenant
//! (`callback_ordered_by = "tenant"`) and the runs are spread over N tenants, so
//! the webhooks go one at a time per tenant, in commit order, over N lanes; the
//! rate beside the unordered one is what ordering costs.
//! `slow-backlog N` (issue 25, outbox::frontier): before the load, N runs call back a
//! second receiver on its own port (so its own destination) that answers each
//! callback after 1 s: at its cap of 16 it takes 16 a second and stays left out of
//! every claim with a backlog of about N while the load's callbacks go to the
//! fast receiver, whose latencies are measured as usual. The claims leaving it out
//! (`herald_outbox_claims_leaving_out_total`, full walks and windows) are printed.
//! `result-bytes N`: every move carries a result padded to about N bytes (a
//! `blob` of N characters beside `rows`), so each event's payload and each
//! callback grow by as much: what payload size costs delivery and retention.
//! `batch N` (issue 25, item 3; closed loop): the moves go N to a request through
//! `POST /api/v1/runs/transitions`, so ingest costs little and delivery is the
//! limit; each item counts as acknowledged when its own result is a 200. The
//! loopback ceiling stays one signed webhook a request: the direct-send ceiling.
//! PostgreSQL comes from HERALD_BENCH_POSTGRES_URL (default: the local server).
//! Figures go to stdout as Markdown table rows for docs/BENCHMARKS.md.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use herald::store::Engine;

use testkit::bench::{
    admin_token, cpu_time, cpu_time_of_all, fresh_db, peak_rss_mb, percentile, rss_mb, serve,
};

const SECRET: &str = "whsec_YmVuY2gtc2VjcmV0LWtleS0xMjM0NTY3ODk=";
/// The role argument that makes this binary the load client.
const CLIENT_ROLE: &str = "--e2e-client";

/// Wall-clock nanoseconds: the client and the receiver are different processes,
/// and both read this one clock.
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// How the bench tells its load client (a child process) `result-bytes`.
const RESULT_BYTES_ENV: &str = "HERALD_BENCH_RESULT_BYTES";

/// The result every move carries: `{"rows": 1200}`, with a `blob` of
/// `result-bytes` characters beside it when that option is given.
fn run_result() -> serde_json::Value {
    static RESULT: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    RESULT
        .get_or_init(|| {
            let bytes = std::env::var(RESULT_BYTES_ENV)
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            if bytes == 0 {
                serde_json::json!({"rows": 1200})
            } else {
                serde_json::json!({"rows": 1200, "blob": "x".repeat(bytes)})
            }
        })
        .clone()
}

#[derive(Clone, Copy)]
enum Load {
    /// `concurrency` requests in flight until `runs` are done.
    Closed { concurrency: usize, runs: usize },
    /// `rate` requests a second for `seconds`, each sent when due.
    Open { rate: usize, seconds: usize },
}

impl Load {
    fn runs(self) -> usize {
        match self {
            Load::Closed { runs, .. } => runs,
            Load::Open { rate, seconds } => rate * seconds,
        }
    }

    fn describe(self) -> String {
        match self {
            Load::Closed { concurrency, runs } => {
                format!("{runs} transitions, {concurrency} connections")
            }
            Load::Open { rate, seconds } => format!("{rate}/s offered for {seconds} s"),
        }
    }

    fn args(self) -> [String; 3] {
        match self {
            Load::Closed { concurrency, runs } => {
                ["closed".into(), concurrency.to_string(), runs.to_string()]
            }
            Load::Open { rate, seconds } => ["open".into(), rate.to_string(), seconds.to_string()],
        }
    }

    fn parse(args: &[String]) -> Load {
        let n = |i: usize| args[i].parse::<usize>().expect("a number");
        match args[0].as_str() {
            "closed" => Load::Closed {
                concurrency: n(1),
                runs: n(2),
            },
            _ => Load::Open {
                rate: n(1),
                seconds: n(2),
            },
        }
    }
}

// ---------------------------------------------------------------------------
// The load client (its own process).

/// `--e2e-client create BASE TOKEN HOOK RUNS OUT`: creates runs, writes their ids.
/// `--e2e-client transition BASE TOKEN IDS OUT LOAD…`: moves them to `succeeded`.
/// `--e2e-client direct HOOK OUT LOAD…`: signed webhooks straight to the receiver.
/// OUT gets `start NS`, then `ID ACK_NS` per acknowledged request, then `failed N`
/// and `cpu SECONDS` (the client's own CPU time).
fn client_main(args: &[String]) {
    herald::channels::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(512)
            .build()
            .unwrap();
        match args[0].as_str() {
            "create" => {
                create_runs(
                    &http, &args[1], &args[2], &args[3], &args[4], &args[5], &args[6],
                )
                .await
            }
            "transition" => {
                let ids: Vec<String> = std::fs::read_to_string(&args[3])
                    .unwrap()
                    .lines()
                    .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                    .filter(|id| *id != "start" && *id != "failed" && *id != "cpu")
                    .collect();
                let (base, token) = (args[1].clone(), args[2].clone());
                let load = Load::parse(&args[5..]);
                let batch: usize = args.get(8).map_or(1, |b| b.parse().expect("a batch size"));
                if batch > 1 {
                    let Load::Closed { concurrency, runs } = load else {
                        panic!("batch goes with the closed loop")
                    };
                    let batches: Vec<String> = ids[..runs.min(ids.len())]
                        .chunks(batch)
                        .map(|chunk| chunk.join(BATCHED))
                        .collect();
                    let load = Load::Closed {
                        concurrency,
                        runs: batches.len(),
                    };
                    return drive(load, &args[4], batches, move |ids| {
                        let transitions: Vec<serde_json::Value> = ids
                            .split(BATCHED)
                            .map(|id| {
                                serde_json::json!({"run_id": id, "to": "succeeded",
                                    "result": run_result()})
                            })
                            .collect();
                        http.post(format!("{base}/api/v1/runs/transitions"))
                            .bearer_auth(&token)
                            .json(&serde_json::json!({ "transitions": transitions }))
                    })
                    .await;
                }
                drive(load, &args[4], ids, move |id| {
                    http.post(format!("{base}/api/v1/runs/{id}/transitions"))
                        .bearer_auth(&token)
                        .json(&serde_json::json!({"to": "succeeded", "result": run_result()}))
                })
                .await
            }
            "soak" => {
                let (base, token, hook) = (args[1].clone(), args[2].clone(), args[3].clone());
                let load = Load::parse(&args[5..]);
                soak(&http, load, &args[4], base, token, hook).await
            }
            "direct" => {
                let hook = args[1].clone();
                let load = Load::parse(&args[3..]);
                let ids = (0..load.runs()).map(|i| format!("direct-{i}")).collect();
                let key = base64::engine::general_purpose::STANDARD
                    .decode(SECRET.trim_start_matches("whsec_"))
                    .unwrap();
                drive(load, &args[2], ids, move |id| {
                    let body = serde_json::to_vec(&serde_json::json!({
                        "run_id": id, "status": "succeeded", "result": run_result(),
                        "notification_event_id": format!("callback_{id}_succeeded_1"),
                    }))
                    .unwrap();
                    let msg_id = format!("callback_{id}_succeeded_1");
                    let timestamp = (now_ns() / 1_000_000_000) as i64;
                    let signature = herald::channels::webhook::sign(
                        std::slice::from_ref(&key),
                        &msg_id,
                        timestamp,
                        &body,
                    );
                    http.post(&hook)
                        .header("content-type", "application/json")
                        .header("webhook-id", msg_id)
                        .header("webhook-timestamp", timestamp.to_string())
                        .header("webhook-signature", signature)
                        .body(body)
                })
                .await
            }
            other => panic!("unknown client mode {other:?}"),
        }
    });
}

async fn create_runs(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    hook: &str,
    runs: &str,
    out: &str,
    tenants: &str,
) {
    let runs: usize = runs.parse().unwrap();
    // One tenant, or the runs spread round-robin over `tenants` (ordered lanes).
    let tenants: usize = tenants.parse().unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    let ids = Arc::new(Mutex::new(Vec::with_capacity(runs)));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (http, next, ids) = (http.clone(), next.clone(), ids.clone());
        let (base, token, hook) = (base.to_string(), token.to_string(), hook.to_string());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= runs {
                    break;
                }
                let tenant = format!("bench-{}", i % tenants.max(1));
                let resp = http
                    .post(format!("{base}/api/v1/runs"))
                    .bearer_auth(&token)
                    .json(
                        &serde_json::json!({"type": "etl", "tenant": tenant, "callback_url": hook}),
                    )
                    .send()
                    .await
                    .expect("create run");
                assert!(resp.status().is_success(), "create run: {}", resp.status());
                let run: serde_json::Value = resp.json().await.unwrap();
                ids.lock()
                    .unwrap()
                    .push(run["id"].as_str().unwrap().to_string());
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let ids = ids.lock().unwrap();
    std::fs::write(out, ids.join("\n")).unwrap();
}

/// The soak's load: at `rate` a second for `seconds`, a run is created and moved
/// to `succeeded` (so nothing is made in advance, and retention has a steady
/// stream of settled rows to remove). The move's acknowledgement is what is
/// recorded, as in `drive`.
async fn soak(
    http: &reqwest::Client,
    load: Load,
    out: &str,
    base: String,
    token: String,
    hook: String,
) {
    let Load::Open { rate, seconds } = load else {
        panic!("a soak is an open loop")
    };
    let acks = Arc::new(Mutex::new(Vec::with_capacity(rate * seconds)));
    let failed = Arc::new(AtomicU64::new(0));
    let start = now_ns();
    let began = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..rate * seconds {
        tokio::time::sleep_until((began + interval * i as u32).into()).await;
        let (http, acks, failed) = (http.clone(), acks.clone(), failed.clone());
        let (base, token, hook) = (base.clone(), token.clone(), hook.clone());
        tasks.spawn(async move {
            let made = async {
                let created = http
                    .post(format!("{base}/api/v1/runs"))
                    .bearer_auth(&token)
                    .json(
                        &serde_json::json!({"type": "etl", "tenant": "soak", "callback_url": hook}),
                    )
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if !created.status().is_success() {
                    return Err(format!("create: {}", created.status()));
                }
                let run: serde_json::Value = created.json().await.map_err(|e| e.to_string())?;
                let id = run["id"].as_str().unwrap_or_default().to_string();
                let moved = http
                    .post(format!("{base}/api/v1/runs/{id}/transitions"))
                    .bearer_auth(&token)
                    .json(&serde_json::json!({"to": "succeeded", "result": run_result()}))
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if !moved.status().is_success() {
                    return Err(format!("move: {}", moved.status()));
                }
                let at = now_ns();
                let _ = moved.bytes().await;
                Ok((id, at))
            };
            match made.await {
                Ok(ack) => acks.lock().unwrap().push(ack),
                Err(err) => {
                    if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                        eprintln!("client: {err}");
                    }
                }
            }
        });
        // Finished tasks are reaped as we go: an hour's tasks never pile up.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    write_report(
        out,
        start,
        &acks.lock().unwrap(),
        failed.load(Ordering::Relaxed),
    );
}

/// What the client writes for `read_report`.
fn write_report(out: &str, start: u64, acks: &[(String, u64)], failed: u64) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(out).unwrap());
    writeln!(file, "start {start}").unwrap();
    for (id, at) in acks {
        writeln!(file, "{id} {at}").unwrap();
    }
    writeln!(file, "failed {failed}").unwrap();
    writeln!(file, "cpu {}", cpu_time("self").as_secs_f64()).unwrap();
}

/// Joins the run ids of one batched request (`batch N`) into the request's id.
const BATCHED: &str = ",";

/// Sends one request per id under `load` and records when each was acknowledged.
/// A batched request's id holds its runs' ids (joined by [`BATCHED`]): each run is
/// acknowledged when its own item's result is a 200, and counted failed if not.
async fn drive<F>(load: Load, out: &str, ids: Vec<String>, request: F)
where
    F: Fn(&str) -> reqwest::RequestBuilder + Send + Sync + 'static,
{
    let request = Arc::new(request);
    let ids = Arc::new(ids);
    let acks = Arc::new(Mutex::new(Vec::with_capacity(ids.len())));
    let failed = Arc::new(AtomicU64::new(0));
    let send = {
        let (acks, failed, request) = (acks.clone(), failed.clone(), request.clone());
        move |id: String| {
            let (acks, failed, request) = (acks.clone(), failed.clone(), request.clone());
            async move {
                match request(&id).send().await {
                    Ok(resp) if resp.status().is_success() && id.contains(BATCHED) => {
                        let at = now_ns();
                        let answer: serde_json::Value = resp.json().await.unwrap_or_default();
                        let results = answer["results"].as_array().cloned().unwrap_or_default();
                        let mut acks = acks.lock().unwrap();
                        for (i, run) in id.split(BATCHED).enumerate() {
                            if results.get(i).map(|r| r["status"] == 200) == Some(true) {
                                acks.push((run.to_string(), at));
                            } else if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("client: {run}: {:?}", results.get(i));
                            }
                        }
                    }
                    Ok(resp) if resp.status().is_success() => {
                        let at = now_ns();
                        let _ = resp.bytes().await;
                        acks.lock().unwrap().push((id, at));
                    }
                    Ok(resp) => {
                        if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!(
                                "client: {} {}",
                                resp.status(),
                                resp.text().await.unwrap_or_default()
                            );
                        }
                    }
                    Err(err) => {
                        if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("client: {err}");
                        }
                    }
                }
            }
        }
    };
    let start = now_ns();
    let mut tasks = tokio::task::JoinSet::new();
    match load {
        Load::Closed { concurrency, runs } => {
            let next = Arc::new(AtomicUsize::new(0));
            for _ in 0..concurrency {
                let (next, ids, send) = (next.clone(), ids.clone(), send.clone());
                tasks.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= runs.min(ids.len()) {
                            break;
                        }
                        send(ids[i].clone()).await;
                    }
                });
            }
        }
        Load::Open { rate, seconds } => {
            let began = Instant::now();
            let interval = Duration::from_secs_f64(1.0 / rate as f64);
            for (i, id) in ids.iter().take(rate * seconds).enumerate() {
                tokio::time::sleep_until((began + interval * i as u32).into()).await;
                tasks.spawn(send(id.clone()));
            }
        }
    }
    while tasks.join_next().await.is_some() {}
    write_report(
        out,
        start,
        &acks.lock().unwrap(),
        failed.load(Ordering::Relaxed),
    );
}

/// What the client wrote.
struct ClientReport {
    start_ns: u64,
    acks: HashMap<String, u64>,
    failed: u64,
    cpu: f64,
}

fn read_report(path: &std::path::Path) -> ClientReport {
    let mut report = ClientReport {
        start_ns: 0,
        acks: HashMap::new(),
        failed: 0,
        cpu: 0.0,
    };
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let (key, value) = line.split_once(' ').unwrap();
        match key {
            "start" => report.start_ns = value.parse().unwrap(),
            "failed" => report.failed = value.parse().unwrap(),
            "cpu" => report.cpu = value.parse().unwrap(),
            id => {
                report.acks.insert(id.to_string(), value.parse().unwrap());
            }
        }
    }
    report
}

fn run_client(args: &[&str]) {
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .arg(CLIENT_ROLE)
        .args(args)
        .status()
        .expect("start the load client");
    assert!(status.success(), "the load client failed");
}

// ---------------------------------------------------------------------------
// The receiver (this process).

#[derive(Default)]
struct Arrivals {
    first: Mutex<HashMap<String, u64>>,
    verified: AtomicU64,
    rejected: AtomicU64,
}

async fn start_receiver() -> (String, Arc<Arrivals>) {
    let arrivals = Arc::new(Arrivals::default());
    let verifier = Arc::new(standardwebhooks::Webhook::new(SECRET).unwrap());
    let state = arrivals.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let (state, verifier) = (state.clone(), verifier.clone());
                async move {
                    if verifier.verify(&body, &headers).is_err() {
                        state.rejected.fetch_add(1, Ordering::Relaxed);
                        return axum::http::StatusCode::UNAUTHORIZED;
                    }
                    let at = now_ns();
                    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    let run = json["run_id"].as_str().unwrap_or_default().to_string();
                    if state.first.lock().unwrap().insert(run, at).is_none() {
                        state.verified.fetch_add(1, Ordering::Relaxed);
                    }
                    axum::http::StatusCode::NO_CONTENT
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (hook, arrivals)
}

/// A receiver on a port of its own (its own destination) that answers every
/// callback after a second, well inside Herald's send timeout: alive, never
/// failing, and always at its in-flight cap while it owes a backlog.
async fn start_slow_receiver() -> String {
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::post(|| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            axum::http::StatusCode::NO_CONTENT
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/slow", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    hook
}

/// `slow-backlog N`: N runs whose callbacks go to the slow receiver, created and
/// moved (not timed) before the measured load.
async fn owe_the_slow_destination(base: &str, token: &str, runs: usize, scratch: &std::path::Path) {
    let slow = start_slow_receiver().await;
    let (ids, acks) = (scratch.join("slow-ids"), scratch.join("slow-acks"));
    let (ids, acks) = (ids.to_str().unwrap(), acks.to_str().unwrap());
    let load = Load::Closed {
        concurrency: 64,
        runs,
    }
    .args();
    let runs = runs.to_string();
    let owing = Instant::now();
    run_client(&["create", base, token, &slow, &runs, ids, "1"]);
    let mut moving = vec!["transition", base, token, ids, acks];
    moving.extend(load.iter().map(String::as_str));
    run_client(&moving);
    eprintln!(
        "slow destination: {runs} callbacks owed in {:.1} s (not timed below)",
        owing.elapsed().as_secs_f64()
    );
}

impl Arrivals {
    fn reset(&self) {
        self.first.lock().unwrap().clear();
        self.verified.store(0, Ordering::Relaxed);
        self.rejected.store(0, Ordering::Relaxed);
    }

    async fn wait_for(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(600);
        while self.verified.load(Ordering::Relaxed) < n {
            assert!(Instant::now() < deadline, "timed out waiting for callbacks");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn last_ns(&self) -> u64 {
        self.first
            .lock()
            .unwrap()
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------
// The orchestration.

struct Figures {
    per_second: f64,
    /// Transitions answered `200` per second (commits, before any delivery).
    acknowledged: f64,
    p50_ms: f64,
    p99_ms: f64,
    herald_cores: f64,
    /// The PostgreSQL server's processes (SQLite runs inside Herald).
    database_cores: f64,
    client_cores: f64,
    receiver_cores: f64,
    herald_rss_mb: f64,
    ceiling: Option<f64>,
    /// Herald's CPU-seconds per 1,000 webhooks delivered.
    herald_cpu_per_thousand: f64,
    /// Claimed events given back unattempted (`herald_outbox_claims_handed_back_total`).
    handed_back: f64,
}

/// What a soak samples once a minute beside its latencies.
#[derive(Clone, Copy, Default)]
struct Sample {
    herald_rss_mb: f64,
    database_mb: f64,
    /// Rows the retention pass has removed so far (every table).
    removed: f64,
}

/// The database's size on disk: a SQLite file with its WAL, or PostgreSQL's
/// `pg_database_size`.
async fn database_mb(url: &str) -> f64 {
    match url.strip_prefix("sqlite://") {
        Some(path) => {
            let path = path.split('?').next().unwrap_or(path);
            let size = |p: String| std::fs::metadata(p).map_or(0, |m| m.len());
            (size(path.to_string()) + size(format!("{path}-wal"))) as f64 / 1e6
        }
        None => {
            let options = herald::store::StoreOptions {
                url: url.to_string(),
                max_connections: 1,
            };
            let Ok(store) = herald::store::SqlStore::connect(&options).await else {
                return 0.0;
            };
            let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
                .fetch_one(store.pool())
                .await
                .unwrap_or(0);
            store.close().await;
            bytes as f64 / 1e6
        }
    }
}

/// `herald_retention_rows_removed_total` summed over its series, from `/metrics`.
async fn rows_removed(base: &str) -> f64 {
    metric_sum(base, "herald_retention_rows_removed_total").await
}

/// A metric family summed over its series, from `/metrics`.
async fn metric_sum(base: &str, family: &str) -> f64 {
    let text = match reqwest::get(format!("{base}/metrics")).await {
        Ok(resp) => resp.text().await.unwrap_or_default(),
        Err(_) => return 0.0,
    };
    text.lines()
        .filter(|l| l.starts_with(family))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |total, rows| total + rows)
}

/// What a measurement is asked besides its engine and load (the command line's options).
struct Options {
    /// Herald's `database_max_connections` (its default when not given).
    connections: Option<usize>,
    /// `soak DURATION`: how long settled events and finished runs are kept.
    soak_retention: Option<String>,
    /// `backup-at SECONDS`: when a backup is taken during a soak.
    backup_at: Option<u64>,
    /// `ordered-keys N`: callbacks ordered by tenant over N tenants.
    ordered_keys: Option<usize>,
    /// `slow-backlog N`: N callbacks owed to a slow destination before the load.
    slow_backlog: Option<usize>,
    /// `batch N`: N moves a request (`POST /api/v1/runs/transitions`).
    batch: Option<usize>,
}

async fn measure(
    engine: Engine,
    load: Load,
    hook: &str,
    arrivals: &Arrivals,
    options: &Options,
) -> Figures {
    let Options {
        connections,
        backup_at,
        ordered_keys,
        slow_backlog,
        batch,
        ..
    } = *options;
    let soak_retention = options.soak_retention.as_deref();
    let scratch = tempfile::tempdir().unwrap();
    let ids_path = scratch.path().join("ids");
    let acks_path = scratch.path().join("acks");
    let direct_path = scratch.path().join("direct");
    let db = fresh_db(engine, "e2e").await;
    let token = admin_token(&db.url);
    let pool = connections.map(|n| n.to_string());
    let mut flags = vec!["--destination-allowlist", "127.0.0.0/8"];
    if let Some(pool) = &pool {
        flags.extend(["--database-max-connections", pool.as_str()]);
    }
    // A soak keeps settled events and finished runs only `soak_retention` long.
    let config_path = scratch.path().join("herald.toml");
    let config_text = config_path.to_str().unwrap().to_string();
    if let Some(keep) = soak_retention {
        std::fs::write(
            &config_path,
            format!("[retention]\ncompleted = \"{keep}\"\nruns = \"{keep}\"\n"),
        )
        .unwrap();
        flags.extend(["--config", config_text.as_str()]);
    }
    if ordered_keys.is_some() {
        flags.extend(["--callback-ordered-by", "tenant"]);
    }
    let tenants = ordered_keys.unwrap_or(1).to_string();
    let server = serve(&db.url, &flags, &[("HERALD_WEBHOOK_SECRET", SECRET)]).await;
    let pid = server.pid().to_string();
    let runs = load.runs();
    let runs_text = runs.to_string();
    let ids_text = ids_path.to_str().unwrap();
    if soak_retention.is_none() {
        let creating = Instant::now();
        run_client(&[
            "create",
            server.base.as_str(),
            token.as_str(),
            hook,
            runs_text.as_str(),
            ids_text,
            tenants.as_str(),
        ]);
        eprintln!(
            "{}: created {runs} runs in {:.1} s ({:.0}/s, not timed below)",
            engine.name(),
            creating.elapsed().as_secs_f64(),
            runs as f64 / creating.elapsed().as_secs_f64()
        );
    }
    if let Some(backlog) = slow_backlog {
        owe_the_slow_destination(&server.base, &token, backlog, scratch.path()).await;
        // Before its pace is known, a destination's first claims may take more
        // than it can take in time (`outbox::pace`): those are counted here.
        eprintln!(
            "claims handed back before the load: {}",
            metric_sum(&server.base, "herald_outbox_claims_handed_back_total").await
        );
    }
    arrivals.reset();

    let (herald_cpu, receiver_cpu) = (cpu_time(&pid), cpu_time("self"));
    let database_cpu = cpu_time_of_all("postgres");
    let load_args = load.args();
    let acks_text = acks_path.to_str().unwrap();
    let mut args = match soak_retention {
        Some(_) => vec![
            "soak",
            server.base.as_str(),
            token.as_str(),
            hook,
            acks_text,
        ],
        None => vec![
            "transition",
            server.base.as_str(),
            token.as_str(),
            ids_text,
            acks_text,
        ],
    };
    args.extend(load_args.iter().map(String::as_str));
    let batch_text = batch.map(|b| b.to_string());
    if let Some(batch) = &batch_text {
        assert!(
            soak_retention.is_none(),
            "batch goes with runs made in advance"
        );
        args.push(batch);
    }
    // Once a minute (a soak): Herald's RSS, the database's size, rows removed.
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sampling = soak_retention.map(|_| {
        let (pid, base, url) = (pid.clone(), server.base.clone(), db.url.clone());
        let samples = samples.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            tick.tick().await;
            loop {
                tick.tick().await;
                let sample = Sample {
                    herald_rss_mb: rss_mb(&pid),
                    database_mb: database_mb(&url).await,
                    removed: rows_removed(&base).await,
                };
                let mut samples = samples.lock().unwrap();
                samples.push(sample);
                if samples.len().is_multiple_of(5) {
                    eprintln!("soak: {} minutes", samples.len());
                }
            }
        })
    });
    let backup_path = scratch.path().join("backup.db");
    let backup = backup_at.map(|after| {
        assert_eq!(engine, Engine::Sqlite, "backup-at copies a SQLite store");
        tokio::spawn(take_backup(
            Duration::from_secs(after),
            db.url.clone(),
            backup_path.clone(),
        ))
    });
    run_client(&args);
    if let Some(sampling) = sampling {
        sampling.abort();
    }
    let report = read_report(&acks_path);
    let backup = match backup {
        Some(task) => Some(task.await.expect("the backup task")),
        None => None,
    };
    if soak_retention.is_some() {
        // An hour's figures are kept even if some requests failed: said, not hidden.
        println!("requests that failed: {}", report.failed);
        // Of them, those Herald refused at once past its bound (0 on builds without it).
        let refused = metric_sum(&server.base, "herald_http_api_requests_refused_total").await;
        println!("requests refused at once (503 overloaded): {refused}");
    } else {
        assert_eq!(report.failed, 0, "transitions failed");
    }
    let runs = runs - report.failed as usize;
    arrivals.wait_for(runs as u64).await;
    if let Some(backup) = &backup {
        report_backup(backup, &report, arrivals, &backup_path).await;
    }
    let wall = (arrivals.last_ns() - report.start_ns) as f64 / 1e9;
    let last_ack = report
        .acks
        .values()
        .copied()
        .max()
        .unwrap_or(report.start_ns);
    let acknowledged = runs as f64 / ((last_ack - report.start_ns) as f64 / 1e9);
    let herald_cpu_seconds = (cpu_time(&pid) - herald_cpu).as_secs_f64();
    let herald_cores = herald_cpu_seconds / wall;
    let handed_back = metric_sum(&server.base, "herald_outbox_claims_handed_back_total").await;
    eprintln!(
        "events leased at insert (no claim): {}",
        metric_sum(&server.base, "herald_outbox_leased_at_insert_total").await
    );
    if slow_backlog.is_some() {
        for walk in ["full", "window"] {
            let series = format!("herald_outbox_claims_leaving_out_total{{walk=\"{walk}\"}}");
            eprintln!(
                "claims leaving out, {walk}: {}",
                metric_sum(&server.base, &series).await
            );
        }
    }
    let receiver_cores = (cpu_time("self") - receiver_cpu).as_secs_f64() / wall;
    let database_cores = cpu_time_of_all("postgres")
        .saturating_sub(database_cpu)
        .as_secs_f64()
        / wall;
    let herald_rss_mb = peak_rss_mb(&pid);
    let mut latencies: Vec<f64> = {
        let first = arrivals.first.lock().unwrap();
        report
            .acks
            .iter()
            .map(|(id, ack)| first[id].saturating_sub(*ack) as f64 / 1e6)
            .collect()
    };
    latencies.sort_by(f64::total_cmp);
    if wall >= 120.0 {
        print_minutes(&report, arrivals, &samples.lock().unwrap());
    }
    assert_eq!(
        arrivals.rejected.load(Ordering::Relaxed),
        0,
        "bad signatures"
    );
    drop(server);
    db.drop_db().await;

    // The ceiling: the same client, the same receiver, no Herald in between (an
    // open loop's ceiling is its offered rate, so only a closed loop measures one).
    let ceiling = match load {
        Load::Closed { .. } => {
            arrivals.reset();
            let mut args = vec!["direct", hook, direct_path.to_str().unwrap()];
            args.extend(load_args.iter().map(String::as_str));
            run_client(&args);
            let direct = read_report(&direct_path);
            arrivals.wait_for(runs as u64).await;
            Some(runs as f64 / ((arrivals.last_ns() - direct.start_ns) as f64 / 1e9))
        }
        Load::Open { .. } => None,
    };
    Figures {
        per_second: runs as f64 / wall,
        acknowledged,
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        herald_cores,
        database_cores,
        client_cores: report.cpu / wall,
        receiver_cores,
        herald_rss_mb,
        ceiling,
        herald_cpu_per_thousand: herald_cpu_seconds / runs as f64 * 1000.0,
        handed_back,
    }
}

/// A backup taken while the load ran: when it began and ended (wall-clock ns).
struct Backup {
    began_ns: u64,
    ended_ns: u64,
}

/// Waits `after`, then copies the store with `herald backup` (which checks the
/// copy it made) while the load goes on.
async fn take_backup(after: Duration, url: String, to: std::path::PathBuf) -> Backup {
    tokio::time::sleep(after).await;
    let began_ns = now_ns();
    let out = tokio::process::Command::new(testkit::herald_bin())
        .args([
            "backup",
            "--to",
            to.to_str().unwrap(),
            "--database-url",
            &url,
        ])
        .output()
        .await
        .expect("run herald backup");
    let ended_ns = now_ns();
    assert!(
        out.status.success(),
        "herald backup failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Backup { began_ns, ended_ns }
}

/// Prints what the backup took and cost, and checks that it holds every run whose
/// move was acknowledged before it began.
async fn report_backup(
    backup: &Backup,
    report: &ClientReport,
    arrivals: &Arrivals,
    path: &std::path::Path,
) {
    let pool = sqlx::AnyPool::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("open the backup");
    let stored: HashMap<String, String> = sqlx::query_as("SELECT id, status FROM runs")
        .fetch_all(&pool)
        .await
        .expect("read the backup's runs")
        .into_iter()
        .collect();
    pool.close().await;
    let before: Vec<&String> = report
        .acks
        .iter()
        .filter(|(_, ack)| **ack < backup.began_ns)
        .map(|(id, _)| id)
        .collect();
    let missing = before
        .iter()
        .filter(|id| stored.get(id.as_str()).map(String::as_str) != Some("succeeded"))
        .count();
    // Commit → receiver of the moves acknowledged while the copy ran, and of the rest.
    let (mut during, mut rest): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    {
        let first = arrivals.first.lock().unwrap();
        for (id, ack) in &report.acks {
            let Some(arrived) = first.get(id) else {
                continue;
            };
            let ms = arrived.saturating_sub(*ack) as f64 / 1e6;
            if (backup.began_ns..=backup.ended_ns).contains(ack) {
                during.push(ms);
            } else {
                rest.push(ms);
            }
        }
    }
    during.sort_by(f64::total_cmp);
    rest.sort_by(f64::total_cmp);
    let size_mb = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;
    println!(
        "| backup | {:.1} s | {size_mb:.0} MB | {} runs in the copy | {} acknowledged before it began, {missing} missing | p50 / p99 while copying {:.1} / {:.1} ms ({} moves) | the rest {:.1} / {:.1} ms |",
        (backup.ended_ns - backup.began_ns) as f64 / 1e9,
        stored.len(),
        before.len(),
        percentile(&during, 0.5),
        percentile(&during, 0.99),
        during.len(),
        percentile(&rest, 0.5),
        percentile(&rest, 0.99),
    );
    assert!(before.len() > 100, "the load ran before the backup");
    assert_eq!(missing, 0, "acknowledged runs missing from the backup");
}

/// For long runs: commit → receiver p50 / p99 per minute of acknowledgement, so
/// a tail that grows with churn (a hot table filling with dead rows) shows; a
/// soak adds its samples (RSS, database size, rows removed) as a Markdown table.
fn print_minutes(report: &ClientReport, arrivals: &Arrivals, samples: &[Sample]) {
    let first = arrivals.first.lock().unwrap();
    let mut minutes: Vec<Vec<f64>> = Vec::new();
    for (id, ack) in &report.acks {
        let minute = (ack.saturating_sub(report.start_ns) / 60_000_000_000) as usize;
        if minutes.len() <= minute {
            minutes.resize(minute + 1, Vec::new());
        }
        minutes[minute].push(first[id].saturating_sub(*ack) as f64 / 1e6);
    }
    if !samples.is_empty() {
        println!("\n| minute | transitions | commit → receiver p50 / p99 ms | Herald RSS MB | database MB | rows removed so far |");
        println!("| --- | --- | --- | --- | --- | --- |");
    }
    for (minute, mut latencies) in minutes.into_iter().enumerate() {
        latencies.sort_by(f64::total_cmp);
        let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
        match samples.get(minute) {
            Some(s) => println!(
                "| {} | {} | {p50:.1} / {p99:.1} | {:.0} | {:.0} | {:.0} |",
                minute + 1,
                latencies.len(),
                s.herald_rss_mb,
                s.database_mb,
                s.removed
            ),
            None => eprintln!(
                "minute {}: {} transitions, commit → receiver p50 {p50:.1} ms, p99 {p99:.1} ms",
                minute + 1,
                latencies.len()
            ),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some(CLIENT_ROLE) {
        return client_main(&args[1..]);
    }
    let number = |name: &str| -> Option<usize> {
        let i = args.iter().position(|a| a == name)?;
        Some(
            args.get(i + 1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} takes a number")),
        )
    };
    let mut engines: Vec<Engine> = Vec::new();
    for arg in &args {
        match arg.as_str() {
            "sqlite" => engines.push(Engine::Sqlite),
            "postgres" => engines.push(Engine::Postgres),
            _ => {}
        }
    }
    if engines.is_empty() {
        engines = vec![Engine::Sqlite, Engine::Postgres];
    }
    let concurrency = number("concurrency").unwrap_or(64);
    let runs = number("runs").unwrap_or(20_000);
    let seconds = number("seconds").unwrap_or(10);
    let closed_only = args.iter().any(|a| a == "closed");
    // `soak DURATION`: each tick creates its run too, and retention keeps settled
    // events and finished runs DURATION long (e.g. `soak 5m rate 1500 seconds 3600`).
    let soak = args.iter().position(|a| a == "soak").map(|i| {
        args.get(i + 1)
            .cloned()
            .expect("soak takes a duration, e.g. 5m")
    });
    let loads = match number("rate") {
        Some(rate) => vec![Load::Open { rate, seconds }],
        None if closed_only => vec![Load::Closed { concurrency, runs }],
        None => vec![
            Load::Closed { concurrency, runs },
            Load::Open {
                rate: 1_000,
                seconds,
            },
        ],
    };
    let repeat = number("repeat").unwrap_or(1);
    let backup_at = number("backup-at").map(|s| s as u64);
    assert!(
        backup_at.is_none() || soak.is_some(),
        "backup-at goes with soak (each tick creates its run)"
    );
    // Herald's `database_max_connections` (its default when not given).
    let connections = number("connections");
    let ordered_keys = number("ordered-keys");
    assert!(
        ordered_keys.is_none() || soak.is_none(),
        "ordered-keys goes with runs made in advance, not a soak"
    );
    // The load client is this binary started again: it inherits the variable.
    if let Some(bytes) = number("result-bytes") {
        std::env::set_var(RESULT_BYTES_ENV, bytes.to_string());
    }
    let options = Options {
        connections,
        soak_retention: soak,
        backup_at,
        ordered_keys,
        slow_backlog: number("slow-backlog"),
        batch: number("batch"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        sqlx::any::install_default_drivers();
        herald::channels::install_crypto_provider();
        let (hook, arrivals) = start_receiver().await;
        println!(
            "| engine | load | signed webhooks/s | transitions acknowledged/s | commit → receiver p50 / p99 | CPU cores: Herald / PostgreSQL / client / receiver | Herald peak RSS | loopback ceiling | ratio | Herald CPU-s per 1,000 | claims handed back |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for _ in 0..repeat {
            for engine in &engines {
                for load in &loads {
                    let f = measure(*engine, *load, &hook, &arrivals, &options).await;
                    let (ceiling, ratio) = match f.ceiling {
                        Some(c) => (format!("{c:.0}/s"), format!("{:.2}", f.per_second / c)),
                        None => ("—".into(), "—".into()),
                    };
                    println!(
                        "| {} | {} | {:.0} | {:.0} | {:.1} / {:.1} ms | {:.2} / {:.2} / {:.2} / {:.2} | {:.0} MB | {} | {} | {:.2} | {:.0} |",
                        engine.name(),
                        match (ordered_keys, options.batch) {
                            (Some(keys), _) => format!("{}, ordered over {keys} tenants", load.describe()),
                            (None, Some(batch)) => format!("{}, {batch} a request", load.describe()),
                            (None, None) => load.describe(),
                        },
                        f.per_second,
                        f.acknowledged,
                        f.p50_ms,
                        f.p99_ms,
                        f.herald_cores,
                        f.database_cores,
                        f.client_cores,
                        f.receiver_cores,
                        f.herald_rss_mb,
                        ceiling,
                        ratio,
                        f.herald_cpu_per_thousand,
                        f.handed_back
                    );
                }
            }
        }
    });
}
