//! What the console's live updates cost a server at idle (issue 23: 200 open tabs
//! add under 5 % CPU).
//!
//! `cargo bench --bench live -- [tabs N] [seconds N] [runs N]`
//! (defaults: 200 tabs, 60 s a phase, 500 runs in the store)
//!
//! A real `herald serve` (the release binary) on a SQLite file holding `runs`
//! runs; this process plays `tabs` console tabs of the Runs page over loopback,
//! as `app/src/live.rs` behaves, in phases of `seconds` each, and reads the
//! server's CPU time from `/proc` around each phase:
//! 1. no tabs (the server's own upkeep: leases, rollups, breakers);
//! 2. every tab streaming: one `GET /console-api/live` held open each, plus the
//!    tab's safety refresh of the page's data every 30 s (spread over the 30 s);
//! 3. every tab polling every 2 s (what a tab does when the stream is down, and
//!    what every tab did before the stream);
//! 4. no tabs again (the baseline has not drifted).
//!
//! Nothing changes meanwhile, so a streaming tab hears nothing but keep-alives; the
//! notices the tabs did hear are counted and printed (0 expected).
//! Figures go to stdout as Markdown table rows for docs/BENCHMARKS.md.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald::store::Engine;
use tokio::task::JoinSet;

use testkit::bench::{admin_token, cpu_time, fresh_db, rss_mb, serve, Server};

/// How often a streaming tab refreshes anyway (`POLLS_PER_SAFETY_REFRESH` × `POLL`
/// in `app/src/live.rs`).
const SAFETY_REFRESH: Duration = Duration::from_secs(30);
/// How often a tab without a stream polls (`POLL` in `app/src/live.rs`).
const POLL: Duration = Duration::from_secs(2);

struct Args {
    tabs: usize,
    seconds: u64,
    runs: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        tabs: 200,
        seconds: 60,
        runs: 500,
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(arg) = it.next() {
        let mut number = |name: &str| {
            it.next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{name} N"))
        };
        match arg.as_str() {
            "tabs" => args.tabs = number("tabs") as usize,
            "seconds" => args.seconds = number("seconds"),
            "runs" => args.runs = number("runs") as usize,
            other => panic!("unknown argument {other:?}"),
        }
    }
    args
}

/// What the tabs did in a phase.
#[derive(Default)]
struct Counts {
    refreshes: AtomicU64,
    notices: AtomicU64,
    streams_open: AtomicU64,
}

/// The Runs page's data, as a tab refetches it (the server function's POST).
async fn refresh(client: &reqwest::Client, base: &str, token: &str, counts: &Counts) {
    let resp = client
        .post(format!("{base}/console-api/runs"))
        .bearer_auth(token)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("")
        .send()
        .await
        .expect("a refresh");
    assert!(resp.status().is_success(), "refresh: {}", resp.status());
    resp.bytes().await.expect("the page's data");
    counts.refreshes.fetch_add(1, Ordering::Relaxed);
}

