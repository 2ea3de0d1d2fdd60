//! One console over two databases (issue 20, part 2): with the approvals database
//! apart, the Deliveries listing, its bulk preview and retry, and the Audit page
//! read and act on both stores. Each store's retries commit, audited, in that
//! store; the listing pages both in one order with one cursor.

use herald::outbox::model::{NewEvent, Source};
use herald::store::ports::OutboxStore;
use herald::store::{Engine, SqlStore};
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{enqueue, TestDb, TestServer};
use vocab::Role;

/// An event of `kind` from `source`, not due for an hour (no worker takes it).
fn shelved(id: &str, kind: &str, source: Source) -> NewEvent {
    NewEvent {
        event_id: id.into(),
        source,
        kind: kind.into(),
        parent_type: "run".into(),
        parent_id: "two-stores".into(),
        payload: "{}".into(),
        redeliverable: true,
        max_attempts: 6,
        delay_ms: 3_600_000,
        destination: None,
        trace_parent: None,
        lane: None,
    }
}

/// Enqueues `events` and shelves them as failed, `created_at` one second apart
/// from `oldest_ms` in the order given.
async fn failed(store: &SqlStore, events: &[NewEvent], oldest_ms: i64) {
    enqueue(store, events).await;
    for (i, event) in events.iter().enumerate() {
        let sql = store.engine().sql(
            "UPDATE outbox_events SET status = 'failed', failed_at = ?, created_at = ? \
             WHERE event_id = ?",
        );
        sqlx::query(&sql)
            .bind(oldest_ms + i as i64 * 1000)
            .bind(oldest_ms + i as i64 * 1000)
            .bind(&event.event_id)
            .execute(store.pool())
            .await
            .unwrap();
    }
}

