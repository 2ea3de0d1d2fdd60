//! Several nodes (issue 11): throughput of 1, 2 and 3 real `herald serve` nodes on
//! one PostgreSQL database and on the 3-node Galera cluster of
//! `scripts/galera-cluster` (each Herald node on its own database node), and how
//! long deliveries stall when a Galera node is SIGKILLed under load.
//!
//! `cargo bench --bench nodes -- [postgres] [galera] [stall] [runs N] [repeat N]`
//! With no scenario: all three. Defaults: 600 runs (1,200 transitions) per
//! measurement, 3 repeats. Figures go to stdout as Markdown table rows for
//! docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use herald::store::{Engine, SqlStore, StoreOptions};
use testkit::cluster::{count, drive, Api, Galera, Node};
use testkit::{api_token, Receiver, TestDb};
use vocab::Role;

struct Args {
    scenarios: Vec<String>,
    runs: usize,
    repeat: usize,
}

fn args() -> Args {
    let raw: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut parsed = Args {
        scenarios: Vec::new(),
        runs: 600,
        repeat: 3,
    };
    let mut it = raw.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "runs" => parsed.runs = it.next().and_then(|v| v.parse().ok()).expect("runs N"),
            "repeat" => parsed.repeat = it.next().and_then(|v| v.parse().ok()).expect("repeat N"),
            "postgres" | "galera" | "stall" => parsed.scenarios.push(arg),
            other => panic!("unknown argument {other:?}"),
        }
    }
    if parsed.scenarios.is_empty() {
        parsed.scenarios = vec!["postgres".into(), "galera".into(), "stall".into()];
    }
    parsed
}

