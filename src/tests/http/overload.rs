//! The producer API's bound on requests in flight (`api_max_requests_in_flight`):
//! past it a request is refused at once with 503 and `Retry-After`, nothing of
//! it recorded, while the requests inside the bound finish and the console's
//! probes and metrics stay reachable.

use std::time::Duration;

use herald::store::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vocab::Role;

use testkit::{json_of, metric_value, wait_for, TestDb, TestServer};

/// A server whose producer API serves at most `max` requests at once, its base
/// address and an operator's token.
async fn bounded_server(max: usize) -> (TestServer, String, String) {
    let server = TestServer::start_on(TestDb::new(Engine::Sqlite).await, |args| {
        args.api_max_requests_in_flight = Some(max);
    })
    .await;
    let base = server.url("");
    let token = server.token(Role::Operator).await;
    (server, base, token)
}

/// A `POST /api/v1/runs` sent up to half its body: the server has admitted it
/// and waits for the rest, holding its place.
async fn half_sent_create(server: &TestServer, token: &str, tenant: &str) -> (TcpStream, Vec<u8>) {
    let body = json!({"type": "etl", "tenant": tenant})
        .to_string()
        .into_bytes();
    let head = format!(
        "POST /api/v1/runs HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        server.addr,
        body.len()
    );
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let half = body.len() / 2;
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..half]).await.unwrap();
    stream.flush().await.unwrap();
    (stream, body[half..].to_vec())
}

/// Sends the rest of the body and reads the answer's status line.
async fn finish(mut stream: TcpStream, rest: Vec<u8>) -> String {
    stream.write_all(&rest).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer.lines().next().unwrap_or_default().to_string()
}

/// A whole `POST /api/v1/runs` for tenant `third`; its answer must come within
/// 10 s (a refusal is at once, never a wait for a place).
async fn create_third(server: &TestServer, token: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(server.url("/api/v1/runs"))
        .bearer_auth(token)
        .json(&json!({"type": "etl", "tenant": "third"}))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("an answer at once, not a wait for a place")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_past_the_bound_is_refused_at_once_and_nothing_of_it_is_recorded() {
    let (server, base, token) = bounded_server(2).await;
    let client = reqwest::Client::new();
    let in_flight = async || {
        metric_value(&base, "herald_http_api_requests_in_flight")
            .await
            .unwrap_or(-1.0)
    };
    assert_eq!(
        metric_value(&base, "herald_http_api_requests_in_flight_max").await,
        Some(2.0)
    );

    // Arrange: both places held by requests whose bodies are still coming.
    let first = half_sent_create(&server, &token, "first").await;
    let second = half_sent_create(&server, &token, "second").await;
    wait_for(
        "both creates admitted and waiting for their bodies",
        Duration::from_secs(10),
        async || in_flight().await == 2.0,
    )
    .await;

    // A third is refused at once (not queued behind the two), and says why and
    // when to come back.
    let refused = create_third(&server, &token).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "overloaded", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("api_max_requests_in_flight"), "{message}");
    assert!(
        message.contains("nothing of this request was recorded"),
        "{message}"
    );

    // Outside the bound: probes, metrics and reads of the console's pages.
    let health = client.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let sign_in_page = client.get(server.url("/login")).send().await.unwrap();
    assert_eq!(sign_in_page.status(), StatusCode::OK);
    assert_eq!(
        metric_value(&base, "herald_http_api_requests_refused_total").await,
        Some(1.0)
    );

    // The two admitted requests finish as if nothing had happened.
    assert!(finish(first.0, first.1).await.contains("201"));
    assert!(finish(second.0, second.1).await.contains("201"));
    wait_for("both places free", Duration::from_secs(10), async || {
        in_flight().await == 0.0
    })
    .await;

    // The refused one, retried, is recorded once; the refusal left nothing behind.
    let retried = create_third(&server, &token).await;
    assert_eq!(retried.status(), StatusCode::CREATED);
    let list = json_of(client.get(server.url("/api/v1/runs")).bearer_auth(&token)).await;
    let mut tenants: Vec<&str> = list["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|run| run["tenant"].as_str().unwrap())
        .collect();
    tenants.sort();
    assert_eq!(tenants, ["first", "second", "third"]);
    assert_eq!(
        metric_value(&base, "herald_http_api_requests_refused_total").await,
        Some(1.0)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_bound_at_zero_nothing_is_refused_and_requests_are_still_counted() {
    let (server, base, token) = bounded_server(0).await;
    let first = half_sent_create(&server, &token, "first").await;
    let second = half_sent_create(&server, &token, "second").await;
    wait_for(
        "both creates counted while they wait for their bodies",
        Duration::from_secs(10),
        async || metric_value(&base, "herald_http_api_requests_in_flight").await == Some(2.0),
    )
    .await;
    let third = create_third(&server, &token).await;
    assert_eq!(third.status(), StatusCode::CREATED);
    assert!(finish(first.0, first.1).await.contains("201"));
    assert!(finish(second.0, second.1).await.contains("201"));
    assert_eq!(
        metric_value(&base, "herald_http_api_requests_in_flight_max").await,
        Some(0.0)
    );
    assert_eq!(
        metric_value(&base, "herald_http_api_requests_refused_total").await,
        Some(0.0)
    );
    server.stop().await;
}
