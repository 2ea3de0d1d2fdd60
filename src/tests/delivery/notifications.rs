//! Run notifications end to end against a real receiver on loopback: terminal
//! transitions, signed webhooks, chat, retries, dead letters, the destination guard,
//! manual retry, and same-id redelivery after SIGKILL.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{metrics_with, secret_ref, wait_for, HeraldProcess, Receiver, TestDb, TestServer};
use vocab::Role;

/// `whsec_` secrets the tests sign and verify with (base64 of fixed bytes).
const CALLBACK_SECRET: &str = "whsec_Y2FsbGJhY2stc2VjcmV0LWZvci10ZXN0cw==";
const ROUTE_SECRET: &str = "whsec_cm91dGUtc2VjcmV0LWZvci10ZXN0cw==";

fn config(receiver: &Receiver, extra: &str) -> tempfile::NamedTempFile {
    // Long enough that a loaded machine's pause is never a timeout (the timeout
    // test sets its own).
    let timeout = if extra.contains("http_timeout_ms") {
        ""
    } else {
        "http_timeout_ms = 10000"
    };
    let secret = if extra.contains("callback_secret_ref") {
        String::new()
    } else {
        format!("callback_secret_ref = \"{}\"", secret_ref(CALLBACK_SECRET))
    };
    let text = format!(
        r#"
{secret}
worker_poll_interval_ms = 50
maintenance_interval_ms = 100
initial_backoff_ms = 50
max_backoff_ms = 200
{timeout}
chat_max_chars = 40
{extra}

[[routes]]
name = "ops-hook"
channel = "webhook"
url = "{hook}"
brand = "Acme Ops"
secret_ref = "{route_secret_ref}"

[[routes]]
name = "ops-chat"
channel = "chat"
url = "{chat}"
brand = "Acme Ops"

[[routes]]
name = "dead"
channel = "webhook"
url = "{dead}"
"#,
        hook = receiver.url_for("route"),
        chat = receiver.url_for("chat"),
        dead = receiver.url_for("dead"),
        route_secret_ref = secret_ref(ROUTE_SECRET),
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

async fn start(
    receiver: &Receiver,
    extra: &str,
    allow_loopback: bool,
) -> (TestServer, tempfile::NamedTempFile) {
    let file = config(receiver, extra);
    let path = file.path().to_path_buf();
    let server = TestServer::start_with(move |args| {
        args.config = Some(path);
        if allow_loopback {
            args.destination_allowlist = Some("127.0.0.0/8".into());
        }
        // These tests follow one event's retries to exhaustion; the destination's
        // circuit breaker (tests in `destinations`) would rest it first.
        args.breaker_failures = Some(1_000);
    })
    .await;
    (server, file)
}

async fn operator_token(server: &TestServer) -> String {
    testkit::api_token(&server.db.url, Role::Operator).await
}

struct Api {
    base: String,
    token: String,
    client: reqwest::Client,
}

impl Api {
    async fn new(server: &TestServer) -> Api {
        Api {
            base: server.url(""),
            token: operator_token(server).await,
            client: reqwest::Client::new(),
        }
    }

    /// The same API as an admin, who holds `data:read` and sees full error texts.
    async fn as_admin(&self, server: &TestServer) -> Api {
        Api {
            base: self.base.clone(),
            token: testkit::api_token(&server.db.url, Role::Admin).await,
            client: self.client.clone(),
        }
    }

    /// A delivery's error as an operator sees it (its class) and as an admin does.
    async fn errors(&self, server: &TestServer, run: &str, event_id: &str) -> (String, String) {
        let admin = self.as_admin(server).await;
        let text = |d: Value| d["last_error"].as_str().unwrap_or_default().to_string();
        (
            text(self.delivery(run, event_id).await),
            text(admin.delivery(run, event_id).await),
        )
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> Value {
        self.client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn run(&self, callback: Option<String>, routes: &[&str]) -> String {
        let (status, run) = self
            .post("/api/v1/runs", json!({"type": "etl", "tenant": "acme", "callback_url": callback, "routes": routes}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        run["id"].as_str().unwrap().to_string()
    }

    async fn finish(&self, run: &str, to: &str, result: Value) -> (StatusCode, Value) {
        self.post(
            &format!("/api/v1/runs/{run}/transitions"),
            json!({"to": to, "result": result}),
        )
        .await
    }

    async fn deliveries(&self, run: &str) -> Vec<Value> {
        self.get(&format!("/api/v1/runs/{run}/deliveries"))
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    async fn delivery(&self, run: &str, event_id: &str) -> Value {
        self.deliveries(run)
            .await
            .into_iter()
            .find(|d| d["event_id"] == event_id)
            .unwrap_or(Value::Null)
    }

    async fn wait_status(
        &self,
        run: &str,
        event_id: &str,
        status: &str,
        within: Duration,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let delivery = self.delivery(run, event_id).await;
            if delivery["status"] == status {
                return delivery;
            }
            assert!(
                Instant::now() < deadline,
                "{event_id} never became {status}: {delivery}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminal_transition_commits_signed_callback_and_route_deliveries() {
    let receiver = Receiver::start().await;
    receiver.verify_with("hook", CALLBACK_SECRET);
    receiver.verify_with("route", ROUTE_SECRET);
    let (server, _config) = start(&receiver, "", true).await;
    let api = Api::new(&server).await;
    let run = api
        .run(Some(receiver.url()), &["ops-hook", "ops-chat"])
        .await;

    let (status, moved) = api.finish(&run, "running", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        moved["notifications"],
        json!([]),
        "only terminal transitions notify"
    );

    let result = json!({"rows": 1200, "note": "all good"});
    let (status, done) = api.finish(&run, "succeeded", result.clone()).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let ids: Vec<String> = done["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let callback_id = format!("callback_{run}_succeeded_2");
    assert_eq!(
        ids,
        vec![
            callback_id.clone(),
            format!("deliver_{run}_ops-chat"),
            format!("deliver_{run}_ops-hook")
        ]
    );

    for id in &ids {
        api.wait_status(&run, id, "completed", Duration::from_secs(10))
            .await;
    }
    let requests = receiver.requests();
    let callback = requests
        .iter()
        .find(|r| r.path == "/hook")
        .expect("callback arrived");
    assert_eq!(
        callback.verified,
        Some(true),
        "a Standard Webhooks verifier accepts the signature"
    );
    assert_eq!(callback.event_id, callback_id);
    assert_eq!(callback.body["result"], result);
    assert_eq!(callback.body["status"], "succeeded");
    let route = requests
        .iter()
        .find(|r| r.path == "/route")
        .expect("route delivery arrived");
    assert_eq!(route.verified, Some(true));
    assert_eq!(route.body["brand"], "Acme Ops");
    let chat: Vec<_> = requests.iter().filter(|r| r.path == "/chat").collect();
    assert!(chat.len() >= 2, "long text is split: {chat:?}");
    assert!(chat
        .iter()
        .all(|c| c.body["text"].as_str().unwrap().chars().count() <= 40));
    assert_eq!(chat[0].body["username"], "Acme Ops");

    // A repeated request (lost acknowledgement) creates nothing new.
    let (status, again) = api.finish(&run, "succeeded", result.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["replayed"], true);
    assert_eq!(again["notifications"], json!([]));
    assert_eq!(api.deliveries(&run).await.len(), 3);
    // Another terminal state is refused with the current one.
    let (status, refused) = api.finish(&run, "failed", Value::Null).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(refused["current_status"], "succeeded");

    // Metrics carry counts, never ids, tenants, recipients or payloads. Settled
    // counts are refreshed every few maintenance passes: wait for them.
    let settled = r#"herald_outbox_events{kind="delivery",source="jobs",status="completed"} 2"#;
    let metrics = metrics_with(&api.base, settled, Duration::from_secs(5)).await;
    assert!(
        metrics.contains(r#"herald_outbox_attempts_total{kind="callback",outcome="completed"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"herald_outbox_events{kind="delivery",source="jobs",status="completed"} 2"#
        ),
        "{metrics}"
    );
    assert!(metrics.contains(r#"herald_outbox_available{source="jobs"} 1"#));
    for secret in [run.as_str(), "acme", "Acme Ops", "all good", "127.0.0.1"] {
        assert!(!metrics.contains(secret), "metrics leak {secret:?}");
    }
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_that_paused_for_approval_notifies_its_real_final_result() {
    let receiver = Receiver::start().await;
    let (server, _config) = start(&receiver, "", true).await;
    let api = Api::new(&server).await;
    let run = api.run(Some(receiver.url()), &[]).await;
    api.finish(&run, "awaiting_approval", Value::Null).await;
    api.finish(&run, "running", Value::Null).await;
    let (_, done) = api.finish(&run, "failed", json!({"error": "quota"})).await;
    let id = done["notifications"][0].as_str().unwrap().to_string();
    assert_eq!(id, format!("callback_{run}_failed_3"));
    api.wait_status(&run, &id, "completed", Duration::from_secs(10))
        .await;
    assert_eq!(receiver.requests()[0].body["status"], "failed");
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_errors_and_429_are_retried_with_retry_after_then_complete() {
    let receiver = Receiver::start().await;
    receiver.script(&[(500, None), (429, Some("1")), (503, None)]);
    let (server, _config) = start(&receiver, "", true).await;
    let api = Api::new(&server).await;
    let run = api.run(Some(receiver.url()), &[]).await;
    let (_, done) = api.finish(&run, "succeeded", json!({})).await;
    let id = done["notifications"][0].as_str().unwrap().to_string();
    let started = Instant::now();
    let delivered = api
        .wait_status(&run, &id, "completed", Duration::from_secs(15))
        .await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was honoured"
    );
    assert_eq!(delivered["attempts"], 4);
    assert_eq!(delivered["last_status_code"], 200);
    assert_eq!(
        receiver.arrivals(),
        vec![id.clone(), id.clone(), id.clone(), id.clone()],
        "same id every time"
    );
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timeout_is_retried() {
    let receiver = Receiver::start().await;
    receiver.set_hold(Duration::from_millis(1500));
    let (server, _config) = start(&receiver, "http_timeout_ms = 1000", true).await;
    let api = Api::new(&server).await;
    let run = api.run(Some(receiver.url()), &[]).await;
    let (_, done) = api.finish(&run, "succeeded", json!({})).await;
    let id = done["notifications"][0].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let d = api.delivery(&run, &id).await;
        if d["attempts"].as_i64().unwrap_or(0) >= 1 && d["status"] == "pending" {
            assert!(
                d["last_error"].as_str().unwrap().contains("timed out"),
                "{d}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no timed-out attempt: {d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    receiver.set_hold(Duration::ZERO);
    api.wait_status(&run, &id, "completed", Duration::from_secs(10))
        .await;
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_400_stops_at_once_and_is_dead_lettered_to_the_operators_route() {
    let receiver = Receiver::start().await;
    // It fails in its first cycle (its notice then succeeds) and again after the
    // first manual retry; answers are taken in order, whatever the path.
    receiver.script(&[(400, None), (200, None), (400, None)]);
    let (server, _config) = start(&receiver, "dead_letter_route = \"dead\"", true).await;
    let api = Api::new(&server).await;
    let run = api.run(Some(receiver.url()), &[]).await;
    let (_, done) = api.finish(&run, "succeeded", json!({})).await;
    let id = done["notifications"][0].as_str().unwrap().to_string();
    let failed = api
        .wait_status(&run, &id, "failed", Duration::from_secs(10))
        .await;
    assert_eq!(failed["attempts"], 1, "a 4xx is not retried");
    assert_eq!(failed["last_status_code"], 400);
    assert_eq!(failed["dead_letter_id"], format!("dead_letter_{id}_1"));
    let notice = api
        .wait_status(
            &run,
            &format!("dead_letter_{id}_1"),
            "completed",
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(notice["kind"], "dead_letter");
    let dead = receiver
        .requests()
        .into_iter()
        .find(|r| r.path == "/dead")
        .expect("notice arrived");
    assert_eq!(dead.body["failed_event_id"], id.as_str());
    assert!(
        dead.body.get("result").is_none(),
        "the notice carries no payload"
    );

    // Retrying goes through the outbox retry path, keeping the id.
    let retry = |expected: &str| json!({"kind": "callback", "expected_status": expected});
    let (status, retried) = api
        .post(&format!("/api/v1/deliveries/{id}/retry"), retry("failed"))
        .await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    let (status, stale) = api
        .post(&format!("/api/v1/deliveries/{id}/retry"), retry("failed"))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{stale}");
    // The second cycle fails too: the operators are told again, in a notice of its own.
    api.wait_status(&run, &id, "failed", Duration::from_secs(10))
        .await;
    api.wait_status(
        &run,
        &format!("dead_letter_{id}_2"),
        "completed",
        Duration::from_secs(10),
    )
    .await;
    let notices = receiver
        .requests()
        .into_iter()
        .filter(|r| r.path == "/dead")
        .count();
    assert_eq!(notices, 2, "one notice per failed cycle");
    let (status, retried) = api
        .post(&format!("/api/v1/deliveries/{id}/retry"), retry("failed"))
        .await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    let done = api
        .wait_status(&run, &id, "completed", Duration::from_secs(10))
        .await;
    assert_eq!(done["attempts"], 3, "cumulative attempts are kept");
    assert_eq!(done["cycle"], 3);
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn six_failed_attempts_end_the_cycle_failed() {
    let receiver = Receiver::start().await;
    receiver.set_status(503);
    let (server, _config) = start(&receiver, "", true).await;
    let api = Api::new(&server).await;
    let run = api.run(Some(receiver.url()), &[]).await;
    let (_, done) = api.finish(&run, "succeeded", json!({})).await;
    let id = done["notifications"][0].as_str().unwrap().to_string();
    let failed = api
        .wait_status(&run, &id, "failed", Duration::from_secs(20))
        .await;
    assert_eq!(failed["attempts"], 6);
    assert_eq!(
        receiver.arrivals().len(),
        6,
        "at most six sending attempts per cycle"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        receiver.arrivals().len(),
        6,
        "nothing more after the cycle ends"
    );
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partial_chat_send_is_uncertain_and_never_resent_automatically() {
    let receiver = Receiver::start().await;
    receiver.script(&[(200, None), (500, None)]);
    let (server, _config) = start(&receiver, "", true).await;
    let api = Api::new(&server).await;
    let run = api.run(None, &["ops-chat"]).await;
    let (_, done) = api
        .finish(&run, "succeeded", json!({"summary": "x".repeat(100)}))
        .await;
    let id = done["notifications"][0].as_str().unwrap().to_string();
    let unsure = api
        .wait_status(&run, &id, "uncertain", Duration::from_secs(10))
        .await;
    let (class, text) = api.errors(&server, &run, &id).await;
    assert_eq!(
        class, "a chat message may have been partly posted",
        "{unsure}"
    );
    assert!(text.contains("after 1 of"), "{text}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(receiver.requests().len(), 2, "no automatic resend");
    let (status, refused) = api
        .post(
            &format!("/api/v1/deliveries/{id}/retry"),
            json!({"kind": "delivery", "expected_status": "uncertain"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["field"], "allow_uncertain");
    let (status, _) = api
        .post(
            &format!("/api/v1/deliveries/{id}/retry"),
            json!({"kind": "delivery", "expected_status": "uncertain", "allow_uncertain": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    api.wait_status(&run, &id, "completed", Duration::from_secs(10))
        .await;
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_guard_refuses_loopback_unless_allow_listed() {
    let receiver = Receiver::start().await;
    let (server, _config) = start(&receiver, "", false).await;
    let api = Api::new(&server).await;
    let by_ip = api.run(Some(receiver.url()), &[]).await;
    let by_name = api
        .run(
            Some(format!("http://localhost:{}/hook", receiver.addr.port())),
            &[],
        )
        .await;
    for run in [&by_ip, &by_name] {
        let (_, done) = api.finish(run, "succeeded", json!({})).await;
        let id = done["notifications"][0].as_str().unwrap().to_string();
        let failed = api
            .wait_status(run, &id, "failed", Duration::from_secs(10))
            .await;
        let (class, text) = api.errors(&server, run, &id).await;
        assert_eq!(class, "the destination address is not allowed");
        assert!(
            text.contains("not public") && !class.contains("127.0.0.1"),
            "{failed}"
        );
        assert_eq!(failed["attempts"], 1);
    }
    assert!(
        receiver.requests().is_empty(),
        "nothing reached the receiver"
    );
    receiver.stop();
    server.stop().await;
}

/// A callback whose signing secret is not set waits, unsent: no attempt spent,
/// its error on the event (a class for the operator, the detail for an admin).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_secret_leaves_the_callback_waiting_with_its_error() {
    let receiver = Receiver::start().await;
    let (server, _config) = start(
        &receiver,
        "callback_secret_ref = \"env:HERALD_TEST_NEVER_SET\"",
        true,
    )
    .await;
    let api = Api::new(&server).await;
    let run = api.run(Some(receiver.url()), &[]).await;
    let (_, done) = api.finish(&run, "succeeded", json!({})).await;
    let id = done["notifications"][0].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let d = api.delivery(&run, &id).await;
        // Given back (pending) after a try: never caught in flight, where the
        // claim holds an attempt until it is returned.
        if !d["last_error"].is_null() && d["status"] == "pending" {
            assert_eq!(d["attempts"], 0, "no attempt spent: {d}");
            assert_eq!(d["last_error"], "the signing secret is unavailable");
            let (_, text) = api.errors(&server, &run, &id).await;
            assert_eq!(text, "signing secret env:HERALD_TEST_NEVER_SET is not set");
            break;
        }
        assert!(Instant::now() < deadline, "{d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(receiver.requests().is_empty());
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_transition_input_is_answered_with_a_4xx_that_names_it() {
    let receiver = Receiver::start().await;
    let (server, _config) = start(&receiver, "max_result_bytes = 1000", true).await;
    let api = Api::new(&server).await;
    // A run that owes a callback and a route delivery once it ends.
    let run = api.run(Some(receiver.url()), &["ops-hook"]).await;
    let raw = |body: &'static str| {
        api.client
            .post(format!("{}/api/v1/runs/{run}/transitions", api.base))
            .bearer_auth(&api.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let resp = raw("{\"to\": ").await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let resp = raw("{\"to\": \"exploded\"}").await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.text().await.unwrap().contains("exploded"));
    let (status, body) = api
        .finish(&run, "succeeded", json!({"blob": "x".repeat(2000)}))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["field"], "result");
    let (status, body) = api.finish(&run, "queued", Value::Null).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["current_status"], "queued");
    let (status, _) = api
        .post("/api/v1/runs/nope/transitions", json!({"to": "running"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = api
        .post(
            "/api/v1/runs",
            json!({"type": "etl", "tenant": "a", "routes": ["nowhere"]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["field"], "routes");
    let (status, body) = api
        .post(
            "/api/v1/runs",
            json!({"type": "etl", "tenant": "a", "callback_url": "http//broken"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["field"], "callback_url");
    let (status, body) = api
        .post(
            "/api/v1/deliveries/nope/retry",
            json!({"kind": "callback", "expected_status": "sideways"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        api.deliveries(&run).await.len(),
        0,
        "nothing was enqueued by bad input"
    );
    let (status, done) = api.finish(&run, "succeeded", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(
        api.deliveries(&run).await.len(),
        2,
        "the run did owe events"
    );
    receiver.stop();
    server.stop().await;
}

/// A chat message may have been posted when the process sending it is SIGKILLed
/// (chat has no idempotency key): after the restart its expired lease makes it
/// `uncertain`, and it is never posted again by itself (issue 19).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_chat_post_ends_uncertain_and_is_never_resent() {
    herald::channels::install_crypto_provider();
    let receiver = Receiver::start().await;
    receiver.pause();
    let config = config(
        &receiver,
        "destination_allowlist = \"127.0.0.0/8\"\nlease_secs = 2",
    );
    let db = TestDb::new(herald::store::Engine::Sqlite).await;
    let config_path = config.path().to_str().unwrap().to_string();
    let flags = ["--config", config_path.as_str()];
    let mut herald = HeraldProcess::spawn(&db.url, &flags);
    let base = herald.ready().await;
    let api = Api {
        base: base.clone(),
        token: testkit::api_token(&db.url, Role::Operator).await,
        client: reqwest::Client::new(),
    };
    let run = api.run(None, &["ops-chat"]).await;
    let (status, _) = api.finish(&run, "succeeded", json!({"n": 1})).await;
    assert_eq!(status, StatusCode::OK);
    let chat_posts = || {
        receiver
            .requests()
            .iter()
            .filter(|r| r.path == "/chat")
            .count()
    };
    wait_for(
        "the chat post to arrive",
        Duration::from_secs(10),
        async || chat_posts() == 1,
    )
    .await;
    herald.kill();
    receiver.resume();

    let herald = HeraldProcess::spawn(&db.url, &flags);
    let store = db.store().await;
    let id = format!("deliver_{run}_ops-chat");
    let event = || {
        let store = store.clone();
        let id = id.clone();
        async move {
            herald::store::ports::OutboxStore::get_event(&store, &id)
                .await
                .unwrap()
                .unwrap()
        }
    };
    wait_for(
        "the post to be uncertain",
        Duration::from_secs(30),
        async || event().await.status == vocab::DeliveryStatus::Uncertain,
    )
    .await;
    // A resend would come within a backoff (200 ms at most) and a poll (50 ms);
    // ten times that passes and nothing more is posted.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let settled = event().await;
    assert_eq!(settled.status, vocab::DeliveryStatus::Uncertain);
    assert_eq!(settled.attempts, 1, "never resent automatically");
    assert_eq!(chat_posts(), 1, "posted once");
    drop(herald);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_while_the_receiver_holds_the_request_redelivers_the_same_id() {
    let receiver = Receiver::start().await;
    // The callback stays unanswered until the kill has landed.
    receiver.pause();
    let config = config(
        &receiver,
        "destination_allowlist = \"127.0.0.0/8\"\nlease_secs = 2",
    );
    let db = TestDb::new(herald::store::Engine::Sqlite).await;
    let config_path = config.path().to_str().unwrap().to_string();
    let flags = ["--config", config_path.as_str()];
    let mut herald = HeraldProcess::spawn(&db.url, &flags);
    let base = herald.ready().await;
    let client = reqwest::Client::new();
    let token = testkit::api_token(&db.url, Role::Operator).await;
    let store = db.store().await;
    let api = Api {
        base: base.clone(),
        token,
        client,
    };
    let run = api.run(Some(receiver.url()), &[]).await;
    let (_, done) = api.finish(&run, "succeeded", json!({"n": 1})).await;
    let id = done["notifications"][0].as_str().unwrap().to_string();
    wait_for(
        "the callback to arrive",
        Duration::from_secs(10),
        async || !receiver.held_at_gate().is_empty(),
    )
    .await;
    herald.kill();
    receiver.resume();

    let herald = HeraldProcess::spawn(&db.url, &flags);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let event = herald::store::ports::OutboxStore::get_event(&store, &id)
            .await
            .unwrap()
            .unwrap();
        if event.status == vocab::DeliveryStatus::Completed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never completed after restart: {event:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        receiver.arrivals(),
        vec![id.clone(), id],
        "the receiver saw the same event id again"
    );
    drop(herald);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_route_removed_before_the_run_finished_is_recorded_as_a_failed_delivery() {
    let receiver = Receiver::start().await;
    let (server, _config) = start(&receiver, "", true).await;
    let api = Api::new(&server).await;
    let run = api.run(None, &["ops-hook"]).await;
    // The operator removes the route and restarts Herald before the run finishes.
    let db = server.stop_keep_db().await;
    let bare = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        bare.path(),
        "worker_poll_interval_ms = 50\nmaintenance_interval_ms = 100\n",
    )
    .unwrap();
    let path = bare.path().to_path_buf();
    let server = TestServer::start_on(db, move |args| args.config = Some(path)).await;
    let api = Api {
        base: server.url(""),
        ..api
    };
    let (status, done) = api.finish(&run, "succeeded", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let id = format!("deliver_{run}_ops-hook");
    assert_eq!(done["notifications"], json!([id.clone()]));
    let failed = api
        .wait_status(&run, &id, "failed", Duration::from_secs(10))
        .await;
    let (class, text) = api.errors(&server, &run, &id).await;
    assert_eq!(class, "its route is not configured", "{failed}");
    assert!(text.contains("\"ops-hook\" was not configured"), "{text}");
    assert!(receiver.arrivals().is_empty(), "nothing was sent");
    receiver.stop();
    server.stop().await;
}
