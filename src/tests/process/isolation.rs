//! Destination isolation (issue 10): one receiver that hangs 30 s per request (far
//! past the delivery timeout) must not starve a healthy one. A real `herald serve`
//! drains events for both destinations, committed before it started, to real
//! receivers on loopback.
//!
//! The test asserts the property that keeps them apart, whatever the machine's
//! speed: the hanging destination never holds more requests than its in-flight cap
//! (so it cannot take the worker slots), the healthy one is served at its full
//! width while the hanging one holds its cap and gets every event, and once the
//! hanging one heals every event of both is delivered. (Its hang is a pause with a
//! send timeout longer than the test; timeouts opening and closing the breaker are
//! the `destinations` tests' and the bench's.) How much of its solo rate the healthy destination
//! keeps is a speed figure: `cargo bench --bench isolation` measures it (solo and
//! contended rounds alternating) for docs/BENCHMARKS.md, from this same scene
//! (`testkit::isolation`).

use std::time::Duration;

use testkit::isolation::{
    completed, routes_file, seeded, spawn, DEFAULT_CAP, EVENTS, HEALTHY_CAP, HEALTHY_LATENCY,
};
use testkit::{wait_for, Receiver};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_destination_does_not_starve_a_healthy_one() {
    herald::channels::install_crypto_provider();
    let healthy = Receiver::start().await;
    healthy.set_hold(HEALTHY_LATENCY);
    // The hanging receiver answers nothing until it heals, and Herald waits for it
    // (a send timeout longer than the test): its requests stay in flight.
    let sick = Receiver::start().await;
    sick.pause();
    let config = routes_file(&healthy, &sick);
    let (db, store) = seeded(0, &healthy, Some(&sick)).await;
    // Exactly as many worker slots as both caps together, and a breaker that never
    // opens: only the hanging destination's cap keeps a slot free for the healthy
    // one (uncapped, the hanging one would take all 24).
    let slots = (DEFAULT_CAP + HEALTHY_CAP).to_string();
    let (herald, _base) = spawn(
        &db,
        &config,
        "600000",
        &[
            "--worker-concurrency",
            &slots,
            "--breaker-failures",
            "1000000",
        ],
    )
    .await;

    wait_for(
        "the hanging destination to hold its cap of sends",
        Duration::from_secs(60),
        async || sick.held_at_gate().len() >= DEFAULT_CAP,
    )
    .await;
    // From here on the hanging destination holds its cap (it answers nothing).
    healthy.reset_max_in_flight();
    wait_for(
        "every healthy event delivered beside the hanging destination",
        Duration::from_secs(300),
        async || healthy.count() >= EVENTS,
    )
    .await;
    println!(
        "ISOLATION healthy_max_in_flight={} sick_max_in_flight={}",
        healthy.max_in_flight(),
        sick.max_in_flight(),
    );
    // Without the per-destination cap the hanging receiver would hold every
    // worker slot while the healthy one waited for a free one.
    assert_eq!(
        sick.max_in_flight(),
        DEFAULT_CAP,
        "the hanging destination held more requests at once than its cap"
    );
    assert_eq!(
        healthy.max_in_flight(),
        HEALTHY_CAP,
        "the healthy destination was served at its full width while the hanging one held its cap"
    );

    // Healed, the hanging destination's events all go.
    sick.resume();
    wait_for(
        "every event of both destinations delivered",
        Duration::from_secs(300),
        async || completed(&store).await == 2 * EVENTS as i64,
    )
    .await;
    let arrived = sick.arrivals_per_event();
    assert_eq!(
        arrived.len(),
        EVENTS,
        "every hanging-destination event arrived"
    );
    assert!(arrived.values().all(|n| *n == 1), "none sent twice");
    drop(herald);
    store.close().await;
    db.drop_db().await;
    healthy.stop();
    sick.stop();
}
