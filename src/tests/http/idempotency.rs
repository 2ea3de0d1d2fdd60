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
    keyed_post(server, token, "/api/v1/runs", key, body).await
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

/// A two-step record approval, both steps decided by an admin: where a repeated
/// approve without a key would decide the second step.
const TWO_STEP_CONFIG: &str = r#"
[[approval_definitions]]
id = "twostep"
object = "Opportunity"

[[approval_definitions.steps]]
name = "Manager"
approver = { role = "admin" }

[[approval_definitions.steps]]
name = "Director"
approver = { role = "admin" }
"#;

/// One keyed POST: its status, `Idempotent-Replayed` and body.
async fn keyed_post(
    server: &TestServer,
    token: &str,
    path: &str,
    key: &str,
    body: &Value,
) -> (StatusCode, Option<String>, Value) {
    let resp = reqwest::Client::new()
        .post(server.url(path))
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

/// `n` copies of one keyed POST at once: every answer.
async fn keyed_twins(
    server: &TestServer,
    token: &str,
    path: &str,
    key: &str,
    body: &Value,
    n: usize,
) -> Vec<(StatusCode, Value)> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (url, token, key, body) = (
            server.url(path),
            token.to_string(),
            key.to_string(),
            body.clone(),
        );
        tasks.spawn(async move {
            let resp = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .header("Idempotency-Key", key)
                .json(&body)
                .send()
                .await
                .unwrap();
            (resp.status(), resp.json::<Value>().await.unwrap())
        });
    }
    tasks.join_all().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_keyed_moves_and_decisions_happen_once() {
    keyed_moves_and_decisions_happen_once(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_keyed_moves_and_decisions_happen_once() {
    keyed_moves_and_decisions_happen_once(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_keyed_moves_and_decisions_happen_once() {
    keyed_moves_and_decisions_happen_once(Engine::MySql).await;
}

async fn keyed_moves_and_decisions_happen_once(engine: Engine) {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), TWO_STEP_CONFIG).unwrap();
    let path = config.path().to_path_buf();
    let server = TestServer::start_on(TestDb::new(engine).await, move |args| {
        args.config = Some(path);
    })
    .await;
    let operator = api_token(&server.db.url, Role::Operator).await;
    let admin = api_token(&server.db.url, Role::Admin).await;
    let client = reqwest::Client::new();
    let mut runs = Vec::new();
    // Each finishing run owes a callback (committed with its move; where it goes
    // does not matter here).
    for _ in 0..4 {
        let callback = Some("http://127.0.0.1:9/hook");
        runs.push(testkit::create_run_via_api(&client, &server.url(""), &operator, callback).await);
    }
    let run_of = |id: &str| {
        let (client, url, operator) = (
            client.clone(),
            server.url(&format!("/api/v1/runs/{id}")),
            operator.clone(),
        );
        async move { testkit::json_of(client.get(url).bearer_auth(operator)).await }
    };

    // A keyed batch: its repeat is the first answer — the finishing move's
    // notifications and `replayed: false` — not a fresh `replayed: true`.
    let batch = json!({"transitions": [
        {"run_id": runs[0], "to": "running"},
        {"run_id": runs[1], "to": "succeeded", "result": {"rows": 1}},
        {"run_id": "no-such-run", "to": "running"},
    ]});
    let path = "/api/v1/runs/transitions";
    let (status, replayed, first) = keyed_post(&server, &operator, path, "batch-1", &batch).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(replayed, None);
    let results = first["results"].as_array().unwrap();
    assert_eq!(
        results
            .iter()
            .map(|r| r["status"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [200, 200, 404]
    );
    assert_eq!(results[1]["notifications"].as_array().unwrap().len(), 1);
    let (status, replayed, again) = keyed_post(&server, &operator, path, "batch-1", &batch).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(replayed.as_deref(), Some("true"));
    assert_eq!(again, first, "the original answer");
    assert_eq!(run_of(&runs[1]).await["transition_seq"], 1, "moved once");
    let other = json!({"transitions": [{"run_id": runs[0], "to": "failed"}]});
    let (status, _, refused) = keyed_post(&server, &operator, path, "batch-1", &other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["field"], "Idempotency-Key");
    assert_eq!(run_of(&runs[0]).await["status"], "running");

    // Concurrent keyed twins of a batch: one move, one answer for all.
    let twins = json!({"transitions": [{"run_id": runs[2], "to": "succeeded"}]});
    let answers = keyed_twins(&server, &operator, path, "batch-twins", &twins, 8).await;
    for (status, answer) in &answers {
        assert_eq!(*status, StatusCode::OK, "{answer}");
        assert_eq!(answer, &answers[0].1);
    }
    assert_eq!(answers[0].1["results"][0]["replayed"], false);
    assert_eq!(run_of(&runs[2]).await["transition_seq"], 1);

    // One run's move: the same, through `/runs/{id}/transitions`.
    let path = format!("/api/v1/runs/{}/transitions", runs[3]);
    let finish = json!({"to": "succeeded", "result": {"rows": 2}});
    let (status, _, first) = keyed_post(&server, &operator, &path, "move-1", &finish).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["replayed"], false);
    let (_, replayed, again) = keyed_post(&server, &operator, &path, "move-1", &finish).await;
    assert_eq!((replayed.as_deref(), &again), (Some("true"), &first));
    // A refused move stores nothing: the key is still free afterwards.
    let (status, _, illegal) = keyed_post(
        &server,
        &operator,
        &path,
        "move-2",
        &json!({"to": "running"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{illegal}");
    let (status, replayed, _) = keyed_post(
        &server,
        &operator,
        &path,
        "move-2",
        &json!({"to": "succeeded", "result": {"rows": 2}}),
    )
    .await;
    assert_eq!((status, replayed), (StatusCode::OK, None));
    // An approval ask is idempotent by itself and takes no key: said so.
    let ask = json!({"to": "awaiting_approval", "approval": {"definition_id": "twostep"}});
    let (status, _, refused) = keyed_post(&server, &operator, &path, "ask-1", &ask).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["field"], "Idempotency-Key");

    // Decisions: a repeated keyed approve answers the first step's decision and
    // leaves the second step waiting (without the key it would decide it).
    let record = |name: &'static str| {
        let (client, url, operator) = (
            client.clone(),
            server.url("/api/v1/records/Opportunity"),
            operator.clone(),
        );
        async move {
            let made = testkit::json_of(
                client
                    .post(url)
                    .bearer_auth(operator)
                    .json(&json!({"fields": {"Name": name}})),
            )
            .await;
            made["id"].as_str().unwrap().to_string()
        }
    };
    let submit = |record_id: String| {
        let (client, url, operator) = (
            client.clone(),
            server.url("/api/v1/approvals"),
            operator.clone(),
        );
        async move {
            let approval = testkit::json_of(
                client
                    .post(url)
                    .bearer_auth(operator)
                    .json(&json!({"definition_id": "twostep", "record_id": record_id})),
            )
            .await;
            approval["id"].as_str().unwrap().to_string()
        }
    };
    let approval = submit(record("Big").await).await;
    let approve = format!("/api/v1/approvals/{approval}/approve");
    let (status, replayed, first) =
        keyed_post(&server, &admin, &approve, "approve-1", &json!({})).await;
    assert_eq!((status, replayed), (StatusCode::OK, None), "{first}");
    assert_eq!(
        (first["status"].as_str(), first["step"].as_i64()),
        (Some("pending"), Some(2))
    );
    let (status, replayed, again) =
        keyed_post(&server, &admin, &approve, "approve-1", &json!({})).await;
    assert_eq!(
        (status, replayed.as_deref()),
        (StatusCode::OK, Some("true"))
    );
    assert_eq!(again, first);
    let (status, _, reused) = keyed_post(
        &server,
        &admin,
        &format!("/api/v1/approvals/{approval}/reject"),
        "approve-1",
        &json!({}),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "another decision: {reused}"
    );
    let current = testkit::json_of(
        client
            .get(server.url(&format!("/api/v1/approvals/{approval}")))
            .bearer_auth(&admin),
    )
    .await;
    assert_eq!(
        (current["status"].as_str(), current["step"].as_i64()),
        (Some("pending"), Some(2))
    );

    // The console's decision form sends its key: a second click is the first answer.
    let browser = server.session(Role::Admin).await;
    let key = app::api::approvals::decision_key(&approval, 2, "approve");
    let mut rows = Vec::new();
    for _ in 0..2 {
        let resp = browser
            .post(server.url("/console-api/approval-action"))
            .form(&[
                ("id", approval.as_str()),
                ("action", "approve"),
                ("key", key.as_str()),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        rows.push(resp.json::<Value>().await.unwrap());
    }
    assert_eq!(rows[0], rows[1]);
    assert_eq!(rows[0]["status"], "approved");

    // Concurrent keyed twins of an approve: one decision.
    let approval = submit(record("Twins").await).await;
    let approve = format!("/api/v1/approvals/{approval}/approve");
    let answers = keyed_twins(&server, &admin, &approve, "approve-twins", &json!({}), 8).await;
    for (status, answer) in &answers {
        assert_eq!(*status, StatusCode::OK, "{answer}");
        assert_eq!(answer, &answers[0].1);
    }
    let current = testkit::json_of(
        client
            .get(server.url(&format!("/api/v1/approvals/{approval}")))
            .bearer_auth(&admin),
    )
    .await;
    assert_eq!(
        (current["status"].as_str(), current["step"].as_i64()),
        (Some("pending"), Some(2))
    );

    // A keyed recall by its submitter, repeated.
    let recall = format!("/api/v1/approvals/{approval}/recall");
    let (status, _, first) = keyed_post(&server, &operator, &recall, "recall-1", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["status"], "removed");
    let (status, replayed, again) =
        keyed_post(&server, &operator, &recall, "recall-1", &json!({})).await;
    assert_eq!(
        (status, replayed.as_deref(), &again),
        (StatusCode::OK, Some("true"), &first)
    );
    server.stop().await;
}
