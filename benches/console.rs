//! Console render times at scale: 1,000,000 runs and 3,000,000 outbox events (and a
//! day of the overview's per-minute rollups).
//!
//! `cargo bench --bench console -- [sqlite|postgres] [runs N] [requests N] [pages]`
//! (`pages`: without the reconciliation exports)
//! With no arguments: SQLite and PostgreSQL, 1,000,000 runs, 200 timed requests per page.
//!
//! The store is seeded in bulk with SQL, then a real `herald serve` (the release
//! binary) serves it in its own process, and this process times the server-side
//! render of each console page over HTTP on loopback, as a browser's first load
//! sees it. PostgreSQL comes from HERALD_BENCH_POSTGRES_URL (default: the local server).
//! Figures go to stdout as Markdown table rows for docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use herald::store::{Engine, SqlStore, StoreOptions};
use sqlx::Executor;

use testkit::bench::{admin_token, fresh_db, peak_rss_mb, percentile, serve, Server};
use testkit::TestDb;

/// One run in this many has a `failed` delivery, one in `UNCERTAIN_EVERY` an
/// `uncertain` one, one in `PENDING_EVERY` a `pending` one: "needs attention" is rare.
const FAILED_EVERY: i64 = 1_000;
const UNCERTAIN_EVERY: i64 = 5_000;
const PENDING_EVERY: i64 = 100;
const BASE_MS: i64 = 1_760_000_000_000;
/// Pending events are scheduled well in the future (waiting retries), so workers
/// stay idle and only rendering is timed.
const NOT_DUE_MS: i64 = 100 * 365 * 24 * 3600 * 1000;

struct Args {
    engines: Vec<Engine>,
    runs: i64,
    requests: usize,
    /// Time the reconciliation exports too (`pages`: the pages only).
    exports: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        engines: Vec::new(),
        runs: 1_000_000,
        requests: 200,
        exports: true,
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "sqlite" => args.engines.push(Engine::Sqlite),
            "postgres" => args.engines.push(Engine::Postgres),
            "pages" => args.exports = false,
            "runs" => args.runs = it.next().and_then(|n| n.parse().ok()).expect("runs N"),
            "requests" => {
                args.requests = it.next().and_then(|n| n.parse().ok()).expect("requests N")
            }
            other => panic!("unknown argument {other:?}"),
        }
    }
    if args.engines.is_empty() {
        args.engines = vec![Engine::Sqlite, Engine::Postgres];
    }
    args
}

/// Bulk seed: `runs` finished runs over 20 types and 500 tenants, each with a
/// callback and two route deliveries (three events), statuses spread as above.
/// `WITH n(i)`: the numbers 1 to `count`.
fn numbers(engine: Engine, count: i64) -> String {
    match engine {
        Engine::Sqlite => format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})"
        ),
        Engine::Postgres => format!("WITH n(i) AS (SELECT generate_series(1, {count})::bigint)"),
        Engine::MySql => unimplemented!(),
    }
}

fn seed_sql(engine: Engine, runs: i64) -> Vec<String> {
    let numbers = numbers(engine, runs);
    let (id, text) = match engine {
        Engine::Sqlite => ("printf('0190%012d', i)", ""),
        Engine::Postgres => ("'0190' || lpad(i::text, 12, '0')", "::text"),
        Engine::MySql => unimplemented!(),
    };
    let at = format!("{BASE_MS} + i * 1000");
    let status = |offset: i64| {
        format!(
            "CASE WHEN (i + {offset}) % {FAILED_EVERY} = 0 THEN 'failed' \
             WHEN (i + {offset}) % {UNCERTAIN_EVERY} = 1 THEN 'uncertain' \
             WHEN (i + {offset}) % {PENDING_EVERY} = 2 THEN 'pending' ELSE 'completed' END"
        )
    };
    let mut statements = vec![format!(
        "{numbers} INSERT INTO runs (id, run_type, tenant, status, callback_url, routes, result, \
         transition_seq, created_at, updated_at) \
         SELECT {id}, 'type-' || (i % 20){text}, 'tenant-' || (i % 500){text}, 'succeeded', \
         'https://hooks.example.com/runs/' || i{text}, '[\"ops-hook\",\"ops-chat\"]', '{{\"rows\":1200}}', \
         2, {at}, {at} FROM n"
    )];
    for (kind, prefix, suffix, offset) in [
        ("callback", "callback_", "_succeeded_2", 0),
        ("delivery", "deliver_", "_ops-hook", 3),
        ("delivery", "deliver_", "_ops-chat", 7),
    ] {
        let state = status(offset);
        statements.push(format!(
            "{numbers} INSERT INTO outbox_events (event_id, source, kind, parent_type, parent_id, payload, \
             redeliverable, status, attempts, cycle, cycle_attempts, max_attempts, next_attempt_at, \
             last_error, last_status_code, created_at, updated_at, completed_at, failed_at, uncertain_at) \
             SELECT '{prefix}' || {id} || '{suffix}', 'jobs', '{kind}', 'run', {id}, '{{}}', 1, {state}, \
             1, 1, 1, 6, {at} + {NOT_DUE_MS}, NULL, 200, {at}, {at}, {at}, NULL, NULL FROM n"
        ));
    }
    statements.push(
        "INSERT INTO run_types (run_type) SELECT DISTINCT run_type FROM runs \
         WHERE run_type NOT IN (SELECT run_type FROM run_types)"
            .into(),
    );
    statements.extend(rollups_sql(engine));
    statements.push("ANALYZE".into());
    statements
}

