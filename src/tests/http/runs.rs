//! The HTTP surface against a real server on loopback: health, auth, CSRF, the runs
//! API and its error answers.

use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{json_of, location, TestServer, ADMIN_PASSWORD};
use vocab::Role;

async fn sign_in(
    server: &TestServer,
    client: &reqwest::Client,
    username: &str,
    password: &str,
) -> reqwest::Response {
    client
        .post(server.url("/auth/login"))
        .form(&[
            ("username", username),
            ("password", password),
            ("next", "/runs"),
        ])
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn health_and_readiness_answer() {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let health: Value = json_of(client.get(server.url("/healthz"))).await;
    assert_eq!(health["status"], "ok");
    let ready = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn api_requires_authentication_and_the_right_permission() {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let anonymous = client.get(server.url("/api/v1/runs")).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let body: Value = anonymous.json().await.unwrap();
    assert_eq!(body["error"], "unauthenticated");

    let bad = client
        .get(server.url("/api/v1/runs"))
        .bearer_auth("hrl_forged")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);

    let reader = server.token(Role::Reader).await;
    let list = client
        .get(server.url("/api/v1/runs"))
        .bearer_auth(&reader)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), StatusCode::OK);
    let create = client
        .post(server.url("/api/v1/runs"))
        .bearer_auth(&reader)
        .json(&json!({"type": "etl", "tenant": "acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), StatusCode::FORBIDDEN);
    let body: Value = create.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("runs:write"),
        "{body}"
    );
    server.stop().await;
}

#[tokio::test]
async fn runs_are_created_listed_paged_and_redacted_by_role() {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let operator = server.token(Role::Operator).await;
    let admin = server.token(Role::Admin).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let resp = client
            .post(server.url("/api/v1/runs"))
            .bearer_auth(&operator)
            .json(
                &json!({"type": if i == 0 { "report" } else { "etl" }, "tenant": "acme",
                          "callback_url": "https://hooks.example.com/secret-path?key=s3cr3t"}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        let run: Value = resp.json().await.unwrap();
        assert_eq!(run["status"], "queued");
        assert_eq!(run["callback_origin"], "https://hooks.example.com");
        assert!(
            run.get("callback_url").is_none(),
            "operators lack data:read: {run}"
        );
        ids.push(run["id"].as_str().unwrap().to_string());
    }
    let detail: Value = json_of(
        client
            .get(server.url(&format!("/api/v1/runs/{}", ids[0])))
            .bearer_auth(&admin),
    )
    .await;
    assert_eq!(
        detail["callback_url"],
        "https://hooks.example.com/secret-path?key=s3cr3t"
    );

    let page: Value = json_of(
        client
            .get(server.url("/api/v1/runs?limit=2"))
            .bearer_auth(&operator),
    )
    .await;
    let first: Vec<&str> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(first, vec![ids[2].as_str(), ids[1].as_str()]);
    let cursor = page["next_cursor"].as_str().expect("a next page");
    let rest: Value = json_of(
        client
            .get(server.url(&format!("/api/v1/runs?limit=2&after={cursor}")))
            .bearer_auth(&operator),
    )
    .await;
    assert_eq!(rest["runs"][0]["id"], ids[0].as_str());
    assert!(rest["next_cursor"].is_null());
    assert_eq!(rest["run_types"], json!(["etl", "report"]));

    let etl: Value = json_of(
        client
            .get(server.url("/api/v1/runs?type=etl&status=queued"))
            .bearer_auth(&operator),
    )
    .await;
    assert_eq!(etl["runs"].as_array().unwrap().len(), 2);

    let missing = client
        .get(server.url("/api/v1/runs/does-not-exist"))
        .bearer_auth(&operator)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}

#[tokio::test]
async fn bad_input_gets_a_4xx_that_names_the_problem() {
    let server = TestServer::start_with(|args| args.max_body_bytes = Some(4096)).await;
    let client = reqwest::Client::new();
    let operator = server.token(Role::Operator).await;
    let post = |body: String| {
        client
            .post(server.url("/api/v1/runs"))
            .bearer_auth(&operator)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let cases: Vec<(String, StatusCode, &str)> = vec![
        (
            "{not json".into(),
            StatusCode::BAD_REQUEST,
            "parse the request body as json",
        ),
        (
            json!({"type": "etl"}).to_string(),
            StatusCode::BAD_REQUEST,
            "tenant",
        ),
        (
            json!({"type": "etl", "tenant": "a", "colour": "red"}).to_string(),
            StatusCode::BAD_REQUEST,
            "colour",
        ),
        (
            json!({"type": "bad type!", "tenant": "a"}).to_string(),
            StatusCode::BAD_REQUEST,
            "type",
        ),
        (
            json!({"type": "etl", "tenant": "a", "callback_url": "ftp://x"}).to_string(),
            StatusCode::BAD_REQUEST,
            "callback_url",
        ),
        (
            json!({"type": "etl", "tenant": "x".repeat(5000)}).to_string(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "limit",
        ),
    ];
    for (body, status, mention) in cases {
        let resp = post(body.clone()).await.unwrap();
        assert_eq!(resp.status(), status, "{body}");
        let text = resp.text().await.unwrap();
        assert!(text.to_lowercase().contains(mention), "{body} -> {text}");
    }
    let no_type = client
        .post(server.url("/api/v1/runs"))
        .bearer_auth(&operator)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(no_type.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let status = client
        .get(server.url("/api/v1/runs?status=exploded"))
        .bearer_auth(&operator)
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), StatusCode::BAD_REQUEST);
    let body: Value = status.json().await.unwrap();
    assert_eq!(body["field"], "status");
    let limit = client
        .get(server.url("/api/v1/runs?limit=abc"))
        .bearer_auth(&operator)
        .send()
        .await
        .unwrap();
    assert_eq!(limit.status(), StatusCode::BAD_REQUEST);
    assert!(limit.text().await.unwrap().contains("limit"));
    server.stop().await;
}

#[tokio::test]
async fn sign_in_sessions_survive_a_restart_and_sign_out_ends_them() {
    let server = TestServer::start().await;
    let browser = server.browser();
    let page = browser.get(server.url("/runs")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&page), "/login?next=%2Fruns");

    let wrong = sign_in(&server, &browser, "admin", "not-the-password").await;
    assert_eq!(wrong.status(), StatusCode::SEE_OTHER);
    assert!(location(&wrong).starts_with("/login?error=invalid"));
    let unknown = sign_in(&server, &browser, "nobody", "not-the-password").await;
    assert_eq!(
        location(&unknown),
        location(&wrong),
        "no hint whether a user exists"
    );
    assert_eq!(
        browser
            .get(server.url("/api/v1/runs"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::UNAUTHORIZED
    );

    let ok = sign_in(&server, &browser, "admin", ADMIN_PASSWORD).await;
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&ok), "/runs");
    assert_eq!(
        browser
            .get(server.url("/api/v1/runs"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );

    // The session lives in the database: a restarted server still knows it.
    let addr = server.addr;
    let db = server.stop_keep_db().await;
    let server = TestServer::start_on(db, |args| args.listen = Some(addr)).await;
    assert_eq!(
        browser
            .get(server.url("/api/v1/runs"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );

    let out = browser
        .post(server.url("/auth/logout"))
        .send()
        .await
        .unwrap();
    assert_eq!(location(&out), "/login");
    assert_eq!(
        browser
            .get(server.url("/api/v1/runs"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::UNAUTHORIZED
    );
    server.stop().await;
}

#[tokio::test]
async fn state_changing_requests_from_another_origin_are_refused() {
    let server = TestServer::start().await;
    let browser = server.browser();
    sign_in(&server, &browser, "admin", ADMIN_PASSWORD).await;
    let body = json!({"type": "etl", "tenant": "acme"});
    let same = browser
        .post(server.url("/api/v1/runs"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(same.status(), StatusCode::CREATED);
    let forged = browser
        .post(server.url("/api/v1/runs"))
        .header("origin", "http://evil.example")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(forged.text().await.unwrap().contains("cross-site"));
    server.stop().await;
}

#[tokio::test]
async fn repeated_failed_sign_ins_are_throttled() {
    let server = TestServer::start_with(|args| args.login_max_failures = Some(3)).await;
    let browser = server.browser();
    for _ in 0..3 {
        let resp = sign_in(&server, &browser, "admin", "wrong-password-123").await;
        assert!(location(&resp).starts_with("/login?error=invalid"));
    }
    let blocked = sign_in(&server, &browser, "admin", ADMIN_PASSWORD).await;
    assert!(
        location(&blocked).starts_with("/login?error=throttled"),
        "{}",
        location(&blocked)
    );
    assert_eq!(
        browser
            .get(server.url("/api/v1/runs"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::UNAUTHORIZED
    );
    server.stop().await;
}
