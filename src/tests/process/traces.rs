//! OpenTelemetry traces end to end (issue 24, items 1 and 5): a real `herald
//! serve` exporting OTLP/HTTP to a real collector on loopback
//! (`otlp_collector.py`, decoding with the official protobuf messages from PyPI's
//! `opentelemetry-proto`), a caller's `traceparent` continued through the
//! commit and the delivery to the receiver, and delivery unharmed by a collector
//! that is down.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use herald::store::Engine;
use serde_json::{json, Value};
use testkit::{api_token, json_of, wait_for, HeraldProcess, Receiver, TestDb};
use vocab::Role;

const SECRET: &str = "whsec_dHJhY2VzLWNhbGxiYWNrLXNpZ25pbmctc2VjcmV0";
const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";
/// A value of the run's result: it must never become a span attribute.
const PAYLOAD_MARKER: &str = "payload-never-in-a-span-7f3a";

/// The collector of `otlp_collector.py`, killed when dropped.
struct Collector {
    child: Child,
    port: u16,
    spans_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Collector {
    fn start() -> Collector {
        let dir = tempfile::tempdir().unwrap();
        let spans_file = dir.path().join("spans.ndjson");
        let mut child = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/tests/process/otlp_collector.py"
            ))
            .arg(&spans_file)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with opentelemetry-proto (installed by .ci/install-deps)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the collector's port, not {line:?}"));
        Collector {
            child,
            port,
            spans_file,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far in `trace`.
    fn spans_of(&self, trace: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.spans_file)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|span| span["trace_id"] == trace)
            .collect()
    }
}

fn spawn_traced(db: &TestDb, endpoint: &str) -> HeraldProcess {
    HeraldProcess::spawn_with_env(
        &db.url,
        &[
            "--destination-allowlist",
            "127.0.0.0/8",
            "--worker-poll-interval-ms",
            "50",
            "--otlp-endpoint",
            endpoint,
        ],
        &[("HERALD_WEBHOOK_SECRET", SECRET)],
    )
}

/// Creates a run with a callback to `receiver` and moves it to `succeeded`
/// under the caller's trace; returns the event id the move committed.
async fn traced_run(base: &str, token: &str, receiver: &Receiver, caller_span: &str) -> String {
    let client = reqwest::Client::new();
    let run = testkit::create_run_via_api(&client, base, token, Some(&receiver.url())).await;
    let moved = json_of(
        client
            .post(format!("{base}/api/v1/runs/{run}/transitions"))
            .bearer_auth(token)
            .header("traceparent", format!("00-{CALLER_TRACE}-{caller_span}-01"))
            .json(&json!({"to": "succeeded", "result": {"marker": PAYLOAD_MARKER}})),
    )
    .await;
    moved["notifications"][0].as_str().unwrap().to_string()
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_trace_continues_through_the_commit_and_the_delivery_to_the_receiver() {
    let collector = Collector::start();
    let receiver = Receiver::start().await;
    receiver.verify_with("hook", SECRET);
    let db = TestDb::new(Engine::Sqlite).await;
    let token = api_token(&db.url, Role::Operator).await;
    let mut herald = spawn_traced(&db, &collector.url());
    let base = herald.ready().await;

    let event = traced_run(&base, &token, &receiver, CALLER_SPAN).await;
    wait_for(
        "the callback arrived",
        Duration::from_secs(30),
        async || receiver.count() == 1,
    )
    .await;
    let arrival = receiver.requests().remove(0);
    assert_eq!(arrival.event_id, event);
    assert_eq!(arrival.verified, Some(true), "still a valid signed webhook");
    // The receiver joins the caller's trace, as a child of Herald's send.
    let traceparent = arrival
        .traceparent
        .expect("the webhook carries a traceparent");
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[1], CALLER_TRACE, "{traceparent}");
    let send_span_id = parts[2];
    assert_ne!(send_span_id, CALLER_SPAN);

    // The spans reach the collector (the batch processor sends every few seconds).
    wait_for(
        "the delivery's spans",
        Duration::from_secs(30),
        async || named(&collector.spans_of(CALLER_TRACE), "settle").len() == 1,
    )
    .await;
    let spans = collector.spans_of(CALLER_TRACE);
    let one = |name: &str| {
        let found = named(&spans, name);
        assert_eq!(found.len(), 1, "one {name} span in {spans:#?}");
        found[0].clone()
    };
    let request = one("request");
    assert_eq!(
        request["parent_span_id"], CALLER_SPAN,
        "the caller's span is its parent"
    );
    assert_eq!(request["service"], "herald");
    let delivery = one("delivery");
    assert_eq!(
        delivery["parent_span_id"], request["span_id"],
        "the delivery continues the request that owed it"
    );
    assert_eq!(delivery["attributes"]["herald.event_id"], event.as_str());
    assert_eq!(delivery["attributes"]["herald.kind"], "callback");
    let send = one("send");
    assert_eq!(send["parent_span_id"], delivery["span_id"]);
    assert_eq!(
        send["span_id"], send_span_id,
        "the webhook names the send span"
    );
    let settle = one("settle");
    assert_eq!(settle["parent_span_id"], delivery["span_id"]);
    assert_eq!(settle["attributes"]["herald.outcome"], "completed");
    let claim = one("claim");
    assert_eq!(claim["parent_span_id"], delivery["span_id"]);

    // The batched commit is a span of its own, linked to the request it served.
    let commit = std::fs::read_to_string(&collector.spans_file)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|span| {
            span["name"] == "commit transitions"
                && span["links"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|l| l["span_id"] == request["span_id"])
        });
    assert!(commit.is_some(), "no commit span links to the request");

    // Payloads never become attributes.
    let all = std::fs::read_to_string(&collector.spans_file).unwrap();
    assert!(!all.contains(PAYLOAD_MARKER), "a payload reached a span");
    assert!(!all.contains("whsec_"), "a secret reached a span");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_collector_down_every_callback_still_arrives() {
    // The collector down in its worst form, on a port this test holds: the
    // kernel queues the connections and nothing ever answers, so every export
    // waits out its timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());

    let receiver = Receiver::start().await;
    receiver.verify_with("hook", SECRET);
    let db = TestDb::new(Engine::Sqlite).await;
    let token = api_token(&db.url, Role::Operator).await;
    let mut herald = spawn_traced(&db, &endpoint);
    let base = herald.ready().await;

    const RUNS: usize = 40;
    for i in 0..RUNS {
        traced_run(&base, &token, &receiver, &format!("{:016x}", i + 1)).await;
    }
    wait_for(
        "every callback arrived",
        Duration::from_secs(60),
        async || receiver.count() == RUNS,
    )
    .await;
    assert!(receiver.requests().iter().all(|a| a.verified == Some(true)));
    // The exports really failed: their spans are counted as dropped.
    wait_for(
        "failed exports counted",
        Duration::from_secs(60),
        async || {
            testkit::metric_value(&base, "herald_trace_spans_dropped_total")
                .await
                .is_some_and(|dropped| dropped > 0.0)
        },
    )
    .await;
    drop(silent);
}