/// A day of the overview's per-minute rollups up to now, as a busy store keeps
/// them: per minute, callbacks and route deliveries completed (with latency
/// buckets), failures at two destinations, and the backlog sample. The mark says
/// every minute before the current one is final (the server's own first pass
/// recounts only the current minute, from the seeded outbox).
fn rollups_sql(engine: Engine) -> Vec<String> {
    use herald::store::rollups::MINUTE_MS;
    let now = herald::clock::local_now_ms();
    let current = now - now % MINUTE_MS;
    let numbers = numbers(engine, 24 * 60);
    let minute = format!("{current} - i * {MINUTE_MS}");
    let latency = "'0,40,300,600,200,60,20,5,2,1,0,0,0,0,0,0'";
    let mut statements: Vec<String> = [
        ("jobs", "callback", "completed", "''", "1200 + i % 300", latency),
        ("jobs", "delivery", "completed", "''", "2400 + i % 500", latency),
        ("jobs", "callback", "failed", "'https://hooks.example.com'", "i % 3", "NULL"),
        ("jobs", "delivery", "failed", "'https://chat.example.com'", "i % 2", "NULL"),
        ("", "", "pending", "''", "40 + i % 90", "NULL"),
    ]
    .iter()
    .map(|(source, kind, status, destination, deliveries, latency)| {
        format!(
            "{numbers} INSERT INTO delivery_minutes \
             (minute, source, kind, status, destination, deliveries, latency, oldest_at) \
             SELECT {minute}, '{source}', '{kind}', '{status}', {destination}, {deliveries}, {latency}, \
             CASE WHEN '{status}' = 'pending' THEN {minute} - 5000 END FROM n"
        )
    })
    .collect();
    statements.push(format!(
        "UPDATE delivery_rollup_state SET final_before = {current} WHERE id = 1"
    ));
    statements
}

async fn seed(db: &TestDb, engine: Engine, runs: i64) {
    let store = SqlStore::open(&StoreOptions {
        url: db.url.clone(),
        max_connections: 2,
    })
    .await
    .expect("open and migrate");
    let started = Instant::now();
    for sql in seed_sql(engine, runs) {
        store.pool().execute(sql.as_str()).await.expect("seed");
    }
    eprintln!(
        "seeded {runs} runs and {} events on {} in {:.0?}",
        runs * 3,
        engine.name(),
        started.elapsed()
    );
    store.close().await;
}

/// Waits for the server's first rollup pass to sum the seeded day of minutes into
/// quarter hours (migration 0018): until then a day's overview would read no
/// quarters and be timed doing less than it does.
async fn wait_for_quarters(db: &TestDb) {
    let pool = sqlx::AnyPool::connect(&db.url).await.expect("connect");
    let started = Instant::now();
    loop {
        let quarters: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM delivery_quarters")
            .fetch_one(&pool)
            .await
            .expect("count quarters");
        if quarters >= 24 * 4 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the seeded minutes were not summed into quarters in 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pool.close().await;
}

async fn time_page(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    path: &str,
    n: usize,
) -> String {
    let get = || async {
        let started = Instant::now();
        let resp = client
            .get(format!("{base}{path}"))
            .bearer_auth(token)
            .send()
            .await
            .expect("request");
        let status = resp.status();
        let body = resp.text().await.expect("body");
        assert!(status.is_success(), "{path}: {status}");
        (started.elapsed(), body.len())
    };
    let probe = client
        .get(format!("{base}{path}"))
        .bearer_auth(token)
        .send()
        .await
        .expect("request");
    if probe.status() == reqwest::StatusCode::NOT_FOUND && !path.starts_with("/runs/") {
        return format!("| `{path}` | not served by this build | | | | |");
    }
    for _ in 0..10 {
        get().await;
    }
    let mut times = Vec::with_capacity(n);
    let mut bytes = 0;
    for _ in 0..n {
        let (took, len) = get().await;
        times.push(took);
        bytes = len;
    }
    times.sort();
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
    format!(
        "| `{path}` | {} | {} | {} | {} | {} KiB |",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.95)),
        ms(percentile(&times, 0.99)),
        ms(*times.last().unwrap()),
        bytes / 1024
    )
}

