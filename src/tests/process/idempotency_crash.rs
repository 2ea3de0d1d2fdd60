//! A keyed create whose answer is lost to a SIGKILL (issue 21): the run and its
//! key committed, the process died before answering; the producer's retry with
//! the same key, to a new process, gets the original run and creates nothing.

use std::time::Duration;

use herald::store::Engine;
use serde_json::{json, Value};
use testkit::{api_token, wait_for, HeraldProcess, TestDb};
use vocab::Role;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_after_a_lost_answer_gets_the_original_run() {
    let db = TestDb::new(Engine::Sqlite).await;
    let token = api_token(&db.url, Role::Operator).await;
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("committed");
    let hook = format!("committed:{}", marker.display());
    let mut herald = HeraldProcess::spawn_with_env(
        &db.url,
        &[],
        &[(herald::service::runs::CREATE_PAUSE_ENV, &hook)],
    );
    let base = herald.ready().await;
    let body = json!({"type": "etl", "tenant": "lost-answer"});
    let post = |base: String| {
        let (token, body) = (token.clone(), body.clone());
        async move {
            reqwest::Client::new()
                .post(format!("{base}/api/v1/runs"))
                .bearer_auth(token)
                .header("Idempotency-Key", "lost-1")
                .json(&body)
                .timeout(Duration::from_secs(60))
                .send()
                .await
        }
    };
    let lost = tokio::spawn(post(base));
    wait_for(
        "the create to commit",
        Duration::from_secs(30),
        async || marker.exists(),
    )
    .await;
    herald.kill();
    assert!(lost.await.unwrap().is_err(), "the answer was lost");

    let store = db.store().await;
    let count = async || -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE tenant = 'lost-answer'")
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    assert_eq!(count().await, 1, "the run committed before the kill");

    let mut herald = HeraldProcess::spawn(&db.url, &[]);
    let base = herald.ready().await;
    let resp = post(base).await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    let run: Value = resp.json().await.unwrap();
    let stored: String = sqlx::query_scalar("SELECT id FROM runs WHERE tenant = 'lost-answer'")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(run["id"], stored.as_str(), "the original run");
    assert_eq!(count().await, 1, "nothing created twice");
    herald.kill();
    store.close().await;
}
