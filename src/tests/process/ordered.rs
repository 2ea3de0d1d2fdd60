//! Ordered routes (issue 22, docs/ORDERING.md §7) as a real `herald serve` sends
//! them: a route with `ordered_by = "tenant"` delivers one tenant's runs one at a
//! time, in the order their transitions committed, through a receiver that
//! refuses at first and a SIGKILL of the sending process.

use std::time::Duration;

use herald::store::SqlStore;
use testkit::{statuses, wait_for, worker_flags, HeraldProcess, Receiver, TestDb};
use vocab::DeliveryStatus;

testkit::contract_tests!(ordered_webhooks_arrive_in_commit_order_through_refusals_and_a_sigkill,);

const RUNS: usize = 5;

fn ordered_route(receiver: &Receiver) -> tempfile::NamedTempFile {
    testkit::config_file(&format!(
        "[[routes]]\nname = \"ordered\"\nchannel = \"webhook\"\nurl = \"{}\"\nordered_by = \"tenant\"\n",
        receiver.url_for("ordered")
    ))
}

/// Ends `RUNS` runs of one tenant, routed to `ordered`, one transaction each, in
/// this process (no worker runs here); their ids in commit order.
async fn commit_runs(
    db: &TestDb,
    store: &SqlStore,
    config: &tempfile::NamedTempFile,
) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..RUNS {
        let (run, owed) = testkit::finish_routed_run_in_process(
            db,
            store,
            config,
            "acme",
            &["ordered"],
            serde_json::json!({ "n": i }),
        )
        .await;
        assert_eq!(owed, 1);
        ids.push(run);
    }
    ids
}

fn spawn(db: &TestDb, config: &tempfile::NamedTempFile) -> HeraldProcess {
    let config = config.path().display().to_string();
    let mut flags = worker_flags("30");
    flags.extend(["--max-attempts", "50", "--config", config.as_str()]);
    HeraldProcess::spawn(&db.url, &flags)
}

async fn ordered_webhooks_arrive_in_commit_order_through_refusals_and_a_sigkill(db: &TestDb) {
    let store = db.store().await;
    let receiver = Receiver::start().await;
    receiver.set_status(503);
    let config = ordered_route(&receiver);
    let runs = commit_runs(db, &store, &config).await;
    let event_of = |run: &str| format!("deliver_{run}_ordered");

    // The receiver refuses: the lane's head is tried again and again, and nothing
    // behind it is sent.
    let herald = spawn(db, &config);
    wait_for(
        "three refused attempts",
        Duration::from_secs(30),
        async || receiver.count() >= 3,
    )
    .await;
    assert!(
        receiver
            .arrivals()
            .iter()
            .all(|id| *id == event_of(&runs[0])),
        "only the head was sent: {:?}",
        receiver.arrivals()
    );
    herald.kill();

    // A new process after the SIGKILL, and a receiver that accepts: everything
    // arrives, in commit order.
    receiver.set_status(200);
    let herald = spawn(db, &config);
    wait_for(
        "every delivery completed",
        Duration::from_secs(60),
        async || {
            let mut done = Vec::new();
            for run in &runs {
                done.extend(statuses(&store, run).await.into_values());
            }
            done.len() == RUNS && done.iter().all(|s| *s == DeliveryStatus::Completed)
        },
    )
    .await;
    drop(herald);

    let order: Vec<usize> = receiver
        .arrivals()
        .iter()
        .map(|id| {
            runs.iter()
                .position(|run| event_of(run) == *id)
                .unwrap_or_else(|| panic!("unexpected arrival {id}"))
        })
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "arrivals in commit order (a run's repeats side by side): {order:?}"
    );
    let mut seen = order.clone();
    seen.dedup();
    assert_eq!(
        seen,
        (0..RUNS).collect::<Vec<_>>(),
        "each run's delivery arrived"
    );
    receiver.stop();
    store.close().await;
}