/// `GET /admin/api/notification-outbox/export` of every event, read as it streams:
/// rows, time, and the server's peak RSS before and after (flat: one page at a time).
async fn export_over_http(client: &reqwest::Client, server: &Server, token: &str) -> String {
    let pid = server.pid().to_string();
    let before = peak_rss_mb(&pid);
    let started = Instant::now();
    let mut resp = client
        .get(format!(
            "{}/admin/api/notification-outbox/export",
            server.base
        ))
        .bearer_auth(token)
        .send()
        .await
        .expect("export");
    assert!(resp.status().is_success(), "export: {}", resp.status());
    let mut rows = 0usize;
    while let Some(chunk) = resp.chunk().await.expect("export body") {
        rows += chunk.iter().filter(|b| **b == b'\n').count();
    }
    let took = started.elapsed().as_secs_f64();
    format!(
        "| `GET /admin/api/notification-outbox/export` (admin: payloads included) | {rows} | {took:.1} | {:.0} | `herald serve` {before:.0} MB before, {:.0} MB after |",
        rows as f64 / took,
        peak_rss_mb(&pid)
    )
}

/// `herald events export` of every event to /dev/null under GNU time: rows, time
/// and the command's own peak RSS.
fn export_from_the_command_line(db_url: &str) -> String {
    let herald = testkit::bench::herald();
    let started = Instant::now();
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", "peak_rss_kb=%M"])
        .arg(herald.get_program())
        .args(["events", "export", "--database-url", db_url])
        .stdout(std::process::Stdio::null())
        .output()
        .expect("herald events export under /usr/bin/time");
    let took = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let rows: f64 = stderr
        .split("Exported ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    let peak_kb: f64 = stderr
        .split("peak_rss_kb=")
        .nth(1)
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0.0);
    format!(
        "| `herald events export > /dev/null` (no payloads) | {rows:.0} | {took:.1} | {:.0} | {:.0} MB |",
        rows / took,
        peak_kb / 1024.0
    )
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    sqlx::any::install_default_drivers();
    herald::channels::install_crypto_provider();
    for engine in args.engines {
        let db = fresh_db(engine, "console").await;
        seed(&db, engine, args.runs).await;
        let token = admin_token(&db.url);
        // The seeded deliveries point nowhere: workers stay idle so only rendering is timed.
        let server = serve(&db.url, &["--worker-poll-interval-ms", "600000"], &[]).await;
        wait_for_quarters(&db).await;
        let client = reqwest::Client::new();
        println!(
            "\n{} — {} runs, {} events, {} requests per page (after 10 warm-up)\n",
            engine.name(),
            args.runs,
            args.runs * 3,
            args.requests
        );
        println!("| page | p50 ms | p95 ms | p99 ms | max ms | size |");
        println!("| --- | --- | --- | --- | --- | --- |");
        let newest = format!("0190{:012}", args.runs);
        for path in [
            "/overview".to_string(),
            "/overview?window=day".to_string(),
            "/overview?window=day&kind=callback".to_string(),
            format!("/search?q={newest}"),
            // The end of an id (as the console shows one), and a beginning: each
            // through the indexes on ids' ends (migration 0017) or the keys.
            format!("/search?q={}", &newest[newest.len() - 12..]),
            format!("/search?q={}", &newest[..10]),
            "/runs".to_string(),
            "/runs?delivery=needs_attention".to_string(),
            "/runs?delivery=failed&type=type-7".to_string(),
            "/runs?tenant=tenant-42".to_string(),
            format!("/runs/{newest}"),
            "/deliveries".to_string(),
            "/deliveries?status=needs_attention".to_string(),
        ] {
            println!(
                "{}",
                time_page(&client, &server.base, &token, &path, args.requests).await
            );
        }
        if args.exports {
            println!(
                "\n| reconciliation export of every event | rows | seconds | rows/s | peak RSS |"
            );
            println!("| --- | --- | --- | --- | --- |");
            println!("{}", export_over_http(&client, &server, &token).await);
            println!("{}", export_from_the_command_line(&db.url));
        }
        drop(server);
        db.drop_db().await;
    }
}
