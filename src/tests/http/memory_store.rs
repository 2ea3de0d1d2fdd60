//! The ephemeral `memory://` store against a real server on loopback: runs work,
//! a terminal transition's callback is sent once, best effort, to a real receiver,
//! and everything that needs the durable outbox answers `capability_unavailable`
//! (HTTP 501) — in the JSON APIs and as a designed notice in the console — while
//! `/metrics` reports the outbox unavailable and `/readyz` stays ready.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{json_of, secret_ref, Receiver, TestDb, TestServer, ADMIN_PASSWORD};

const CALLBACK_SECRET: &str = "whsec_bWVtb3J5LXN0b3JlLWNhbGxiYWNrLXNlY3JldA==";

async fn start_memory(receiver: &Receiver) -> TestServer {
    receiver.verify_with("hook", CALLBACK_SECRET);
    TestServer::start_on(TestDb::memory(), |args| {
        args.destination_allowlist = Some("127.0.0.0/8".into());
        args.callback_secret_ref = Some(secret_ref(CALLBACK_SECRET));
        // Were any worker or retry wired, it would show within the test's waits.
        args.worker_poll_interval_ms = Some(50);
        args.initial_backoff_ms = Some(50);
        args.max_backoff_ms = Some(100);
        args.maintenance_interval_ms = Some(100);
    })
    .await
}