async fn console(browser: &reqwest::Client, server: &TestServer, path: &str, body: Value) -> Value {
    let resp = browser
        .post(server.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    resp.json().await.unwrap()
}

/// A server function taking form arguments (none or a few): its JSON answer.
async fn form_call(
    browser: &reqwest::Client,
    server: &TestServer,
    path: &str,
    form: &[(&str, &str)],
) -> Value {
    let resp = browser
        .post(server.url(path))
        .form(form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    resp.json().await.unwrap()
}

async fn audit_rows(store: &SqlStore) -> i64 {
    // Retries and closes only: the users and tokens the test made are audited too.
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM outbox_audit WHERE action IN ('retry', 'bulk_retry', 'close_breaker')",
    )
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_jobs_and_postgres_approvals_are_one_console() {
    the_console_lists_retries_and_audits_both_stores(Engine::Sqlite, Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_jobs_and_mariadb_approvals_are_one_console() {
    the_console_lists_retries_and_audits_both_stores(Engine::Postgres, Engine::MySql).await;
}

/// The jobs store on `jobs`, the approvals database apart on `approvals`.
async fn the_console_lists_retries_and_audits_both_stores(jobs: Engine, approvals: Engine) {
    let approvals_db = TestDb::new(approvals).await;
    let approvals_url = approvals_db.url.clone();
    let server = TestServer::start_on(TestDb::new(jobs).await, move |args| {
        args.approvals_database_url = Some(approvals_url);
    })
    .await;
    let jobs = server.db.store().await;
    let approvals = approvals_db.store().await;
    // Interleaved in time: jobs at 0, 2, 4 s; approvals at 1, 3 s.
    let base = 1_700_000_000_000;
    for i in 0..3 {
        let id = format!("job-{i}");
        failed(
            &jobs,
            &[shelved(&id, "callback", Source::Jobs)],
            base + i * 2_000,
        )
        .await;
    }
    for i in 0..2 {
        let id = format!("approval-{i}");
        failed(
            &approvals,
            &[shelved(&id, "approval_prompt", Source::Approvals)],
            base + 1_000 + i * 2_000,
        )
        .await;
    }

    let operator = server.session(Role::Operator).await;
    // Two pages of three: newest first across both stores, one cursor.
    let first = console(
        &operator,
        &server,
        "/console-api/deliveries",
        json!({"query": {"status": "failed", "limit": 3}}),
    )
    .await;
    let ids = |page: &Value| -> Vec<String> {
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&first), ["job-2", "approval-1", "job-1"], "{first}");
    let cursor = first["next_cursor"]
        .as_str()
        .expect("a second page")
        .to_string();
    let second = console(
        &operator,
        &server,
        "/console-api/deliveries",
        json!({"query": {"status": "failed", "limit": 3, "after": cursor}}),
    )
    .await;
    assert_eq!(ids(&second), ["approval-0", "job-0"], "{second}");
    assert!(second["next_cursor"].is_null());

    // The preview counts both; the retry retries both, each in its own store with
    // its audit row there.
    let preview = console(
        &operator,
        &server,
        "/console-api/bulk-preview",
        json!({"query": {"status": "failed"}}),
    )
    .await;
    assert_eq!(preview["matching"], 5, "{preview}");
    let outcome = console(
        &operator,
        &server,
        "/console-api/bulk-retry",
        json!({"query": {"status": "failed"}, "allow_uncertain": false}),
    )
    .await;
    assert_eq!(outcome["retried"], 5, "{outcome}");
    for (store, ids) in [
        (&jobs, vec!["job-0", "job-1", "job-2"]),
        (&approvals, vec!["approval-0", "approval-1"]),
    ] {
        for id in ids {
            let event = store.get_event(id).await.unwrap().unwrap();
            assert_eq!(event.cycle, 2, "{id} retried where it lives");
        }
        assert_eq!(
            audit_rows(store).await,
            1,
            "one bulk-retry audit row in each store"
        );
    }
    // The Audit page reads both stores' rows.
    let audit = form_call(&operator, &server, "/console-api/audit", &[("after", "")]).await;
    assert_eq!(testkit::delivery_actions(&audit).len(), 2, "{audit}");
    jobs.close().await;
    approvals.close().await;
    server.stop().await;
    approvals_db.drop_db().await;
}

/// Breakers live where their senders run: the jobs store's and the approvals
/// database's both show on the panel (one row a destination, the more open one
/// where both stores hold it), and closing one closes it in every store that holds
/// it open, audited there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn breakers_of_both_stores_show_and_close_where_they_live() {
    use herald::store::ports::DestinationStore;
    let approvals_db = TestDb::new(Engine::Postgres).await;
    let approvals_url = approvals_db.url.clone();
    let server = TestServer::start_on(TestDb::new(Engine::Sqlite).await, move |args| {
        args.approvals_database_url = Some(approvals_url);
    })
    .await;
    let jobs = server.db.store().await;
    let approvals = approvals_db.store().await;
    let (callbacks, prompts, shared) = (
        "https://callbacks.example:443",
        "https://prompts.example:443",
        "https://both.example:443",
    );
    jobs.open_breaker(callbacks, "callback", 5, 600_000)
        .await
        .unwrap();
    approvals
        .open_breaker(prompts, "approvers", 5, 600_000)
        .await
        .unwrap();
    jobs.open_breaker(shared, "callback", 5, 600_000)
        .await
        .unwrap();
    jobs.close_breaker(shared, None).await.unwrap();
    approvals
        .open_breaker(shared, "approvers", 5, 600_000)
        .await
        .unwrap();

    let operator = server.session(Role::Operator).await;
    let listed = form_call(&operator, &server, "/console-api/breakers", &[]).await;
    let rows = listed["breakers"].as_array().unwrap();
    assert!(listed.get("unavailable").is_none(), "{listed}");
    let state_of = |destination: &str| {
        rows.iter()
            .filter(|r| r["destination"] == destination)
            .map(|r| r["state"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(state_of(callbacks), ["open"], "{listed}");
    assert_eq!(state_of(prompts), ["open"], "{listed}");
    assert_eq!(
        state_of(shared),
        ["open"],
        "one row, the open one: {listed}"
    );

    let closed = operator
        .post(server.url("/console-api/close-breaker"))
        .form(&[("destination", prompts)])
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), StatusCode::OK);
    let state_in = |store: &SqlStore, destination: &'static str| {
        let store = store.clone();
        async move {
            store
                .breakers()
                .await
                .unwrap()
                .into_iter()
                .find(|b| b.destination == destination)
                .map(|b| b.state)
        }
    };
    assert_eq!(
        state_in(&approvals, prompts).await.as_deref(),
        Some("closed")
    );
    assert_eq!(
        audit_rows(&approvals).await,
        1,
        "audited where it was closed"
    );
    assert_eq!(audit_rows(&jobs).await, 0);
    assert_eq!(
        state_in(&jobs, callbacks).await.as_deref(),
        Some("open"),
        "the other left alone"
    );
    jobs.close().await;
    approvals.close().await;
    server.stop().await;
    approvals_db.drop_db().await;
}
