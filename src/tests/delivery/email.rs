//! The e-mail channel end to end against a real SMTP server on loopback
//! (aiosmtpd, driven by `smtp_server.py`): delivered from the frozen snapshot,
//! 4xx retried, 5xx failed, a connection dropped after DATA `uncertain`, and that
//! uncertain delivery retried by hand with the duplicate-risk acknowledgement.

use std::io::BufRead;
use std::time::Duration;

use herald::store::ports::OutboxStore;
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{finish_routed_run, wait_for, TestServer};
use vocab::{DeliveryStatus, Role};

/// The aiosmtpd server of `smtp_server.py` as a child process.
pub struct SmtpServer {
    child: std::process::Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl SmtpServer {
    /// Starts it; without aiosmtpd the test is skipped, except under CI where a
    /// missing prerequisite is a failure.
    pub fn start() -> Option<SmtpServer> {
        let available = std::process::Command::new("python3")
            .args(["-c", "import aiosmtpd"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !available {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "aiosmtpd is missing: .ci/install-deps installs it"
            );
            eprintln!("SKIPPED: python3 with aiosmtpd is not installed (.ci/install-deps)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/tests/delivery/smtp_server.py"
            ))
            .arg(dir.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the SMTP server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the SMTP server's port");
        Some(SmtpServer { child, port, dir })
    }

    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// `accept`, `tempfail` (451), `reject` (554) or `drop` (cut after DATA).
    pub fn set_mode(&self, mode: &str) {
        std::fs::write(self.dir.path().join("mode"), mode).unwrap();
    }

    fn files(&self, dropped: bool) -> Vec<Value> {
        let mut names: Vec<_> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".json") && n.contains(".dropped") == dropped)
            .collect();
        names.sort();
        names
            .iter()
            .map(|n| {
                serde_json::from_slice(&std::fs::read(self.dir.path().join(n)).unwrap()).unwrap()
            })
            .collect()
    }

    /// Messages accepted (answered 250).
    pub fn messages(&self) -> Vec<Value> {
        self.files(false)
    }

    /// Messages whose data arrived before the connection was cut.
    pub fn dropped(&self) -> Vec<Value> {
        self.files(true)
    }

    /// Every answer given at the end of DATA, in order.
    pub fn answers(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(smtp: &SmtpServer) -> tempfile::NamedTempFile {
    let text = format!(
        r#"
[[routes]]
name = "mail"
channel = "email"
url = "{url}"
to = ["ops@example.com", "lead@example.com"]
from = "jobs@example.com"
brand = "Acme Jobs"
subject = "[{{brand}}] run {{run_id}} {{status}}"
body = "Run {{run_id}} of {{tenant}} ended {{status}}.\nResult: {{result}}"
"#,
        url = smtp.url()
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

async fn start(smtp: &SmtpServer) -> (TestServer, tempfile::NamedTempFile) {
    let file = config(smtp);
    let path = file.path().to_path_buf();
    let server = TestServer::start_with(move |args| {
        args.config = Some(path);
        args.destination_allowlist = Some("127.0.0.0/8".into());
        args.initial_backoff_ms = Some(200);
        args.max_backoff_ms = Some(400);
        args.worker_poll_interval_ms = Some(100);
        args.http_timeout_ms = Some(5_000);
    })
    .await;
    (server, file)
}

/// Creates a run routed to `mail` and finishes it; returns its id.
async fn finished_run(server: &TestServer, token: &str, result: Value) -> String {
    finish_routed_run(server, token, "mail", result).await
}

async fn status_of(server: &TestServer, event_id: &str) -> Option<DeliveryStatus> {
    let store = server.db.store().await;
    let status = store.get_event(event_id).await.unwrap().map(|e| e.status);
    store.close().await;
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn email_is_sent_from_the_snapshot_and_a_4xx_answer_is_retried() {
    let Some(smtp) = SmtpServer::start() else {
        return;
    };
    smtp.set_mode("tempfail");
    let (server, _config) = start(&smtp).await;
    let operator = server.token(Role::Operator).await;
    let run = finished_run(&server, &operator, json!({"rows": 7})).await;
    let event_id = format!("deliver_{run}_mail");

    wait_for("a 451 answer", Duration::from_secs(20), async || {
        smtp.answers().iter().any(|a| a == "tempfail")
    })
    .await;
    wait_for("the retry scheduled", Duration::from_secs(10), async || {
        status_of(&server, &event_id).await == Some(DeliveryStatus::Pending)
    })
    .await;
    assert!(
        smtp.messages().is_empty(),
        "nothing accepted while answering 451"
    );
    smtp.set_mode("accept");
    wait_for("delivered", Duration::from_secs(20), async || {
        status_of(&server, &event_id).await == Some(DeliveryStatus::Completed)
    })
    .await;

    let messages = smtp.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    let message = &messages[0];
    assert_eq!(message["mail_from"], "jobs@example.com");
    assert_eq!(
        message["rcpt_tos"],
        json!(["ops@example.com", "lead@example.com"])
    );
    let data = message["data"].as_str().unwrap();
    let from = data
        .lines()
        .find(|l| l.starts_with("From:"))
        .expect("a From header");
    assert!(
        from.contains("Acme Jobs") && from.contains("<jobs@example.com>"),
        "the brand is the sender's name: {from}"
    );
    assert!(
        data.contains(&format!("Subject: [Acme Jobs] run {run} succeeded")),
        "{data}"
    );
    assert!(
        data.contains(&format!("Run {run} of acme ended succeeded.")),
        "{data}"
    );
    assert!(data.contains(r#"Result: {"rows":7}"#), "{data}");
    assert!(
        data.contains(&format!("Message-ID: <{event_id}@herald>")),
        "{data}"
    );

    let store = server.db.store().await;
    let attempts = store.attempts(&event_id).await.unwrap();
    let retried = attempts
        .iter()
        .find(|a| a.outcome == "retry")
        .expect("a retried attempt");
    assert_eq!(retried.status_code, Some(451));
    assert_eq!(attempts.last().unwrap().outcome, "completed");
    store.close().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn email_5xx_fails_and_a_drop_after_data_is_uncertain_until_retried_with_acknowledgement() {
    let Some(smtp) = SmtpServer::start() else {
        return;
    };
    let (server, _config) = start(&smtp).await;
    let operator = server.token(Role::Operator).await;
    let client = reqwest::Client::new();

    // 5xx: refused for good.
    smtp.set_mode("reject");
    let rejected = format!(
        "deliver_{}_mail",
        finished_run(&server, &operator, json!({"n": 1})).await
    );
    wait_for("failed", Duration::from_secs(20), async || {
        status_of(&server, &rejected).await == Some(DeliveryStatus::Failed)
    })
    .await;
    let store = server.db.store().await;
    let event = store.get_event(&rejected).await.unwrap().unwrap();
    assert_eq!(event.attempts, 1, "a 5xx answer is not retried");
    assert_eq!(event.last_status_code, Some(554));

    // The connection is cut after the data went out: it may have been delivered.
    smtp.set_mode("drop");
    let dropped = format!(
        "deliver_{}_mail",
        finished_run(&server, &operator, json!({"n": 2})).await
    );
    wait_for("uncertain", Duration::from_secs(20), async || {
        status_of(&server, &dropped).await == Some(DeliveryStatus::Uncertain)
    })
    .await;
    assert_eq!(smtp.dropped().len(), 1, "the data reached the server");
    // A retry would come within the longest backoff (400 ms) and a poll (100 ms):
    // five times that passes and still nothing is resent.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(smtp.dropped().len(), 1, "never resent automatically");
    let event = store.get_event(&dropped).await.unwrap().unwrap();
    assert_eq!(event.attempts, 1, "never resent automatically");
    assert_eq!(event.status, DeliveryStatus::Uncertain);
    assert!(!event.redeliverable);

    // A manual retry needs the duplicate-risk acknowledgement, then delivers.
    smtp.set_mode("accept");
    let retry = server.url(&format!("/api/v1/deliveries/{dropped}/retry"));
    let refused = client
        .post(&retry)
        .bearer_auth(&operator)
        .json(&json!({"kind": "delivery", "expected_status": "uncertain"}))
        .send()
        .await
        .unwrap();
    assert!(refused.status().is_client_error(), "{}", refused.status());
    assert_eq!(
        status_of(&server, &dropped).await,
        Some(DeliveryStatus::Uncertain)
    );
    let accepted = client
        .post(&retry)
        .bearer_auth(&operator)
        .json(&json!({"kind": "delivery", "expected_status": "uncertain", "allow_uncertain": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), StatusCode::OK);
    wait_for(
        "delivered after the retry",
        Duration::from_secs(20),
        async || status_of(&server, &dropped).await == Some(DeliveryStatus::Completed),
    )
    .await;
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(messages[0]["data"]
        .as_str()
        .unwrap()
        .contains(&format!("Message-ID: <{dropped}@herald>")));
    store.close().await;
    server.stop().await;
}