/// One streaming tab: its stream held open (notices counted), its safety refresh
/// every 30 s, the first one `offset` in.
async fn streaming_tab(
    client: reqwest::Client,
    base: String,
    token: String,
    offset: Duration,
    counts: Arc<Counts>,
) {
    let mut stream = client
        .get(format!("{base}/console-api/live"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("a stream");
    assert!(stream.status().is_success(), "stream: {}", stream.status());
    counts.streams_open.fetch_add(1, Ordering::Relaxed);
    let reading = {
        let counts = counts.clone();
        async move {
            while let Ok(Some(chunk)) = stream.chunk().await {
                let text = String::from_utf8_lossy(&chunk);
                let notices = text.matches("event: change").count();
                counts.notices.fetch_add(notices as u64, Ordering::Relaxed);
            }
        }
    };
    let refreshing = async {
        tokio::time::sleep(offset).await;
        loop {
            refresh(&client, &base, &token, &counts).await;
            tokio::time::sleep(SAFETY_REFRESH).await;
        }
    };
    tokio::select! {
        () = reading => {}
        () = refreshing => {}
    }
}

/// One polling tab: the page's data every 2 s, the first one `offset` in.
async fn polling_tab(
    client: reqwest::Client,
    base: String,
    token: String,
    offset: Duration,
    counts: Arc<Counts>,
) {
    tokio::time::sleep(offset).await;
    let mut every = tokio::time::interval(POLL);
    loop {
        every.tick().await;
        refresh(&client, &base, &token, &counts).await;
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Tabs {
    None,
    Streaming,
    Polling,
}

/// One phase: its tabs started (and, for streams, open) before the clock starts,
/// then `seconds` of the server's CPU time, as a percentage of one core.
async fn phase(server: &Server, token: &str, args: &Args, tabs: Tabs) -> (f64, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let mut running = JoinSet::new();
    if tabs != Tabs::None {
        for tab in 0..args.tabs {
            // Each tab its own connections, as browsers' tabs share none here.
            let client = reqwest::Client::new();
            let spread = if tabs == Tabs::Streaming {
                SAFETY_REFRESH
            } else {
                POLL
            };
            let offset = spread.mul_f64(tab as f64 / args.tabs as f64);
            let (base, token, counts) = (server.base.clone(), token.to_string(), counts.clone());
            match tabs {
                Tabs::Streaming => {
                    running.spawn(streaming_tab(client, base, token, offset, counts))
                }
                _ => running.spawn(polling_tab(client, base, token, offset, counts)),
            };
        }
    }
    if tabs == Tabs::Streaming {
        let deadline = Instant::now() + Duration::from_secs(30);
        while counts.streams_open.load(Ordering::Relaxed) < args.tabs as u64 {
            assert!(Instant::now() < deadline, "the streams did not all open");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let pid = server.pid().to_string();
    let (cpu_before, started) = (cpu_time(&pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let used = cpu_time(&pid) - cpu_before;
    let percent = 100.0 * used.as_secs_f64() / started.elapsed().as_secs_f64();
    running.shutdown().await;
    // The server notices the closed streams before the next phase's clock starts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    (percent, counts)
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    sqlx::any::install_default_drivers();
    herald::channels::install_crypto_provider();
    let db = fresh_db(Engine::Sqlite, "live").await;
    let token = admin_token(&db.url);
    let server = serve(&db.url, &[], &[]).await;
    let client = reqwest::Client::new();
    for _ in 0..args.runs {
        testkit::create_run_via_api(&client, &server.base, &token, None).await;
    }
    // Startup's work (migrations, first upkeep passes) is over before any phase.
    tokio::time::sleep(Duration::from_secs(15)).await;
    println!(
        "\nSQLite, {} runs, {} tabs of the Runs page, {} s a phase\n",
        args.runs, args.tabs, args.seconds
    );
    println!(
        "| phase | server CPU (% of one core) | page refreshes/s | notices heard | RSS after |"
    );
    println!("| --- | --- | --- | --- | --- |");
    let pid = server.pid().to_string();
    let mut baseline = Vec::new();
    for (label, tabs) in [
        ("no tabs", Tabs::None),
        (
            "tabs streaming (safety refresh every 30 s)",
            Tabs::Streaming,
        ),
        ("tabs polling every 2 s (no stream)", Tabs::Polling),
        ("no tabs, again", Tabs::None),
    ] {
        let (percent, counts) = phase(&server, &token, &args, tabs).await;
        if tabs == Tabs::None {
            baseline.push(percent);
        }
        println!(
            "| {label} | {percent:.2} | {:.1} | {} | {:.0} MB |",
            counts.refreshes.load(Ordering::Relaxed) as f64 / args.seconds as f64,
            counts.notices.load(Ordering::Relaxed),
            rss_mb(&pid)
        );
    }
    println!(
        "\nbaseline (mean of the two idle phases): {:.2} % of one core",
        baseline.iter().sum::<f64>() / baseline.len() as f64
    );
    drop(server);
    db.drop_db().await;
}
