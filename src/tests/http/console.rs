//! The console and the admin API over real HTTP on loopback, with a real receiver:
//! designed 404 pages, 401 before CSRF, the admin outbox listing (redaction, filters,
//! keyset paging), one retry entry point with 403/409, the console's server
//! functions refusing a forged reader call, and the audit trail.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{delivery_actions, secret_ref, Receiver, TestServer};
use vocab::Role;

const CALLBACK_SECRET: &str = "whsec_Y2FsbGJhY2stc2VjcmV0LWZvci10ZXN0cw==";

async fn start_with_receiver(receiver: &Receiver) -> TestServer {
    let _ = receiver;
    TestServer::start_with(|args| {
        args.destination_allowlist = Some("127.0.0.0/8".into());
        args.callback_secret_ref = Some(secret_ref(CALLBACK_SECRET));
        args.worker_poll_interval_ms = Some(50);
        args.initial_backoff_ms = Some(50);
        args.max_backoff_ms = Some(100);
        args.maintenance_interval_ms = Some(100);
    })
    .await
}

async fn json_of(resp: reqwest::Response) -> (StatusCode, Value) {
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A GET with a bearer token: its status and JSON body.
async fn get_json(client: &reqwest::Client, url: String, bearer: &str) -> (StatusCode, Value) {
    json_of(client.get(url).bearer_auth(bearer).send().await.unwrap()).await
}

/// Polls the admin listing until `n` events are in `status`.
async fn wait_listed(
    client: &reqwest::Client,
    server: &TestServer,
    bearer: &str,
    status: &str,
    n: usize,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, page) = get_json(
            client,
            server.url(&format!("/admin/api/notification-outbox?status={status}")),
            bearer,
        )
        .await;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if events.len() >= n {
            return events;
        }
        assert!(Instant::now() < deadline, "never {n} {status}: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn anonymous_state_changing_requests_are_401_before_any_csrf_check() {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    for path in [
        "/admin/api/notification-outbox/some-event/retry",
        "/api/v1/runs",
        "/api/v1/deliveries/some-event/retry",
        "/console-api/retry",
    ] {
        let (status, body) = json_of(
            client
                .post(server.url(path))
                .header("origin", "http://evil.example")
                .json(&json!({}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body}");
        assert_eq!(body["error"], "unauthenticated", "{path}");
    }
    // A cookie-borne request from another origin is still refused as CSRF.
    let admin = server.session(Role::Admin).await;
    let forged = admin
        .post(server.url("/admin/api/notification-outbox/x/retry"))
        .header("origin", "http://evil.example")
        .json(&json!({"kind": "callback", "expected_status": "failed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(forged.text().await.unwrap().contains("cross-site"));
    // The console's server functions too: an admin's cookie sent from another
    // origin is refused before the function runs.
    let command = json!({"command": {"event_id": "x", "kind": "callback",
        "expected_status": "failed", "expected_cycle": 1, "allow_uncertain": false}});
    let forged = admin
        .post(server.url("/console-api/retry"))
        .header("origin", "http://evil.example")
        .json(&command)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(forged.text().await.unwrap().contains("cross-site"));
    // The same call from the console's own origin reaches the function (which
    // finds no such delivery): the origin alone made the difference.
    let own = admin
        .post(server.url("/console-api/retry"))
        .json(&command)
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}

#[tokio::test]
async fn unknown_addresses_get_designed_pages_and_api_paths_stay_json() {
    let server = TestServer::start().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = client
        .get(server.url("/no/such/page"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::NOT_FOUND);
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(html.contains("Page not found"), "{html}");
    assert!(html.contains("href=\"/runs\""), "a way back");
    for path in ["/api/nope", "/api/v1/nope", "/admin/api/nope", "/admin/api"] {
        let (status, body) = json_of(client.get(server.url(path)).send().await.unwrap()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body["error"], "not_found", "{path}: JSON, not a page");
    }
    // Signed out, console pages ask for a sign-in first, detail pages included.
    let run_page = client.get(server.url("/runs/0000")).send().await.unwrap();
    assert_eq!(run_page.status(), StatusCode::SEE_OTHER);

    let admin = server.session(Role::Admin).await;
    let missing = admin
        .get(server.url("/runs/no-such-run"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let html = missing.text().await.unwrap();
    assert!(html.contains("Run not found"), "{html}");
    assert!(html.contains("no-such-run"));

    let reader = server.session(Role::Reader).await;
    let audit = reader.get(server.url("/audit")).send().await.unwrap();
    assert_eq!(audit.status(), StatusCode::FORBIDDEN);
    assert!(audit
        .text()
        .await
        .unwrap()
        .contains("You do not have access to this page"));
    let operator = server.session(Role::Operator).await;
    let audit = operator.get(server.url("/audit")).send().await.unwrap();
    assert_eq!(audit.status(), StatusCode::OK);
    // The first row of a new server's trail: its first admin, made at start.
    let html = audit.text().await.unwrap();
    assert!(
        html.contains("add_user") && html.contains("user admin (admin)"),
        "{html}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_admin_outbox_api_redacts_filters_pages_and_retries_with_compare_and_set() {
    let receiver = Receiver::start().await;
    receiver.set_status(400);
    let server = start_with_receiver(&receiver).await;
    let client = reqwest::Client::new();
    let operator = server.token(Role::Operator).await;
    let reader = server.token(Role::Reader).await;
    let admin = server.token(Role::Admin).await;

    let mut runs = Vec::new();
    for tenant in ["acme", "acme", "globex"] {
        let (status, run) = json_of(
            client
                .post(server.url("/api/v1/runs"))
                .bearer_auth(&operator)
                .json(&json!({"type": "etl", "tenant": tenant,
                    "callback_url": format!("{}?token=s3cr3t-query", receiver.url_for("secret-path"))}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        let id = run["id"].as_str().unwrap().to_string();
        let (status, done) = json_of(
            client
                .post(server.url(&format!("/api/v1/runs/{id}/transitions")))
                .bearer_auth(&operator)
                .json(&json!({"to": "succeeded", "result": {"rows": 42, "note": "private-result"}}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{done}");
        runs.push(id);
    }
    // The receiver refuses with 400: a permanent failure.
    wait_listed(&client, &server, &reader, "failed", 3).await;

    // Readers list every event, redacted: the destination's origin, never its path,
    // query, secret reference or payload.
    let resp = client
        .get(server.url("/admin/api/notification-outbox"))
        .bearer_auth(&reader)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    for secret in [
        "s3cr3t-query",
        "secret-path",
        "private-result",
        "secret_ref",
        "payload",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    let page: Value = serde_json::from_str(&text).unwrap();
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 3);
    let origin = format!("http://{}", receiver.addr);
    for event in events {
        assert_eq!(event["destination"], origin.as_str());
        assert_eq!(event["channel"], "webhook");
        assert_eq!(event["kind"], "callback");
        assert_eq!(event["source"], "jobs");
        assert_eq!(event["last_status_code"], 400);
    }

    // Filters and keyset paging.
    let count = |query: &'static str| {
        let client = client.clone();
        let url = server.url(&format!("/admin/api/notification-outbox?{query}"));
        let reader = reader.clone();
        async move {
            let (status, page) =
                json_of(client.get(url).bearer_auth(&reader).send().await.unwrap()).await;
            assert_eq!(status, StatusCode::OK, "{query}: {page}");
            page["events"].as_array().unwrap().len()
        }
    };
    assert_eq!(count("kind=callback").await, 3);
    assert_eq!(count("kind=delivery").await, 0);
    assert_eq!(count("status=needs_attention").await, 3);
    assert_eq!(count("status=completed").await, 0);
    assert_eq!(count("source=jobs").await, 3);
    assert_eq!(count("source=approvals").await, 0);
    let (_, one) = json_of(
        client
            .get(server.url(&format!(
                "/admin/api/notification-outbox?parent=run:{}",
                runs[1]
            )))
            .bearer_auth(&reader)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(one["events"].as_array().unwrap().len(), 1);
    assert_eq!(one["events"][0]["parent_id"], runs[1].as_str());
    let (_, first) = get_json(
        &client,
        server.url("/admin/api/notification-outbox?limit=2"),
        &reader,
    )
    .await;
    let cursor = first["next_cursor"].as_str().expect("a second page");
    let (_, second) = json_of(
        client
            .get(server.url(&format!(
                "/admin/api/notification-outbox?limit=2&after={cursor}"
            )))
            .bearer_auth(&reader)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(second["next_cursor"].is_null());
    let mut ids: Vec<String> = first["events"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["events"].as_array().unwrap())
        .map(|e| e["event_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "every event once over the pages");

    for (query, field) in [
        ("status=sideways", "status"),
        ("parent=run", "parent"),
        ("after=garbage", "after"),
        ("limit=0", "limit"),
    ] {
        let (status, body) = get_json(
            &client,
            server.url(&format!("/admin/api/notification-outbox?{query}")),
            &reader,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}: {body}");
    }
    let (status, body) = get_json(
        &client,
        server.url("/admin/api/notification-outbox?colour=red"),
        &reader,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"].as_str().unwrap().contains("colour"),
        "{body}"
    );

    // The runs list carries delivery summaries and filters by delivery state.
    let (_, attention) = get_json(
        &client,
        server.url("/api/v1/runs?delivery=needs_attention&tenant=acme"),
        &reader,
    )
    .await;
    let listed = attention["runs"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{attention}");
    for run in listed {
        assert_eq!(run["deliveries"]["failed"], 1);
        assert_eq!(run["deliveries"]["worst"], "failed");
    }
    for (query, field) in [
        ("delivery=bogus", "delivery"),
        ("created_from=yesterday", "created_from"),
    ] {
        let (status, body) = get_json(
            &client,
            server.url(&format!("/api/v1/runs?{query}")),
            &reader,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}: {body}");
    }

    // One retry entry point: 403 for readers, 400 for a state that cannot be
    // retried, 409 with the current state when the delivery is not where the
    // caller saw it.
    let event_id = events[0]["event_id"].as_str().unwrap().to_string();
    let retry_url = server.url(&format!("/admin/api/notification-outbox/{event_id}/retry"));
    let retry = |bearer: &str, body: Value| {
        client
            .post(&retry_url)
            .bearer_auth(bearer)
            .json(&body)
            .send()
    };
    let (status, _) = json_of(
        retry(
            &reader,
            json!({"kind": "callback", "expected_status": "failed"}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = json_of(
        retry(
            &operator,
            json!({"kind": "callback", "expected_status": "completed"}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["field"], "expected_status");
    let (status, body) = json_of(
        retry(
            &operator,
            json!({"kind": "callback", "expected_status": "skipped"}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["current_status"], "failed");
    // The right status in another retry cycle than the one seen: 409 as well.
    let (status, body) = json_of(
        retry(
            &operator,
            json!({"kind": "callback", "expected_status": "failed", "expected_cycle": 7}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["current_status"], "failed");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cycle 1, not cycle 7"),
        "{body}"
    );
    receiver.set_status(200);
    let (status, retried) = json_of(
        retry(
            &operator,
            json!({"kind": "callback", "expected_status": "failed"}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["event_id"], event_id.as_str());
    let (status, stale) = json_of(
        retry(
            &operator,
            json!({"kind": "callback", "expected_status": "failed"}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{stale}");
    assert!(
        ["pending", "processing", "completed"].contains(&stale["current_status"].as_str().unwrap())
    );
    let done = wait_listed(&client, &server, &admin, "completed", 1).await;
    assert_eq!(done[0]["event_id"], event_id.as_str());
    assert_eq!(done[0]["attempts"], 2, "cumulative attempts kept");

    // The same entry point through the JSON API v1.
    let other = events[1]["event_id"].as_str().unwrap().to_string();
    let (status, body) = json_of(
        client
            .post(server.url(&format!("/api/v1/deliveries/{other}/retry")))
            .bearer_auth(&operator)
            .json(&json!({"kind": "callback", "expected_status": "failed"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // The console's server functions: a reader's forged retry is refused by the
    // server itself; reads are redacted for readers.
    let reader_browser = server.session(Role::Reader).await;
    let third = events[2]["event_id"].as_str().unwrap().to_string();
    let command = json!({"command": {"event_id": third, "kind": "callback",
        "expected_status": "failed", "expected_cycle": 1, "allow_uncertain": false}});
    let forged = reader_browser
        .post(server.url("/console-api/retry"))
        .json(&command)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let run_of_third = runs
        .iter()
        .find(|r| third.contains(r.as_str()))
        .unwrap()
        .clone();
    let (status, view) = json_of(
        reader_browser
            .post(server.url("/console-api/run"))
            .form(&[("id", run_of_third.as_str())])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert!(view["run"]["result"].is_null() && view["run"]["callback_url"].is_null());
    assert_eq!(view["deliveries"][0]["can_retry"], false);
    // The Deliveries page's listing, as the reader's browser calls it: the failed
    // events still shelved, redacted like the admin API's (origins only, no payload).
    let (status, page) = json_of(
        reader_browser
            .post(server.url("/console-api/deliveries"))
            .json(&json!({"query": {"status": "failed"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let listed = page.to_string();
    assert!(
        page["events"].as_array().is_some_and(|d| !d.is_empty()),
        "{page}"
    );
    for private in [
        "secret-path",
        "s3cr3t-query",
        "private-result",
        "secret_ref",
    ] {
        assert!(
            !listed.contains(private),
            "{private} shown to a reader: {listed}"
        );
    }
    assert_eq!(view["deliveries"][0]["timeline"][0]["status_code"], 400);
    assert!(!view.to_string().contains("s3cr3t-query"));
    let admin_browser = server.session(Role::Admin).await;
    let (_, admin_view) = json_of(
        admin_browser
            .post(server.url("/console-api/run"))
            .form(&[("id", run_of_third.as_str())])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(admin_view["run"]["result"]
        .as_str()
        .unwrap()
        .contains("private-result"));
    assert_eq!(admin_view["deliveries"][0]["can_retry"], true);
    let operator_browser = server.session(Role::Operator).await;
    let allowed = operator_browser
        .post(server.url("/console-api/retry"))
        .json(&command)
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status(), StatusCode::OK);

    // The audit trail: operators see who retried what from which state.
    let (status, _) = json_of(
        reader_browser
            .post(server.url("/console-api/audit"))
            .form(&[] as &[(&str, &str)])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, trail) = json_of(
        operator_browser
            .post(server.url("/console-api/audit"))
            .form(&[] as &[(&str, &str)])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{trail}");
    let entries = delivery_actions(&trail);
    assert_eq!(
        entries.len(),
        3,
        "three retries landed; refused ones left no row"
    );
    assert_eq!(entries[2]["event_id"], event_id.as_str());
    assert_eq!(entries[2]["actor"], "token:operator");
    assert_eq!(entries[2]["from_status"], "failed");
    assert_eq!(entries[2]["acknowledged_duplicate_risk"], false);
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bulk_retry_counts_first_leaves_uncertain_alone_without_acknowledgement_and_audits_once() {
    let hooks = Receiver::start().await;
    hooks.set_status(400);
    let chat = Receiver::start().await;
    chat.script(&[(200, None), (500, None)]);
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        format!(
            "[[routes]]\nname = \"ops-chat\"\nchannel = \"chat\"\nurl = \"{}\"\n",
            chat.url_for("chat")
        ),
    )
    .unwrap();
    let path = config.path().to_path_buf();
    let server = TestServer::start_with(move |args| {
        args.config = Some(path);
        args.destination_allowlist = Some("127.0.0.0/8".into());
        args.callback_secret_ref = Some(secret_ref(CALLBACK_SECRET));
        args.worker_poll_interval_ms = Some(50);
        args.chat_max_chars = Some(40);
    })
    .await;
    let client = reqwest::Client::new();
    let operator = server.token(Role::Operator).await;
    let make = |callback: Option<String>, routes: Vec<&'static str>| {
        let client = client.clone();
        let operator = operator.clone();
        let base = server.url("");
        async move {
            let (_, run) = json_of(
                client
                    .post(format!("{base}/api/v1/runs"))
                    .bearer_auth(&operator)
                    .json(&json!({"type": "etl", "tenant": "acme", "callback_url": callback, "routes": routes}))
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            let id = run["id"].as_str().unwrap().to_string();
            let (status, _) = json_of(
                client
                    .post(format!("{base}/api/v1/runs/{id}/transitions"))
                    .bearer_auth(&operator)
                    .json(&json!({"to": "succeeded", "result": {"text": "a long result that the chat route splits into parts"}}))
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            assert_eq!(status, StatusCode::OK);
        }
    };
    make(Some(hooks.url()), vec![]).await;
    make(Some(hooks.url()), vec![]).await;
    make(None, vec!["ops-chat"]).await;
    wait_listed(&client, &server, &operator, "failed", 2).await;
    wait_listed(&client, &server, &operator, "uncertain", 1).await;

    let query = json!({"query": {"status": "needs_attention"}});
    let reader = server.session(Role::Reader).await;
    let refused = reader
        .post(server.url("/console-api/bulk-preview"))
        .json(&query)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    // A reader's forged bulk retry is refused too; the preview below still finds
    // everything failed, so it changed nothing.
    let forged = reader
        .post(server.url("/console-api/bulk-retry"))
        .json(&json!({"query": {"status": "needs_attention"}, "allow_uncertain": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);

    let operator_browser = server.session(Role::Operator).await;
    let (status, preview) = json_of(
        operator_browser
            .post(server.url("/console-api/bulk-preview"))
            .json(&query)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(preview["matching"], 3);
    assert_eq!(preview["uncertain"], 1);
    assert_eq!(preview["capped"], false);
    assert_eq!(preview["cap"], 1000);

    hooks.set_status(200);
    let (status, outcome) = json_of(
        operator_browser
            .post(server.url("/console-api/bulk-retry"))
            .json(&json!({"query": {"status": "needs_attention"}, "allow_uncertain": false}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(
        outcome["retried"], 2,
        "the uncertain one needs the acknowledgement"
    );
    assert_eq!(outcome["changed"], 0);
    wait_listed(&client, &server, &operator, "completed", 2).await;
    let unsure = wait_listed(&client, &server, &operator, "uncertain", 1).await;
    assert_eq!(unsure.len(), 1, "left alone");

    let (_, outcome) = json_of(
        operator_browser
            .post(server.url("/console-api/bulk-retry"))
            .json(&json!({"query": {"status": "uncertain"}, "allow_uncertain": true}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(outcome["retried"], 1);
    wait_listed(&client, &server, &operator, "completed", 3).await;

    let (_, trail) = json_of(
        operator_browser
            .post(server.url("/console-api/audit"))
            .form(&[] as &[(&str, &str)])
            .send()
            .await
            .unwrap(),
    )
    .await;
    let entries = delivery_actions(&trail);
    assert_eq!(entries.len(), 2, "one row per bulk action: {trail}");
    assert_eq!(entries[0]["action"], "bulk_retry");
    assert_eq!(entries[0]["affected"], 1);
    assert_eq!(entries[0]["acknowledged_duplicate_risk"], true);
    assert_eq!(entries[0]["from_status"], "uncertain");
    assert_eq!(entries[1]["affected"], 2);
    assert_eq!(entries[1]["acknowledged_duplicate_risk"], false);
    assert_eq!(entries[1]["event_id"], "bulk: status=needs_attention");
    hooks.stop();
    chat.stop();
    server.stop().await;
}

#[tokio::test]
async fn a_server_error_is_a_designed_page_that_leaks_nothing() {
    use sqlx::{Connection, Executor};
    let server = TestServer::start().await;
    let admin = server.session(Role::Admin).await;
    assert_eq!(
        admin
            .get(server.url("/runs"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    // Break the store under the running server: the Runs page's type list fails.
    let mut conn = sqlx::AnyConnection::connect(&server.db.url).await.unwrap();
    conn.execute("ALTER TABLE run_types RENAME TO run_types_gone")
        .await
        .unwrap();
    conn.close().await.unwrap();
    let page = admin.get(server.url("/runs")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let html = page.text().await.unwrap();
    assert!(html.contains("Something went wrong"), "{html}");
    assert!(html.contains("href=\"/runs\""), "a way back");
    assert!(!html.contains("run_types"), "no internal detail: {html}");
    server.stop().await;
}

/// An oversize body to a console server function is bad input: 413 with a
/// message, whether it declares its length or streams without one (issue 19).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_oversize_body_to_a_server_function_is_refused_with_413() {
    let server = TestServer::start().await;
    let reader = server.session(Role::Reader).await;
    let limit = 1024 * 1024; // `max_body_bytes`' default
    let declared = reader
        .post(server.url("/console-api/deliveries"))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(vec![b' '; limit + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(declared.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let message = declared.text().await.unwrap();
    assert!(
        message.contains("larger than the limit of 1048576 bytes"),
        "{message}"
    );

    // The same without a length: a stream the server must stop reading at the limit.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..33).map(|_| Ok(vec![b' '; 32 * 1024])).collect();
    let streamed = reader
        .post(server.url("/console-api/deliveries"))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), StatusCode::PAYLOAD_TOO_LARGE);

    // A body within the limit still reaches the server function.
    let (status, page) = json_of(
        reader
            .post(server.url("/console-api/deliveries"))
            .json(&json!({"query": {"limit": 5}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    server.stop().await;
}

/// Arguments a server function cannot decode are the caller's mistake: 400 with
/// what was wrong, on the runs family's functions and the Approvals page's alike,
/// and the server function never runs (issue 19).
#[tokio::test]
async fn malformed_server_function_arguments_answer_400_with_a_message() {
    let server = TestServer::start().await;
    let operator = server.session(Role::Operator).await;
    let cases: Vec<(&str, reqwest::RequestBuilder)> = vec![
        (
            "retry: not JSON",
            operator
                .post(server.url("/console-api/retry"))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body("{not json"),
        ),
        (
            "deliveries: a wrong type",
            operator
                .post(server.url("/console-api/deliveries"))
                .json(&json!({"query": {"limit": "many"}})),
        ),
        (
            "replay-retry: a missing argument",
            operator
                .post(server.url("/console-api/replay-retry"))
                .form(&[("event_id", "x")]),
        ),
        (
            "approval-action: not a form",
            operator
                .post(server.url("/console-api/approval-action"))
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body("%%%"),
        ),
    ];
    for (what, request) in cases {
        let resp = request.send().await.unwrap();
        let status = resp.status();
        let body = resp.text().await.unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
        assert!(
            body.contains("argument"),
            "{what} says what was wrong: {body}"
        );
    }
    server.stop().await;
}
