//! A SQLite store locked by another session (a `sqlite3` shell, a backup holding
//! the write lock) is an outage, not a lost race (issue 19): `/readyz` says the
//! store is locked, an API write answers 503 `unavailable (locked)` — also when it
//! ran in a group commit — and both recover once the lock is released.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use sqlx::{Connection, Executor, SqliteConnection};
use testkit::{wait_for, TestServer};
use vocab::Role;

async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, String) {
    let resp = request.send().await.unwrap();
    (resp.status(), resp.text().await.unwrap())
}

async fn readyz(client: &reqwest::Client, server: &TestServer) -> (StatusCode, String) {
    let resp = client.get(server.url("/readyz")).send().await.unwrap();
    (resp.status(), resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_locked_by_another_session_is_reported_as_locked_until_released() {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let token = server.token(Role::Operator).await;
    let create = || {
        client
            .post(server.url("/api/v1/runs"))
            .bearer_auth(&token)
            .json(&json!({"type": "etl", "tenant": "acme"}))
    };
    assert_eq!(readyz(&client, &server).await.0, StatusCode::OK);

    // Another session takes the write lock and keeps it.
    let mut shell = SqliteConnection::connect(&server.db.url).await.unwrap();
    shell.execute("BEGIN IMMEDIATE").await.unwrap();

    // A write waits out the busy timeout, then is told why (not "lost a race").
    let (status, body) = answer(create()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("locked"), "{body}");
    wait_for(
        "/readyz to report the locked store",
        Duration::from_secs(60),
        async || {
            let (status, text) = readyz(&client, &server).await;
            status == StatusCode::SERVICE_UNAVAILABLE && text.contains("locked")
        },
    )
    .await;

    shell.execute("ROLLBACK").await.unwrap();
    wait_for("/readyz to recover", Duration::from_secs(60), async || {
        readyz(&client, &server).await.0 == StatusCode::OK
    })
    .await;
    let (status, body) = answer(create()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    shell.close().await.unwrap();
    server.stop().await;
}
