//! Roles and sessions, proven with the credentials they name (issue 12, item 10):
//! a reader (token or signed-in session) is refused every write, `result` is shown
//! only with `data:read` on runs that have one, a signed-out session cookie replayed
//! is refused, and signing in rotates the session id.

use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{TestServer, ADMIN_PASSWORD};
use vocab::Role;

const SECRET_RESULT: &str = "figure-only-data-readers-see";

/// A client that sends this server's Origin and keeps no cookies of its own.
fn bare_client(server: &TestServer) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::ORIGIN,
        server.url("").trim_end_matches('/').parse().unwrap(),
    );
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(headers)
        .build()
        .unwrap()
}

/// Signs in and returns the session cookie (`name=value`) the server set.
async fn session_cookie(
    server: &TestServer,
    client: &reqwest::Client,
    username: &str,
    password: &str,
    presented: Option<&str>,
) -> String {
    let mut request = client.post(server.url("/auth/login")).form(&[
        ("username", username),
        ("password", password),
        ("next", "/runs"),
    ]);
    if let Some(cookie) = presented {
        request = request.header(reqwest::header::COOKIE, cookie);
    }
    let resp = request.send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    resp.headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("herald_session="))
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_string()
}

async fn status_with_cookie(client: &reqwest::Client, url: String, cookie: &str) -> StatusCode {
    client
        .get(url)
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_are_refused_every_write_and_see_no_result() {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let operator = server.token(Role::Operator).await;
    let admin = server.token(Role::Admin).await;
    let reader = server.token(Role::Reader).await;
    server
        .add_user("reader-user", "reader-password-123", Role::Reader)
        .await;
    let browser = bare_client(&server);
    let reader_cookie = session_cookie(
        &server,
        &browser,
        "reader-user",
        "reader-password-123",
        None,
    )
    .await;

    // A finished run with a result and an owed callback, and one still running.
    let create = |body: Value| {
        client
            .post(server.url("/api/v1/runs"))
            .bearer_auth(&operator)
            .json(&body)
            .send()
    };
    let finished: Value = create(json!({"type": "etl", "tenant": "acme",
        "callback_url": "https://hooks.example.com/done"}))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let finished = finished["id"].as_str().unwrap().to_string();
    let running: Value = create(json!({"type": "etl", "tenant": "acme"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let running = running["id"].as_str().unwrap().to_string();
    for (run, to, result) in [
        (&finished, "running", Value::Null),
        (&finished, "succeeded", json!({"note": SECRET_RESULT})),
        (&running, "running", Value::Null),
    ] {
        let resp = client
            .post(server.url(&format!("/api/v1/runs/{run}/transitions")))
            .bearer_auth(&operator)
            .json(&json!({"to": to, "result": result}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let text = resp.text().await.unwrap();
        assert!(
            !text.contains(SECRET_RESULT),
            "the operator's own transition answer shows the result: {text}"
        );
    }
    let callback = format!("callback_{finished}_succeeded_2");

    // Every write, as a reader token and as a reader's signed-in session.
    let writes: Vec<(String, Value)> = vec![
        (
            "/api/v1/runs".into(),
            json!({"type": "etl", "tenant": "acme"}),
        ),
        (
            format!("/api/v1/runs/{running}/transitions"),
            json!({"to": "succeeded", "result": {"forged": true}}),
        ),
        (
            format!("/api/v1/runs/{finished}/transitions"),
            json!({"to": "failed"}),
        ),
        (
            format!("/api/v1/deliveries/{callback}/retry"),
            json!({"kind": "callback", "expected_status": "pending"}),
        ),
    ];
    for (path, body) in &writes {
        let by_token = client
            .post(server.url(path))
            .bearer_auth(&reader)
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(by_token.status(), StatusCode::FORBIDDEN, "token: {path}");
        let text = by_token.text().await.unwrap();
        assert!(text.contains("runs:write"), "{path}: {text}");
        let by_session = browser
            .post(server.url(path))
            .header(reqwest::header::COOKIE, &reader_cookie)
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            by_session.status(),
            StatusCode::FORBIDDEN,
            "session: {path}"
        );
    }
    // Nothing moved.
    let get = |path: String, secret: String| {
        let client = client.clone();
        async move {
            client
                .get(path)
                .bearer_auth(secret)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let still: Value = serde_json::from_str(
        &get(
            server.url(&format!("/api/v1/runs/{running}")),
            admin.clone(),
        )
        .await,
    )
    .unwrap();
    assert_eq!(still["status"], "running");
    assert_eq!(still["transition_seq"], 1);
    let listed: Value =
        serde_json::from_str(&get(server.url("/api/v1/runs"), admin.clone()).await).unwrap();
    assert_eq!(
        listed["runs"].as_array().unwrap().len(),
        2,
        "no run created"
    );

    // `result` needs data:read: hidden from readers and operators, shown to admins.
    for (who, secret) in [("reader", &reader), ("operator", &operator)] {
        for path in [
            format!("/api/v1/runs/{finished}"),
            "/api/v1/runs".to_string(),
            format!("/api/v1/runs/{finished}/deliveries"),
        ] {
            let text = get(server.url(&path), secret.clone()).await;
            assert!(
                !text.contains(SECRET_RESULT) && !text.contains("\"result\""),
                "{who} sees the result at {path}: {text}"
            );
        }
    }
    let detail: Value = serde_json::from_str(
        &get(
            server.url(&format!("/api/v1/runs/{finished}")),
            admin.clone(),
        )
        .await,
    )
    .unwrap();
    assert_eq!(detail["result"], json!({"note": SECRET_RESULT}));

    // The console's server function, as the reader's session.
    let page = browser
        .post(server.url("/console-api/runs"))
        .header(reqwest::header::COOKIE, &reader_cookie)
        .form(&[("run_type", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let text = page.text().await.unwrap();
    assert!(text.contains(&finished), "{text}");
    assert!(!text.contains(SECRET_RESULT), "{text}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signed_out_cookie_replayed_is_refused_and_sign_in_rotates_the_session_id() {
    let server = TestServer::start().await;
    let client = bare_client(&server);
    let runs = server.url("/api/v1/runs");

    let first = session_cookie(&server, &client, "admin", ADMIN_PASSWORD, None).await;
    assert_eq!(
        status_with_cookie(&client, runs.clone(), &first).await,
        StatusCode::OK
    );
    // Signing in again while holding a session gets a new id; the old one is dead.
    let second = session_cookie(&server, &client, "admin", ADMIN_PASSWORD, Some(&first)).await;
    assert_ne!(first, second, "sign-in rotates the session id");
    assert_eq!(
        status_with_cookie(&client, runs.clone(), &first).await,
        StatusCode::UNAUTHORIZED,
        "the pre-sign-in id no longer works"
    );
    assert_eq!(
        status_with_cookie(&client, runs.clone(), &second).await,
        StatusCode::OK
    );

    let out = client
        .post(server.url("/auth/logout"))
        .header(reqwest::header::COOKIE, &second)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    // A copy of the cookie kept from before the sign-out (another tab, a thief).
    assert_eq!(
        status_with_cookie(&client, runs.clone(), &second).await,
        StatusCode::UNAUTHORIZED,
        "a signed-out session cookie replayed is refused"
    );
    let write = client
        .post(server.url("/api/v1/runs"))
        .header(reqwest::header::COOKIE, &second)
        .json(&json!({"type": "etl", "tenant": "acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), StatusCode::UNAUTHORIZED);
    server.stop().await;
}

/// Page loads in flight when the sign-out lands loaded the session before it was
/// deleted and save it afterwards (the console saves on every request): the
/// sign-out must still hold. The window is a race, so it is tried several times.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sign_out_with_page_loads_in_flight_stays_signed_out() {
    let server = TestServer::start().await;
    let client = bare_client(&server);
    let runs = server.url("/api/v1/runs");
    let mut served_in_all = 0;
    for trial in 0..5 {
        let cookie = session_cookie(&server, &client, "admin", ADMIN_PASSWORD, None).await;
        let loads: Vec<_> = (0..30)
            .map(|_| {
                let (client, url, cookie) = (client.clone(), server.url("/runs"), cookie.clone());
                tokio::spawn(async move { status_with_cookie(&client, url, &cookie).await })
            })
            .collect();
        let out = client
            .post(server.url("/auth/logout"))
            .header(reqwest::header::COOKIE, &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(out.status(), StatusCode::SEE_OTHER);
        let mut served = 0;
        for load in loads {
            if load.await.unwrap() == StatusCode::OK {
                served += 1;
            }
        }
        served_in_all += served;
        assert_eq!(
            status_with_cookie(&client, runs.clone(), &cookie).await,
            StatusCode::UNAUTHORIZED,
            "trial {trial}: the signed-out cookie still works after {served} loads in flight"
        );
    }
    // The precondition: loads were in flight, holding the session, as it was deleted
    // (a load that began after the sign-out is sent to the sign-in page instead).
    assert!(served_in_all > 0, "no page load held the session");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sign_in_form_sent_before_hydration_returns_to_the_page_asked_for() {
    let server = TestServer::start().await;
    let client = bare_client(&server);
    // The page as the server sends it, before any script runs.
    let html = client
        .get(server.url("/login?next=%2Fdeliveries%3Fstatus%3Dfailed"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let field = html
        .split("<input")
        .find(|input| input.contains(r#"name="next""#))
        .expect("a next field in the form");
    let next = field
        .split(r#"value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("the next field has a value in the HTML: {field}"));
    assert_eq!(next, "/deliveries?status=failed");
    // Sent as it stands, the form signs in and goes back there.
    let resp = client
        .post(server.url("/auth/login"))
        .form(&[
            ("username", "admin"),
            ("password", ADMIN_PASSWORD),
            ("next", next),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(testkit::location(&resp), "/deliveries?status=failed");
    server.stop().await;
}
