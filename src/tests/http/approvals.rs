//! The approvals source end to end over HTTP: a real server on loopback with
//! definitions from its config file, a real receiver for approval prompts, and the
//! real replay worker.

use std::time::{Duration, Instant};

use herald::store::ports::OutboxStore;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::Executor;
use testkit::{api_token, metrics_with, wait_for, Receiver, TestServer};
use vocab::Role;

fn config(receiver: &Receiver) -> tempfile::NamedTempFile {
    testkit::deal_approval_config(
        &receiver.url_for("approvals"),
        r#"
worker_poll_interval_ms = 50
maintenance_interval_ms = 100
initial_backoff_ms = 600000
max_backoff_ms = 600000
replay_poll_interval_ms = 50
replay_initial_backoff_ms = 50
replay_max_backoff_ms = 100
"#,
        r#"
[[approval_definitions.actions.recall]]
type = "FieldUpdate"
id = "acct"
name = "Account back to prospect"
field_path = "Account.Status"
value = "Prospect"

[[approval_definitions.actions.recall]]
type = "Alert"
id = "tell"
route = "approvers"
"#,
    )
}

struct Api {
    base: String,
    client: reqwest::Client,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        token: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let resp = request.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::POST, token, path, Some(body))
            .await
    }

    async fn get(&self, token: &str, path: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::GET, token, path, None).await
    }

    /// Creates a record of `object` with `fields` (201 expected) and returns its id.
    async fn create(&self, token: &str, object: &str, fields: Value) -> String {
        let (status, record) = self
            .post(
                token,
                &format!("/api/v1/records/{object}"),
                json!({ "fields": fields }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{record}");
        record["id"].as_str().unwrap().to_string()
    }

    /// Submits the record `deal` for the `deal` approval (201 expected) and returns
    /// the approval's id.
    async fn submit(&self, token: &str, deal: &str) -> String {
        let (status, approval) = self
            .post(
                token,
                "/api/v1/approvals",
                json!({"definition_id": "deal", "record_id": deal}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{approval}");
        approval["id"].as_str().unwrap().to_string()
    }

    async fn event_status(&self, token: &str, approval: &str, event_id: &str) -> Value {
        let (_, detail) = self
            .get(token, &format!("/api/v1/approvals/{approval}"))
            .await;
        detail["events"]
            .as_array()
            .and_then(|events| events.iter().find(|e| e["event_id"] == event_id))
            .map(|e| e["status"].clone())
            .unwrap_or(Value::Null)
    }

    async fn wait_event(&self, token: &str, approval: &str, event_id: &str, status: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let now = self.event_status(token, approval, event_id).await;
            if now == status {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{event_id} stayed {now}, not {status}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn start(receiver: &Receiver) -> (TestServer, tempfile::NamedTempFile, Api) {
    let file = config(receiver);
    let path = file.path().to_path_buf();
    let server = TestServer::start_with(move |args| {
        args.config = Some(path);
        args.destination_allowlist = Some("127.0.0.0/8".into());
    })
    .await;
    let api = Api {
        base: server.url(""),
        client: reqwest::Client::new(),
    };
    (server, file, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn submit_prompts_the_approver_then_recall_replays_the_field_update() {
    let receiver = Receiver::start().await;
    let (server, _file, api) = start(&receiver).await;
    let operator = api_token(&server.db.url, Role::Operator).await;

    let account = api
        .create(
            &operator,
            "Account",
            json!({"Name": "Acme", "Status": "Customer"}),
        )
        .await;
    let deal = api
        .create(
            &operator,
            "Opportunity",
            json!({"Name": "Big", "AccountId": account}),
        )
        .await;

    let (status, approval) = api
        .post(
            &operator,
            "/api/v1/approvals",
            json!({"definition_id": "deal", "record_id": deal}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{approval}");
    let id = approval["id"].as_str().unwrap().to_string();
    let prompt = format!("approval_{id}");
    assert_eq!(approval["committed_events"], json!([prompt]));
    api.wait_event(&operator, &id, &prompt, "completed").await;
    let arrived = receiver.requests();
    assert_eq!(arrived.len(), 1);
    assert_eq!(arrived[0].event_id, prompt);
    assert_eq!(arrived[0].body["event"], "approval.requested");
    assert_eq!(arrived[0].body["record_id"], deal.as_str());

    let (status, recalled) = api
        .post(
            &operator,
            &format!("/api/v1/approvals/{id}/recall"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{recalled}");
    assert_eq!(recalled["status"], "removed");
    let replay = format!("recall_{id}_{}", recalled["transition_seq"]);
    // Answered before the FieldUpdates are written (docs/ORDERING.md §5).
    assert_eq!(
        recalled["field_updates"],
        json!({"event_id": replay, "state": "applying"})
    );
    api.wait_event(&operator, &id, &replay, "completed").await;
    let (_, detail) = api.get(&operator, &format!("/api/v1/approvals/{id}")).await;
    let replayed = detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_id"] == replay.as_str())
        .unwrap();
    assert_eq!(replayed["field_updates"], "applied", "{detail}");
    let (_, account_now) = api
        .get(&operator, &format!("/api/v1/records/Account/{account}"))
        .await;
    assert_eq!(account_now["fields"]["Status"], "Prospect");
    assert_eq!(account_now["version"], 2);
    // The recall's alert went to its route as a durable event.
    let alert = format!("alert_{id}_recall_{}_tell", recalled["transition_seq"]);
    api.wait_event(&operator, &id, &alert, "completed").await;

    let (status, shelf) = api
        .get(&operator, "/admin/api/approval-action-replay")
        .await;
    assert_eq!(status, StatusCode::OK, "{shelf}");
    assert_eq!(
        shelf["counts"],
        json!([{"status": "completed", "count": 1}])
    );
    assert_eq!(shelf["failed"], json!([]));

    // Metrics: fixed sources, kinds partitioned, replay counters.
    let wanted =
        "herald_outbox_events{kind=\"field_update\",source=\"approvals\",status=\"completed\"} 1";
    let metrics = metrics_with(&server.url(""), wanted, Duration::from_secs(5)).await;
    assert!(metrics.contains(wanted), "{metrics}");
    assert!(metrics.contains(
        "herald_approval_action_replay_attempts_total{lifecycle_event=\"recall\",outcome=\"completed\"} 1"
    ), "{metrics}");
    assert!(metrics.contains("herald_outbox_available{source=\"approvals\"} 1"));
    assert!(
        !metrics.contains("kind=\"callback\",source=\"approvals\""),
        "{metrics}"
    );
    assert!(!metrics.contains("kind=\"field_update\",source=\"jobs\""));
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decided_approvals_undelivered_prompt_ends_skipped_and_is_never_resent() {
    let receiver = Receiver::start().await;
    // The first prompt attempt fails: it waits out its backoff (ten minutes, so
    // it is still waiting whenever the approval comes), undelivered.
    receiver.script(&[(503, None)]);
    let (server, _file, api) = start(&receiver).await;
    let operator = api_token(&server.db.url, Role::Operator).await;
    let admin = api_token(&server.db.url, Role::Admin).await;
    let deal = api
        .create(&operator, "Opportunity", json!({"Name": "Small"}))
        .await;
    let id = api.submit(&operator, &deal).await;
    let prompt = format!("approval_{id}");
    wait_for(
        "the prompt to be attempted",
        Duration::from_secs(10),
        async || !receiver.answered().is_empty(),
    )
    .await;
    api.wait_event(&operator, &id, &prompt, "pending").await;

    // The operator is not the step's approver; the admin is.
    let (status, refused) = api
        .post(
            &operator,
            &format!("/api/v1/approvals/{id}/approve"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused["message"]
        .as_str()
        .unwrap()
        .contains("decided by role admin"));
    let (status, approved) = api
        .post(
            &admin,
            &format!("/api/v1/approvals/{id}/approve"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["status"], "approved");
    assert_eq!(api.event_status(&operator, &id, &prompt).await, "skipped");
    // Were a skipped event claimable, it would go now: make it due, then give the
    // worker (polling every 50 ms) twenty polls.
    let store = server.db.store().await;
    store
        .pool()
        .execute(
            format!("UPDATE outbox_events SET next_attempt_at = 0 WHERE event_id = '{prompt}'")
                .as_str(),
        )
        .await
        .unwrap();
    store.close().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(receiver.arrivals().len(), 1, "never sent again");
    assert_eq!(api.event_status(&operator, &id, &prompt).await, "skipped");
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_requests_and_forbidden_calls_are_answered_with_messages_that_name_them() {
    let receiver = Receiver::start().await;
    let (server, _file, api) = start(&receiver).await;
    let reader = api_token(&server.db.url, Role::Reader).await;
    let operator = api_token(&server.db.url, Role::Operator).await;

    let (status, body) = api
        .post(
            &operator,
            "/api/v1/records/_System_ApprovalActionOutbox",
            json!({"fields": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["message"].as_str().unwrap().contains("system object"));
    let (status, body) = api
        .get(&operator, "/api/v1/records/_System_ApprovalActionOutbox")
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body["message"].as_str().unwrap().contains("data:read"));
    let (status, body) = api
        .post(&operator, "/api/v1/records/Bad-Name", json!({"fields": {}}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["field"], "object");
    let (status, body) = api
        .post(
            &operator,
            "/api/v1/records/Account",
            json!({"fields": {"bad name": 1}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["field"], "fields");
    let (status, _) = api
        .post(&operator, "/api/v1/records/Account", json!({"fieldz": {}}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, deal) = api
        .post(
            &operator,
            "/api/v1/records/Opportunity",
            json!({"fields": {"Name": "x"}}),
        )
        .await;
    let (status, body) = api
        .post(
            &reader,
            "/api/v1/approvals",
            json!({"definition_id": "deal", "record_id": deal["id"]}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("approvals:submit"));
    let (status, body) = api
        .post(
            &operator,
            "/api/v1/approvals",
            json!({"definition_id": "deal", "record_id": "nope"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["field"], "record_id");
    let (status, body) = api
        .post(
            &operator,
            "/api/v1/approval-definitions",
            json!({"id": "x", "object": "A", "steps": []}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let admin = api_token(&server.db.url, Role::Admin).await;
    let (status, body) = api
        .post(
            &admin,
            "/api/v1/approval-definitions",
            json!({"id": "x", "object": "A", "steps": []}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["field"], "steps");
    let (status, body) = api
        .post(
            &admin,
            "/api/v1/approval-definitions",
            json!({"id": "x", "object": "A",
            "steps": [{"name": "s", "approver": {"user": "bob"}}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["version"], 1);
    let (status, list) = api.get(&reader, "/api/v1/approval-definitions").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 2);
    let (status, _) = api
        .post(&operator, "/api/v1/approvals/unknown/recall", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The console's server functions answer with the same statuses.
    let reader_browser = server.session(Role::Reader).await;
    let operator_browser = server.session(Role::Operator).await;
    let approval = api.submit(&operator, deal["id"].as_str().unwrap()).await;
    let forged = reader_browser
        .post(server.url("/console-api/approval-action"))
        .form(&[
            ("id", approval.as_str()),
            ("action", "approve"),
            ("key", "forged-1"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let unknown = operator_browser
        .post(server.url("/console-api/approval"))
        .form(&[("id", "unknown")])
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let listed = operator_browser
        .post(server.url("/console-api/approvals"))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), StatusCode::OK);
    assert!(listed.text().await.unwrap().contains(&approval));
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_gauge_of_every_fixed_source_and_kind_exists_from_start_up() {
    let server = TestServer::start().await;
    let metrics = metrics_with(
        &server.url(""),
        "herald_outbox_available{source=\"approvals\"} 1",
        Duration::from_secs(10),
    )
    .await;
    for (source, kinds) in [
        ("jobs", &["callback", "delivery", "dead_letter"][..]),
        (
            "approvals",
            &["approval_prompt", "alert", "field_update"][..],
        ),
    ] {
        assert!(
            metrics.contains(&format!("herald_outbox_available{{source=\"{source}\"}} 1")),
            "{metrics}"
        );
        for kind in kinds {
            for gauge in [
                "herald_outbox_oldest_pending_age_seconds",
                "herald_outbox_expired_leases",
            ] {
                let series = format!("{gauge}{{kind=\"{kind}\",source=\"{source}\"}} 0");
                assert!(metrics.contains(&series), "missing {series}\n{metrics}");
            }
            let pending = format!(
                "herald_outbox_events{{kind=\"{kind}\",source=\"{source}\",status=\"pending\"}} 0"
            );
            assert!(metrics.contains(&pending), "missing {pending}");
        }
    }
    assert!(!metrics.contains("kind=\"callback\",source=\"approvals\""));
    assert!(!metrics.contains("kind=\"field_update\",source=\"jobs\""));
    server.stop().await;
}

/// Approvals, records and their outbox in one database, the jobs store in another.
async fn two_databases(jobs: herald::store::Engine, approvals: herald::store::Engine) {
    let receiver = Receiver::start().await;
    let approvals_db = testkit::TestDb::new(approvals).await;
    let file = config(&receiver);
    let path = file.path().to_path_buf();
    let approvals_url = approvals_db.url.clone();
    let server = TestServer::start_on(testkit::TestDb::new(jobs).await, move |args| {
        args.config = Some(path);
        args.destination_allowlist = Some("127.0.0.0/8".into());
        args.approvals_database_url = Some(approvals_url);
    })
    .await;
    let api = Api {
        base: server.url(""),
        client: reqwest::Client::new(),
    };
    let operator = api_token(&server.db.url, Role::Operator).await;
    let account = api
        .create(&operator, "Account", json!({"Status": "Customer"}))
        .await;
    let deal = api
        .create(&operator, "Opportunity", json!({"AccountId": account}))
        .await;
    let id = api.submit(&operator, &deal).await;
    api.wait_event(&operator, &id, &format!("approval_{id}"), "completed")
        .await;
    let (_, recalled) = api
        .post(
            &operator,
            &format!("/api/v1/approvals/{id}/recall"),
            json!({}),
        )
        .await;
    let replay = format!("recall_{id}_{}", recalled["transition_seq"]);
    api.wait_event(&operator, &id, &replay, "completed").await;
    let (_, account_now) = api
        .get(&operator, &format!("/api/v1/records/Account/{account}"))
        .await;
    assert_eq!(account_now["fields"]["Status"], "Prospect");

    let count = |store: herald::store::SqlStore, table: &'static str| async move {
        let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(store.pool())
            .await
            .unwrap();
        store.close().await;
        n
    };
    for table in [
        "records",
        "approval_instances",
        "approval_work_items",
        "outbox_events",
    ] {
        assert_eq!(
            count(server.db.store().await, table).await,
            0,
            "{table} in the jobs store"
        );
    }
    assert_eq!(count(approvals_db.store().await, "records").await, 2);
    assert_eq!(
        count(approvals_db.store().await, "approval_instances").await,
        1
    );
    // The prompt, the replay and the recall's alert.
    assert_eq!(count(approvals_db.store().await, "outbox_events").await, 3);
    receiver.stop();
    server.stop().await;
    approvals_db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approvals_in_postgres_with_jobs_in_sqlite() {
    two_databases(
        herald::store::Engine::Sqlite,
        herald::store::Engine::Postgres,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approvals_in_sqlite_with_jobs_in_postgres() {
    two_databases(
        herald::store::Engine::Postgres,
        herald::store::Engine::Sqlite,
    )
    .await;
}

/// A replay on the failed shelf: a reader's forged `replay-retry` is refused (403)
/// and leaves it there at its cycle; an admin's same call retries it (issue 19).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_s_forged_replay_retry_is_refused_and_the_replay_stays_shelved() {
    let receiver = Receiver::start().await;
    let (server, _config, api) = start(&receiver).await;
    let operator = server.token(Role::Operator).await;
    let account = api
        .create(&operator, "Account", json!({"Status": "Customer"}))
        .await;
    let deal = api
        .create(&operator, "Opportunity", json!({"AccountId": account}))
        .await;
    let id = api.submit(&operator, &deal).await;
    let (_, recalled) = api
        .post(
            &operator,
            &format!("/api/v1/approvals/{id}/recall"),
            json!({}),
        )
        .await;
    let replay = format!("recall_{id}_{}", recalled["transition_seq"]);
    api.wait_event(&operator, &id, &replay, "completed").await;
    // Shelved as the replay worker shelves an exhausted one (the failure itself is
    // the contract tests'): failed, at cycle 1.
    let store = server.db.store().await;
    sqlx::query(&store.engine().sql(
        "UPDATE outbox_events SET status = 'failed', failed_at = 1, completed_at = NULL \
         WHERE event_id = ?",
    ))
    .bind(&replay)
    .execute(store.pool())
    .await
    .unwrap();

    let form = [("event_id", replay.as_str()), ("expected_cycle", "1")];
    let forged = server
        .session(Role::Reader)
        .await
        .post(server.url("/console-api/replay-retry"))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let shelved = store.get_event(&replay).await.unwrap().unwrap();
    assert_eq!(
        (shelved.status, shelved.cycle),
        (vocab::DeliveryStatus::Failed, 1),
        "still shelved at its cycle"
    );
    let retried = server
        .session(Role::Admin)
        .await
        .post(server.url("/console-api/replay-retry"))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(
        retried.status(),
        StatusCode::OK,
        "{:?}",
        retried.text().await
    );
    assert_eq!(store.get_event(&replay).await.unwrap().unwrap().cycle, 2);
    store.close().await;
    receiver.stop();
    server.stop().await;
}
