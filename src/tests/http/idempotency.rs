//! Idempotency keys on `POST /api/v1/runs` (issue 21) on all three engines: a
//! repeat gets the original answer and creates nothing, concurrent twins create
//! one run, a key reused with another request is refused, and keys are per
//! principal.

use herald::store::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{api_token, api_token_named, TestDb, TestServer};
use vocab::Role;

async fn create(
    server: &TestServer,
    token: &str,
    key: &str,
    body: &Value,
) -> (StatusCode, Option<String>, Value) {
    let resp = reqwest::Client::new()
        .post(server.url("/api/v1/runs"))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    let replayed = resp
        .headers()
        .get("idempotent-replayed")
        .map(|v| v.to_str().unwrap().to_string());
    (resp.status(), replayed, resp.json().await.unwrap())
}

async fn runs_of(server: &TestServer, tenant: &str) -> i64 {
    let store = server.db.store().await;
    let n = sqlx::query_scalar(
        &store
            .engine()
            .sql("SELECT COUNT(*) FROM runs WHERE tenant = ?"),
    )
    .bind(tenant)
    .fetch_one(store.pool())
    .await
    .unwrap();
    store.close().await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_keyed_creates_happen_once() {
    keyed_creates_happen_once(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_keyed_creates_happen_once() {
    keyed_creates_happen_once(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_keyed_creates_happen_once() {
    keyed_creates_happen_once(Engine::MySql).await;
}

async fn keyed_creates_happen_once(engine: Engine) {
    let server = TestServer::start_on(TestDb::new(engine).await, |_| {}).await;
    let token = api_token(&server.db.url, Role::Operator).await;
    let body = json!({"type": "etl", "tenant": "once"});

    let (status, replayed, first) = create(&server, &token, "order-1", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(replayed, None);
    let (status, replayed, again) = create(&server, &token, "order-1", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_eq!(replayed.as_deref(), Some("true"));
    assert_eq!(again, first, "the original answer");
    assert_eq!(runs_of(&server, "once").await, 1);

    // The key names one request: another body is refused, naming the key.
    let (status, _, refused) = create(
        &server,
        &token,
        "order-1",
        &json!({"type": "etl", "tenant": "other"}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["field"], "Idempotency-Key");
    assert!(
        refused["message"].as_str().unwrap().contains("\"order-1\""),
        "{refused}"
    );
    assert_eq!(runs_of(&server, "other").await, 0);

    // Keys are per principal.
    let other = api_token_named(&server.db.url, "other-producer", Role::Operator).await;
    let (status, _, theirs) = create(&server, &other, "order-1", &body).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(theirs["id"], first["id"]);

    // Concurrent twins: one run, every answer its.
    let twins = json!({"type": "etl", "tenant": "twins"});
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (url, token, twins) = (server.url("/api/v1/runs"), token.clone(), twins.clone());
        tasks.spawn(async move {
            let resp = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .header("Idempotency-Key", "twins-1")
                .json(&twins)
                .send()
                .await
                .unwrap();
            (resp.status(), resp.json::<Value>().await.unwrap())
        });
    }
    let mut ids = std::collections::HashSet::new();
    while let Some(joined) = tasks.join_next().await {
        let (status, run) = joined.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{run}");
        ids.insert(run["id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(runs_of(&server, "twins").await, 1);

    // A record: created once, its repeat the original.
    let record = |key: &'static str| {
        reqwest::Client::new()
            .post(server.url("/api/v1/records/Account"))
            .bearer_auth(&token)
            .header("Idempotency-Key", key)
            .json(&json!({"fields": {"Name": "Acme once"}}))
            .send()
    };
    let first = record("account-1").await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    let again = record("account-1").await.unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<Value>().await.unwrap()["id"], first["id"]);
    let store = server.db.store().await;
    let accounts: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM records WHERE object = 'Account'")
        .fetch_one(store.pool())
        .await
        .unwrap();
    store.close().await;
    assert_eq!(accounts, 1);

    // The longest key there is (255 characters) keys like any other, on every
    // engine; one character more is refused.
    let longest = "k".repeat(255);
    let (status, _, long_first) = create(&server, &token, &longest, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{long_first}");
    let (status, replayed, long_again) = create(&server, &token, &longest, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{long_again}");
    assert_eq!(replayed.as_deref(), Some("true"));
    assert_eq!(long_again["id"], long_first["id"]);

    // A key that is not one.
    for bad in ["", "with space", &"k".repeat(256)] {
        let (status, _, answer) = create(&server, &token, bad, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}: {answer}");
        assert_eq!(answer["field"], "Idempotency-Key");
    }
    server.stop().await;
}

/// A submit whose answer was lost, sent again with its key, gets the original
/// approval (without the key it would be `409`: the record already has one); the
/// key commits in the approvals database, apart from the jobs store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_keyed_submit_to_an_approvals_database_apart_happens_once() {
    let receiver = testkit::Receiver::start().await;
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        testkit::run_approvals::config_text(&receiver, "env:UNUSED"),
    )
    .unwrap();
    let approvals_db = TestDb::new(Engine::MySql).await;
    let (path, approvals_url) = (config.path().to_path_buf(), approvals_db.url.clone());
    let server = TestServer::start_on(TestDb::new(Engine::Postgres).await, move |args| {
        args.config = Some(path);
        args.approvals_database_url = Some(approvals_url);
    })
    .await;
    let token = api_token(&server.db.url, Role::Operator).await;
    let client = reqwest::Client::new();
    let record: Value = client
        .post(server.url("/api/v1/records/Opportunity"))
        .bearer_auth(&token)
        .json(&json!({"fields": {"Name": "Big"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let submit = |key: Option<&str>, record_id: &str| {
        let mut request = client
            .post(server.url("/api/v1/approvals"))
            .bearer_auth(&token)
            .json(&json!({"definition_id": "deal", "record_id": record_id}));
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send()
    };
    let id = record["id"].as_str().unwrap();
    let first = submit(Some("submit-1"), id).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    let again = submit(Some("submit-1"), id).await.unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    let unkeyed = submit(None, id).await.unwrap();
    assert_eq!(
        unkeyed.status(),
        StatusCode::CONFLICT,
        "the record has its approval"
    );
    let reused = submit(Some("submit-1"), "another-record").await.unwrap();
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let approvals = approvals_db.store().await;
    let keys: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys")
        .fetch_one(approvals.pool())
        .await
        .unwrap();
    assert_eq!(keys, 1, "the key lives with the approval");
    approvals.close().await;
    receiver.stop();
    server.stop().await;
    approvals_db.drop_db().await;
}
