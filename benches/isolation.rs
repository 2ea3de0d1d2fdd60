//! Destination isolation as a speed figure (issue 10): how much of its solo rate a
//! healthy destination keeps beside one that hangs 30 s per request. The scene is
//! the isolation test's own (`testkit::isolation`): real `herald serve`
//! processes drain 2,000 events per destination committed before they start, to
//! real receivers on loopback; the healthy receiver answers in 20 ms through a
//! route capped at 8 in flight, so its solo rate is the receiver's, not the
//! machine's. Solo and contended rounds alternate `repeat` times (default 2) on
//! fresh databases, and the best rate of each is compared.
//!
//! `cargo bench --bench isolation -- [repeat N]` (docs/BENCHMARKS.md's figures:
//! `cargo bench --profile dev --bench isolation`, the debug build the test uses)
//! Figures go to stdout as one `ISOLATION …` line for docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use testkit::isolation::{completed, routes_file, seeded, spawn, EVENTS, HEALTHY_LATENCY};
use testkit::{wait_for, Receiver};

/// The healthy receiver's rate over the arrivals of this round (from its 200th
/// to its last, leaving out the start-up transient), in events per second.
fn rate_since(receiver: &Receiver, before: usize) -> f64 {
    let times: Vec<Instant> = receiver.requests()[before..].iter().map(|a| a.at).collect();
    let from = times.len() / 10;
    let span = times[times.len() - 1].duration_since(times[from]);
    (times.len() - 1 - from) as f64 / span.as_secs_f64()
}

/// Runs one round of the bench (the hanging receiver holds each request 30 s, far
/// past the 2 s send timeout); returns the healthy destination's rate. With
/// `heal`, the hanging receiver heals afterwards and the round waits for every
/// event; returns the time that took too.
async fn round(
    n: usize,
    healthy: &Receiver,
    sick: Option<&Receiver>,
    config: &tempfile::NamedTempFile,
    heal: bool,
) -> (f64, Option<Duration>) {
    let (db, store) = seeded(n, healthy, sick).await;
    let before = healthy.count();
    let (herald, _base) = spawn(&db, config, "2000", &[]).await;
    wait_for(
        "the healthy destination's events",
        Duration::from_secs(300),
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
            Duration::from_secs(300),
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

fn repeat() -> usize {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.as_slice() {
        [] => 2,
        [flag, n] if flag == "repeat" => n.parse().expect("repeat N: a number"),
        other => panic!("unknown arguments {other:?} (expected: repeat N)"),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    herald::channels::install_crypto_provider();
    let rounds = repeat();
    let healthy = Receiver::start().await;
    healthy.set_hold(HEALTHY_LATENCY);
    let sick = Receiver::start().await;
    sick.set_hold(Duration::from_secs(30));
    let config = routes_file(&healthy, &sick);

    let (mut solo, mut contended) = (Vec::new(), Vec::new());
    let mut drained = None;
    for n in 0..rounds {
        solo.push(round(2 * n, &healthy, None, &config, false).await.0);
        let last = n + 1 == rounds;
        let (rate, drain) = round(2 * n + 1, &healthy, Some(&sick), &config, last).await;
        contended.push(rate);
        drained = drain.or(drained);
    }
    let best = |rates: &[f64]| rates.iter().cloned().fold(0.0, f64::max);
    println!(
        "ISOLATION solo_rates_per_s={solo:.0?} contended_rates_per_s={contended:.0?} \
         best_solo={:.0} best_contended={:.0} ratio={:.3} sick_drain_after_heal_s={:.1}",
        best(&solo),
        best(&contended),
        best(&contended) / best(&solo),
        drained.unwrap_or_default().as_secs_f64()
    );
    healthy.stop();
    sick.stop();
}