/// One measurement: `runs` lifecycles through `urls.len()` nodes (node i on
/// `urls[i]`), from the first request to the last callback completed.
/// Returns (transitions acknowledged per second, callbacks completed per second).
async fn measure(urls: &[String], store: &SqlStore, runs: usize) -> (f64, f64) {
    let token = api_token(&urls[0], Role::Operator).await;
    let receiver = Receiver::start().await;
    let mut nodes = Vec::new();
    for url in urls {
        nodes.push(Node::start(url, None, "30", &[]).await);
    }
    let api = Api::new(nodes.iter().map(|n| n.base.clone()).collect(), token);
    let started = Instant::now();
    let acked = drive(api, runs, 0, 8 * urls.len(), receiver.url()).await;
    let transitions_done = started.elapsed();
    assert!(acked.abandoned.is_empty(), "{:?}", acked.abandoned);
    loop {
        let open = count(
            store.pool(),
            "SELECT COUNT(*) AS n FROM outbox_events WHERE status <> 'completed'",
        )
        .await;
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delivered = started.elapsed();
    drop(nodes);
    receiver.stop();
    (
        (runs * 2) as f64 / transitions_done.as_secs_f64(),
        runs as f64 / delivered.as_secs_f64(),
    )
}

fn range(values: &[f64]) -> String {
    let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = values.iter().cloned().fold(0.0, f64::max);
    format!("{min:.0}–{max:.0}")
}

async fn throughput_on_postgres(args: &Args) {
    for nodes in 1..=3usize {
        let (mut transitions, mut callbacks) = (Vec::new(), Vec::new());
        for _ in 0..args.repeat {
            let db = TestDb::new(Engine::Postgres).await;
            let store = db.store().await;
            let urls = vec![db.url.clone(); nodes];
            let (t, c) = measure(&urls, &store, args.runs).await;
            transitions.push(t);
            callbacks.push(c);
            store.close().await;
            db.drop_db().await;
        }
        println!(
            "| PostgreSQL | {nodes} | {} | {} | {} |",
            args.runs * 2,
            range(&transitions),
            range(&callbacks)
        );
    }
}

async fn galera_store(galera: &Galera) -> (String, SqlStore) {
    let name = galera.create_database().await;
    let store = SqlStore::open(&StoreOptions {
        url: Galera::url(1, &name),
        max_connections: 4,
    })
    .await
    .expect("migrate on Galera node 1");
    (name, store)
}

async fn throughput_on_galera(galera: &Galera, args: &Args) {
    for nodes in 1..=3usize {
        let (mut transitions, mut callbacks) = (Vec::new(), Vec::new());
        for _ in 0..args.repeat {
            let (name, store) = galera_store(galera).await;
            let urls: Vec<String> = (1..=nodes).map(|n| Galera::url(n, &name)).collect();
            let (t, c) = measure(&urls, &store, args.runs).await;
            transitions.push(t);
            callbacks.push(c);
            store.close().await;
            galera.drop_database(&name).await;
        }
        println!(
            "| Galera (3 DB nodes) | {nodes} | {} | {} | {} |",
            args.runs * 2,
            range(&transitions),
            range(&callbacks)
        );
    }
}

/// Three Herald nodes on three Galera nodes under steady load; database node 3 is
/// SIGKILLed. Measures the longest pause between two callbacks arriving at the
/// receiver after the kill (sampled every 10 ms), and the longest wait of one
/// acknowledged transition through Herald nodes 1 and 2.
async fn stall_on_galera(galera: &Galera, args: &Args) {
    let (mut gaps, mut waits) = (Vec::new(), Vec::new());
    for _ in 0..args.repeat {
        let (name, store) = galera_store(galera).await;
        let urls: Vec<String> = (1..=3).map(|n| Galera::url(n, &name)).collect();
        let token = api_token(&urls[0], Role::Operator).await;
        let receiver = Receiver::start().await;
        let mut nodes = Vec::new();
        for url in &urls {
            nodes.push(Node::start(url, None, "5", &[]).await);
        }
        // Load only through the nodes whose database survives.
        let api = Api::new(nodes[..2].iter().map(|n| n.base.clone()).collect(), token);
        let slowest = std::sync::Arc::new(std::sync::Mutex::new(Duration::ZERO));
        let stop = tokio_util::sync::CancellationToken::new();
        let mut load = Vec::new();
        for i in 0..8usize {
            let (api, callback, stop, slowest) =
                (api.clone(), receiver.url(), stop.clone(), slowest.clone());
            load.push(tokio::spawn(async move {
                let mut n = i;
                while !stop.is_cancelled() {
                    let started = Instant::now();
                    api.run_to_success(n, &callback).await.expect("a run");
                    let took = started.elapsed();
                    let mut s = slowest.lock().unwrap();
                    *s = (*s).max(took);
                    n += 8;
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        *slowest.lock().unwrap() = Duration::ZERO;
        let before = receiver.arrivals().len();
        galera.kill(3);
        let killed = Instant::now();
        let (mut last_count, mut last_change, mut gap) = (before, killed, Duration::ZERO);
        while killed.elapsed() < Duration::from_secs(15) {
            let now = receiver.arrivals().len();
            if now != last_count {
                gap = gap.max(last_change.elapsed());
                last_count = now;
                last_change = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.cancel();
        for task in load {
            let _ = task.await;
        }
        gaps.push(gap.as_secs_f64());
        waits.push(slowest.lock().unwrap().as_secs_f64());
        drop(nodes);
        receiver.stop();
        store.close().await;
        galera.restart(3);
        galera.drop_database(&name).await;
    }
    let fmt = |v: &[f64]| {
        let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = v.iter().cloned().fold(0.0, f64::max);
        format!("{min:.1}–{max:.1} s")
    };
    println!(
        "| Galera: SIGKILL of one DB node under load | longest gap between deliveries {} | slowest acknowledged transition {} |",
        fmt(&gaps),
        fmt(&waits)
    );
}

fn main() {
    let args = args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        herald::channels::install_crypto_provider();
        sqlx::any::install_default_drivers();
        println!("| store | Herald nodes | transitions | transitions/s | callbacks delivered/s |");
        println!("| --- | --- | --- | --- | --- |");
        if args.scenarios.iter().any(|s| s == "postgres") {
            throughput_on_postgres(&args).await;
        }
        let wants_galera = args.scenarios.iter().any(|s| s == "galera" || s == "stall");
        let galera = if wants_galera { Galera::ensure() } else { None };
        if let Some(galera) = &galera {
            if args.scenarios.iter().any(|s| s == "galera") {
                throughput_on_galera(galera, &args).await;
            }
            if args.scenarios.iter().any(|s| s == "stall") {
                stall_on_galera(galera, &args).await;
            }
        }
    });
}
