//! The overview (issue 23, item 1) on all three engines, through its server
//! function and its served HTML, as a reader: the figures match the deliveries
//! the test made (completed to one receiver, failed at another, one held in
//! flight as the backlog), by source and kind, with latency percentiles, the
//! failing destination named, designed states, and refusals.

use std::time::Duration;

use herald::store::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{secret_ref, wait_for, Receiver, TestDb, TestServer};
use vocab::Role;

const CALLBACK_SECRET: &str = "whsec_b3ZlcnZpZXctY2FsbGJhY2stc2VjcmV0LXRlc3Q=";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overview_on_sqlite() {
    overview(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overview_on_postgres() {
    overview(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overview_on_mysql() {
    overview(Engine::MySql).await;
}

/// The overview's server function as `browser`.
async fn load(server: &TestServer, browser: &reqwest::Client, query: Value) -> (StatusCode, Value) {
    let resp = browser
        .post(server.url("/console-api/overview"))
        .json(&json!({ "query": query }))
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn hour() -> Value {
    json!({"window": "hour", "source": null, "kind": null})
}

fn sum(view: &Value, field: &str) -> i64 {
    view["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[field].as_i64().unwrap())
        .sum()
}

/// A run with its callback to `callback`, moved to succeeded (which owes the
/// callback).
async fn finished_run(server: &TestServer, token: &str, callback: &str) {
    let client = reqwest::Client::new();
    let run: Value = client
        .post(server.url("/api/v1/runs"))
        .bearer_auth(token)
        .json(&json!({"type": "etl", "tenant": "acme", "callback_url": callback}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = run["id"].as_str().expect("a run");
    let done = client
        .post(server.url(&format!("/api/v1/runs/{id}/transitions")))
        .bearer_auth(token)
        .json(&json!({"to": "succeeded", "result": {"secret": "payload-not-shown"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), StatusCode::OK);
}

async fn overview(engine: Engine) {
    let healthy = Receiver::start().await;
    let refusing = Receiver::start().await;
    refusing.set_status(400);
    let server = TestServer::start_on(TestDb::new(engine).await, |args| {
        args.destination_allowlist = Some("127.0.0.0/8".into());
        args.callback_secret_ref = Some(secret_ref(CALLBACK_SECRET));
        args.worker_poll_interval_ms = Some(50);
        args.maintenance_interval_ms = Some(100);
        args.rollup_interval_ms = Some(100);
    })
    .await;
    let operator = server.token(Role::Operator).await;
    let reader = server.session(Role::Reader).await;

    // Nothing delivered yet: the figures are all zero, and say when they were counted.
    wait_for("the first recount", Duration::from_secs(10), async || {
        load(&server, &reader, hour()).await.1["as_of"].is_string()
    })
    .await;
    let (status, empty) = load(&server, &reader, hour()).await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_eq!(empty["points"].as_array().unwrap().len(), 60);
    assert_eq!(
        (empty["completed"].as_i64(), empty["failed"].as_i64()),
        (Some(0), Some(0))
    );
    assert!(empty["destinations"].as_array().unwrap().is_empty());

    // Five delivered, two refused (400: failed at once), one held in flight.
    for _ in 0..5 {
        finished_run(&server, &operator, &healthy.url()).await;
    }
    for _ in 0..2 {
        finished_run(&server, &operator, &refusing.url()).await;
    }
    wait_for(
        "the seven deliveries counted",
        Duration::from_secs(15),
        async || {
            let view = load(&server, &reader, hour()).await.1;
            view["completed"] == 5 && view["failed"] == 2
        },
    )
    .await;
    let (_, view) = load(&server, &reader, hour()).await;
    assert_eq!(sum(&view, "completed"), 5, "the bars add up to the total");
    assert_eq!(sum(&view, "failed"), 2);
    assert_eq!(view["uncertain"], 0);
    assert!(view["p50_ms"].as_i64().is_some() && view["p99_ms"].as_i64().is_some());
    assert!(view["p50_ms"].as_i64() <= view["p99_ms"].as_i64());
    assert_eq!(view["kinds"], json!(["callback"]));
    assert_eq!(view["sources"], json!(["jobs"]));
    let refusing_origin = refusing.url();
    let refusing_origin = refusing_origin.trim_end_matches('/');
    let failing = &view["destinations"][0];
    assert!(
        refusing_origin.starts_with(failing["destination"].as_str().unwrap()),
        "{failing} is {refusing_origin}"
    );
    assert_eq!(failing["failed"], 2);
    assert_eq!(
        view["destinations"].as_array().unwrap().len(),
        1,
        "the healthy one is not listed"
    );
    // No payload reaches the overview.
    assert!(!view.to_string().contains("payload-not-shown"));

    // Filters: the kind chosen counts; another kind counts nothing.
    let (_, callbacks) = load(
        &server,
        &reader,
        json!({"window": "day", "source": "jobs", "kind": "callback"}),
    )
    .await;
    assert_eq!(
        (
            callbacks["completed"].as_i64(),
            callbacks["failed"].as_i64()
        ),
        (Some(5), Some(2))
    );
    assert_eq!(
        callbacks["points"].as_array().unwrap().len(),
        96,
        "a day in quarter hours"
    );
    let (_, other) = load(
        &server,
        &reader,
        json!({"window": "hour", "source": null, "kind": "chat"}),
    )
    .await;
    assert_eq!(
        (other["completed"].as_i64(), other["failed"].as_i64()),
        (Some(0), Some(0))
    );

    // A delivery held by its receiver is the backlog until it completes.
    healthy.pause();
    finished_run(&server, &operator, &healthy.url()).await;
    wait_for(
        "the held delivery in the backlog",
        Duration::from_secs(15),
        async || load(&server, &reader, hour()).await.1["backlog"] == 1,
    )
    .await;
    healthy.resume();
    wait_for(
        "the held delivery counted as completed",
        Duration::from_secs(15),
        async || {
            let view = load(&server, &reader, hour()).await.1;
            view["completed"] == 6 && view["backlog"] == 0
        },
    )
    .await;

    // The page itself, rendered on the server for a reader.
    let page = reader.get(server.url("/overview")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("<title>Overview · Herald</title>"), "{html}");
    assert!(html.contains("data-testid=\"chart-deliveries\""));
    assert!(html.contains("Show as table"));

    // Refusals: a bad window, and nobody signed in.
    let (status, bad) = load(&server, &reader, json!({"window": "week"})).await;
    assert!(status.is_client_error(), "{status} {bad}");
    let (status, _) = load(&server, &server.browser(), hour()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let signed_out = server
        .browser()
        .get(server.url("/overview"))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);

    healthy.stop();
    refusing.stop();
    server.stop().await;
}
