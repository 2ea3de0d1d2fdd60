//! What a node's configuration keeps from working is said where operators look:
//! `/readyz` (still ready: the API and console work) and the console's
//! `config-notices` server function, checked live, so fixing the setting clears
//! it without a restart (issue 19: an unreadable callback secret used to show
//! only as callbacks that never left).

use reqwest::StatusCode;
use serde_json::Value;
use testkit::{SecretFile, TestServer};
use vocab::Role;

/// Sends `request`: its status and JSON body (null when it has none).
async fn json_of(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let resp = request.send().await.unwrap();
    (resp.status(), resp.json().await.unwrap_or(Value::Null))
}

const SECRET: &str = "whsec_Y29uZmlnLW5vdGljZS1zZWNyZXQtZm9yLXRlc3Rz";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_callback_secret_is_a_notice_on_readyz_and_in_the_console_until_fixed() {
    // The reference names a file that holds no usable secret yet.
    let secret = SecretFile::new("not a secret");
    let reference = secret.reference();
    let server =
        TestServer::start_with(move |args| args.callback_secret_ref = Some(reference)).await;
    let client = reqwest::Client::new();

    let (status, ready) = json_of(client.get(server.url("/readyz"))).await;
    assert_eq!(status, StatusCode::OK, "still ready: {ready}");
    let notices = ready["notices"].as_array().cloned().unwrap_or_default();
    assert_eq!(notices.len(), 1, "{ready}");
    assert_eq!(notices[0]["setting"], "callback_secret_ref");
    let problem = notices[0]["problem"].as_str().unwrap();
    assert!(problem.contains("cannot be read"), "{problem}");
    assert!(
        !problem.contains("not a secret"),
        "never the value: {problem}"
    );

    let console = |role| {
        let server = &server;
        async move {
            let browser = server.session(role).await;
            json_of(browser.post(server.url("/console-api/config-notices"))).await
        }
    };
    let (status, listed) = console(Role::Reader).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed, Value::Array(notices.clone()), "the same notices");
    let (status, _) = json_of(client.post(server.url("/console-api/config-notices"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "signed-in viewers only");

    // Fixed in place: no restart, no notice.
    secret.rewrite(SECRET);
    let (_, ready) = json_of(client.get(server.url("/readyz"))).await;
    assert_eq!(ready["notices"], Value::Array(vec![]), "{ready}");
    let (status, listed) = console(Role::Operator).await;
    assert_eq!((status, listed), (StatusCode::OK, Value::Array(vec![])));
    server.stop().await;
}
