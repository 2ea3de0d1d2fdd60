//! Crash safety under group commit (issue 9), with real processes: `herald serve`
//! on SQLite (where transitions share commits) is SIGKILLed while hundreds of
//! transitions are in flight. After a restart, every transition that was answered
//! `200` has its run state and its callback event durable, and the callback is
//! delivered; and no run is half-written: a run is `succeeded` exactly when its
//! callback event exists.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald::store::Engine;
use serde_json::{json, Value};
use testkit::worker_flags;
use testkit::{api_token, create_run_via_api, wait_for, HeraldProcess, Receiver, TestDb};
use vocab::Role;

const RUNS: usize = 1_500;
const SECRET: &str = "whsec_Z3JvdXAtY29tbWl0LWNyYXNoLXRlc3Qtc2VjcmV0";

fn spawn(db: &TestDb) -> HeraldProcess {
    HeraldProcess::spawn_with_env(
        &db.url,
        &worker_flags("2"),
        &[("HERALD_WEBHOOK_SECRET", SECRET)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_grouped_transitions_keeps_every_acknowledged_one_and_no_half_group() {
    herald::channels::install_crypto_provider();
    let db = TestDb::new(Engine::Sqlite).await;
    let receiver = Receiver::start().await;
    receiver.verify_with("hook", SECRET);
    let token = api_token(&db.url, Role::Operator).await;
    let client = reqwest::Client::new();
    let mut herald = spawn(&db);
    let base = herald.ready().await;

    let mut ids = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        ids.push(create_run_via_api(&client, &base, &token, Some(&receiver.url())).await);
    }

    // Every transition at once; the process dies once the first few are answered.
    let acknowledged = Arc::new(Mutex::new(HashSet::new()));
    let first_answers = Arc::new(tokio::sync::Semaphore::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for id in ids.clone() {
        let (client, token, base) = (client.clone(), token.clone(), base.clone());
        let (acknowledged, first_answers) = (acknowledged.clone(), first_answers.clone());
        tasks.spawn(async move {
            let sent = client
                .post(format!("{base}/api/v1/runs/{id}/transitions"))
                .bearer_auth(token)
                .json(&json!({"to": "succeeded", "result": {"rows": 7}}))
                .send()
                .await;
            if let Ok(resp) = sent {
                if resp.status() == 200 && resp.json::<Value>().await.is_ok() {
                    acknowledged.lock().unwrap().insert(id);
                    first_answers.add_permits(1);
                }
            }
        });
    }
    tokio::time::timeout(Duration::from_secs(60), first_answers.acquire_many(20))
        .await
        .expect("the first transitions are answered")
        .unwrap()
        .forget();
    herald.kill();
    while tasks.join_next().await.is_some() {}
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() < RUNS,
        "the kill came after every transition was answered; nothing was in flight"
    );

    // Straight after the crash, before anything else touches the file.
    let store = db.store().await;
    let succeeded: HashSet<String> =
        sqlx::query_scalar::<_, String>("SELECT id FROM runs WHERE status = 'succeeded'")
            .fetch_all(store.pool())
            .await
            .unwrap()
            .into_iter()
            .collect();
    let with_callback: HashSet<String> = sqlx::query_scalar::<_, String>(
        "SELECT parent_id FROM outbox_events WHERE kind = 'callback'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap()
    .into_iter()
    .collect();
    store.close().await;
    let lost: Vec<&String> = acknowledged.difference(&succeeded).collect();
    assert!(lost.is_empty(), "answered 200 but not durable: {lost:?}");
    assert_eq!(
        succeeded, with_callback,
        "a run is succeeded exactly when its callback event exists"
    );

    // After a restart every committed callback goes out, signed.
    let mut herald = spawn(&db);
    herald.ready().await;
    wait_for(
        "every committed callback delivered",
        Duration::from_secs(60),
        async || {
            let delivered: HashSet<String> = receiver
                .requests()
                .iter()
                .filter(|a| a.verified == Some(true))
                .filter_map(|a| a.body["run_id"].as_str().map(str::to_string))
                .collect();
            succeeded.is_subset(&delivered)
        },
    )
    .await;
    herald.kill();
    receiver.stop();
    db.drop_db().await;
}