/// The first admin, signed in (the only way in: a token created by another
/// process would land in another memory).
async fn admin(server: &TestServer) -> reqwest::Client {
    let browser = server.browser();
    let resp = browser
        .post(server.url("/auth/login"))
        .form(&[("username", "admin"), ("password", ADMIN_PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    browser
}

async fn create_run(server: &TestServer, client: &reqwest::Client, callback: &str) -> String {
    let resp = client
        .post(server.url("/api/v1/runs"))
        .json(&json!({ "type": "etl", "tenant": "acme", "callback_url": callback }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let run: Value = resp.json().await.unwrap();
    run["id"].as_str().unwrap().to_string()
}

async fn transition(
    server: &TestServer,
    client: &reqwest::Client,
    id: &str,
    to: &str,
) -> reqwest::Response {
    client
        .post(server.url(&format!("/api/v1/runs/{id}/transitions")))
        .json(&json!({ "to": to, "result": { "rows": 3 } }))
        .send()
        .await
        .unwrap()
}

/// Waits until the receiver has seen `n` requests for run `id` (or 5 s pass).
async fn arrivals_for(receiver: &Receiver, id: &str, n: usize) -> usize {
    for _ in 0..100 {
        let seen = count_for(receiver, id);
        if seen >= n {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    count_for(receiver, id)
}

fn count_for(receiver: &Receiver, id: &str) -> usize {
    receiver
        .requests()
        .iter()
        .filter(|a| a.body.to_string().contains(id))
        .count()
}

async fn assert_unavailable(resp: reqwest::Response, what: &str) {
    assert_eq!(resp.status(), StatusCode::NOT_IMPLEMENTED, "{what}");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "capability_unavailable", "{what}: {body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("durable delivery unavailable on this store"),
        "{what}: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_keeps_runs_and_sends_callbacks_best_effort() {
    let receiver = Receiver::start().await;
    let server = start_memory(&receiver).await;
    let client = admin(&server).await;

    let id = create_run(&server, &client, &receiver.url()).await;
    let listed: Value = json_of(client.get(server.url("/api/v1/runs"))).await;
    assert_eq!(listed["runs"][0]["id"], id.as_str(), "{listed}");

    let running = transition(&server, &client, &id, "running").await;
    assert_eq!(running.status(), StatusCode::OK);
    let done = transition(&server, &client, &id, "succeeded").await;
    assert_eq!(done.status(), StatusCode::OK);
    let done: Value = done.json().await.unwrap();
    assert_eq!(done["run"]["status"], "succeeded");
    // Nothing was committed to an outbox, so no event ids are promised.
    assert_eq!(done["notifications"], json!([]), "{done}");
    assert_eq!(
        arrivals_for(&receiver, &id, 1).await,
        1,
        "the callback arrives once"
    );
    let arrival = receiver
        .requests()
        .into_iter()
        .find(|a| a.body.to_string().contains(&id))
        .unwrap();
    assert_eq!(
        arrival.verified,
        Some(true),
        "signed as the outbox would sign it"
    );
    let body = arrival.body.to_string();
    assert!(body.contains("\"status\":\"succeeded\""), "{body}");

    // A repeated request changes nothing and sends nothing again.
    let again = transition(&server, &client, &id, "succeeded").await;
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["replayed"], true);

    // A receiver that fails is tried once, and never again: nothing is kept.
    receiver.set_status(500);
    let failing = create_run(&server, &client, &receiver.url()).await;
    transition(&server, &client, &failing, "running").await;
    let failed = transition(&server, &client, &failing, "failed").await;
    assert_eq!(failed.status(), StatusCode::OK);
    assert_eq!(arrivals_for(&receiver, &failing, 1).await, 1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(count_for(&receiver, &failing), 1, "no retry is kept");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        count_for(&receiver, &id),
        1,
        "the first callback was not resent"
    );

    server.stop().await;
    receiver.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_reports_durable_delivery_unavailable() {
    let receiver = Receiver::start().await;
    let server = start_memory(&receiver).await;
    let client = admin(&server).await;
    let id = create_run(&server, &client, &receiver.url()).await;

    // Credentials still come first: anonymous is 401, not 501.
    let anonymous = reqwest::Client::new()
        .get(server.url("/admin/api/notification-outbox"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);

    for (what, resp) in [
        (
            "outbox listing",
            client
                .get(server.url("/admin/api/notification-outbox"))
                .send()
                .await
                .unwrap(),
        ),
        (
            "admin retry",
            client
                .post(server.url("/admin/api/notification-outbox/evt-1/retry"))
                .json(&json!({ "kind": "callback", "expected_status": "failed" }))
                .send()
                .await
                .unwrap(),
        ),
        (
            "api retry",
            client
                .post(server.url("/api/v1/deliveries/evt-1/retry"))
                .json(&json!({ "kind": "callback", "expected_status": "failed" }))
                .send()
                .await
                .unwrap(),
        ),
        (
            "run deliveries",
            client
                .get(server.url(&format!("/api/v1/runs/{id}/deliveries")))
                .send()
                .await
                .unwrap(),
        ),
        (
            "approval action replay",
            client
                .get(server.url("/admin/api/approval-action-replay"))
                .send()
                .await
                .unwrap(),
        ),
    ] {
        assert_unavailable(resp, what).await;
    }

    // The console shows a designed notice, not an error page.
    for path in ["/deliveries", "/audit"] {
        let page = client.get(server.url(path)).send().await.unwrap();
        assert_eq!(page.status(), StatusCode::NOT_IMPLEMENTED, "{path}");
        let html = page.text().await.unwrap();
        assert!(
            html.contains("data-testid=\"capability-unavailable\"")
                && html.contains("Durable delivery unavailable on this store"),
            "{path}: {html}"
        );
        assert!(!html.contains("Something went wrong"), "{path}");
    }
    let detail = client
        .get(server.url(&format!("/runs/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(detail.status(), StatusCode::OK);
    let html = detail.text().await.unwrap();
    assert!(html.contains(&id), "the run's facts are shown");
    assert!(
        html.contains("data-testid=\"capability-unavailable\""),
        "{html}"
    );
    let runs = client.get(server.url("/runs")).send().await.unwrap();
    assert_eq!(runs.status(), StatusCode::OK);

    // Still ready, and the outbox gauges say unavailable for every source. `0`
    // is also what `available` reads before anything reported; `durable 0` is a
    // statement made at start-up (a durable store says 1: `durable_stores_say_so`).
    let ready = reqwest::get(server.url("/readyz")).await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for source in ["jobs", "approvals"] {
        for line in [
            format!("herald_outbox_durable{{source=\"{source}\"}} 0"),
            format!("herald_outbox_available{{source=\"{source}\"}} 0"),
        ] {
            assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
        }
    }

    server.stop().await;
    receiver.stop();
}

/// The counterpart of the memory store's `durable 0`: a SQLite store says 1 for
/// every source from start-up, and `available` turns 1 once maintenance reached it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_stores_say_so() {
    let server = TestServer::start_with(|args| args.maintenance_interval_ms = Some(100)).await;
    let available = "herald_outbox_available{source=\"jobs\"} 1";
    let metrics = testkit::metrics_with(
        server.url("").trim_end_matches('/'),
        available,
        Duration::from_secs(20),
    )
    .await;
    assert!(metrics.contains(available), "{metrics}");
    for source in ["jobs", "approvals"] {
        let line = format!("herald_outbox_durable{{source=\"{source}\"}} 1");
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
    }
    server.stop().await;
}
