//! HTTP helpers: the API calls and reads tests share.

use std::time::{Duration, Instant};

use crate::server::TestServer;

/// The `Location` header of a response, or "" without one.
pub fn location(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// The Prometheus text of the server at `base` once it contains `wanted`, or the
/// last text read when `within` runs out (the caller asserts on it and prints it).
pub async fn metrics_with(base: &str, wanted: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let text = reqwest::get(format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains(wanted) || Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of the unlabelled metric `name` the server at `base` exports now,
/// read on a connection closed once answered (so the read never holds one of
/// the server's connection places afterwards).
pub async fn metric_value(base: &str, name: &str) -> Option<f64> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .ok()?;
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let line = text
        .lines()
        .find(|line| line.split(' ').next() == Some(name))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// Sends `request` and reads its JSON body (whatever the status).
pub async fn json_of(request: reqwest::RequestBuilder) -> serde_json::Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// Creates a run of type `etl` through the JSON API at `base`; returns its id.
pub async fn create_run_via_api(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    callback_url: Option<&str>,
) -> String {
    let run = json_of(
        client
            .post(format!("{base}/api/v1/runs"))
            .bearer_auth(token)
            .json(&serde_json::json!({"type": "etl", "tenant": "t", "callback_url": callback_url})),
    )
    .await;
    run["id"].as_str().expect("a created run").to_string()
}

/// Creates a run routed to `route` through the JSON API of `server` and moves it to
/// `succeeded` with `result` (asserting a `200`); returns the run's id.
pub async fn finish_routed_run(
    server: &TestServer,
    token: &str,
    route: &str,
    result: serde_json::Value,
) -> String {
    let client = reqwest::Client::new();
    let run = json_of(
        client
            .post(server.url("/api/v1/runs"))
            .bearer_auth(token)
            .json(&serde_json::json!({"type": "etl", "tenant": "acme", "routes": [route]})),
    )
    .await;
    let id = run["id"].as_str().expect("a created run").to_string();
    let done = client
        .post(server.url(&format!("/api/v1/runs/{id}/transitions")))
        .bearer_auth(token)
        .json(&serde_json::json!({"to": "succeeded", "result": result}))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), reqwest::StatusCode::OK, "finishing run {id}");
    id
}

/// What operators did to deliveries (retries, bulk retries, breaker closes) in
/// an audit page's JSON, newest first: the trail also holds the users and tokens
/// a test made, which are audited too.
pub fn delivery_actions(trail: &serde_json::Value) -> Vec<serde_json::Value> {
    trail["entries"]
        .as_array()
        .expect("an audit page")
        .iter()
        .filter(|entry| {
            matches!(
                entry["action"].as_str(),
                Some("retry" | "bulk_retry" | "close_breaker")
            )
        })
        .cloned()
        .collect()
}

/// Calls the console's server function `endpoint` (under `/console-api/`) as
/// `browser`, with form arguments: its status and JSON answer (`null` when none).
pub async fn call_server_fn(
    server: &TestServer,
    browser: &reqwest::Client,
    endpoint: &str,
    args: &[(&str, &str)],
) -> (reqwest::StatusCode, serde_json::Value) {
    let resp = browser
        .post(server.url(&format!("/console-api/{endpoint}")))
        .form(args)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(serde_json::Value::Null))
}
