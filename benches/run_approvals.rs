//! Run-approval latency (issue 20, DESIGN §9) through a release `herald serve`
//! with the approvals database apart from the jobs store: a run's
//! `awaiting_approval` transition (answered) → its prompt at a real receiver
//! (the approval_request hop, then the prompt), and the approver's decision
//! (answered) → the signed `run.approved` at the receiver (the run_continuation
//! hop, then the callback). One run at a time, production poll and backoff
//! settings (the hops wake their workers on commit).
//!
//! `cargo bench --bench run_approvals -- [sqlite|postgres] [N]` (default: both,
//! N = 200). PostgreSQL comes from HERALD_BENCH_POSTGRES_URL.

use std::time::{Duration, Instant};

use herald::store::Engine;
use serde_json::json;
use testkit::bench::{admin_token, fresh_db, percentile, serve};
use testkit::run_approvals::{definitions_text, Producer, CALLBACK_SECRET, PROMPT_SECRET};
use testkit::{Receiver, SecretFile};

/// When the webhook `event_id` arrived at `receiver` (waited for, 10 s at most).
async fn arrival(receiver: &Receiver, event_id: &str) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(a) = receiver
            .requests()
            .iter()
            .rev()
            .find(|a| a.event_id == event_id)
        {
            return a.at;
        }
        assert!(Instant::now() < deadline, "{event_id} never arrived");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "  {what}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} runs)",
        ms(percentile(&samples, 0.50)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap()),
        samples.len()
    );
}

async fn run(engine: Engine, n: usize) {
    let (jobs, approvals) = (
        fresh_db(engine, "ra_jobs").await,
        fresh_db(engine, "ra_approvals").await,
    );
    let receiver = Receiver::start().await;
    let (prompt_secret, callback_secret) = (
        SecretFile::new(PROMPT_SECRET),
        SecretFile::new(CALLBACK_SECRET),
    );
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        format!(
            "destination_allowlist = \"127.0.0.0/8\"\ncallback_secret_ref = \"{}\"\napprovals_database_url = \"{}\"\n{}",
            callback_secret.reference(),
            approvals.url,
            definitions_text(&receiver, &prompt_secret.reference())
        ),
    )
    .unwrap();
    let server = serve(
        &jobs.url,
        &["--config", config.path().to_str().unwrap()],
        &[],
    )
    .await;
    let token = admin_token(&jobs.url);
    let producer = Producer::new(&server.base, &token);
    let callback = receiver.url_for("callbacks");
    let (mut to_prompt, mut to_approved) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let run = producer.running_run("payout", &callback, &[]).await;
        let asked = Instant::now();
        let (status, moved) = producer.ask_approval(&run, "payout").await;
        assert!(status.is_success(), "{moved}");
        let approval = moved["run"]["approval_id"].as_str().unwrap().to_string();
        let seq = moved["run"]["transition_seq"].as_i64().unwrap();
        to_prompt.push(arrival(&receiver, &format!("approval_{approval}")).await - asked);
        let decided = Instant::now();
        let (status, answer) = producer.decide(&token, &approval, "approve").await;
        assert!(status.is_success(), "{answer}");
        let approved = format!("callback_{run}_approved_{}", seq + 1);
        to_approved.push(arrival(&receiver, &approved).await - decided);
        let (status, _) = producer.transition(&run, json!({"to": "succeeded"})).await;
        assert!(status.is_success());
    }
    println!("{} (two databases):", engine.name());
    report("awaiting_approval → prompt at the receiver", to_prompt);
    report("decision → run.approved at the receiver", to_approved);
    drop(server);
    receiver.stop();
    jobs.drop_db().await;
    approvals.drop_db().await;
}

#[tokio::main]
async fn main() {
    herald::channels::install_crypto_provider();
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n = args
        .iter()
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(200);
    let engines: Vec<Engine> = match args.iter().find(|a| a.parse::<usize>().is_err()) {
        Some(e) if e == "sqlite" => vec![Engine::Sqlite],
        Some(e) if e == "postgres" => vec![Engine::Postgres],
        _ => vec![Engine::Sqlite, Engine::Postgres],
    };
    for engine in engines {
        run(engine, n).await;
    }
}
