//! Herald beside the tools operators already run (issue 24, item 4): the alert
//! rules pass `promtool check rules` and their own unit tests, and a real
//! Prometheus (Debian's `prometheus` package) scraping a real `herald serve` loads
//! them, evaluates every rule without error, answers every query of the Grafana
//! dashboard, and fires `HeraldDeliveriesFailing` when a callback really fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use herald::store::Engine;
use serde_json::{json, Value};
use testkit::{api_token, wait_for, HeraldProcess, Receiver, TestDb};
use vocab::Role;

const SECRET: &str = "whsec_cHJvbWV0aGV1cy1jYWxsYmFjay1zZWNyZXQ=";

fn docs(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(path)
}

fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(docs("prometheus"))
        .output()
        .expect("promtool (Debian's prometheus package, installed by .ci/install-deps)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_rules_pass_promtool_checks_and_their_unit_tests() {
    let (ok, text) = promtool(&["check", "rules", "herald-rules.yml"]);
    assert!(ok, "{text}");
    assert!(text.contains("SUCCESS: 12 rules found"), "{text}");
    let (ok, text) = promtool(&["test", "rules", "herald-rules.test.yml"]);
    assert!(ok, "{text}");
    assert!(text.contains("SUCCESS"), "{text}");
}

/// A Prometheus server of this test's own, killed when dropped.
struct PrometheusServer {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PrometheusServer {
    /// Scrapes `target` (host:port) as job `herald` every second and evaluates
    /// Herald's rules every second.
    async fn start(target: &str) -> PrometheusServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: herald\n    static_configs:\n      - targets: [\"{target}\"]\n",
                rules = docs("prometheus/herald-rules.yml").display()
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian's prometheus package, installed by .ci/install-deps)");
        let server = PrometheusServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let ready = format!("{}/-/ready", server.base);
        wait_for("Prometheus ready", Duration::from_secs(60), async || {
            reqwest::get(&ready)
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        server
    }

    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let url =
            url::Url::parse_with_params(&format!("{}/api/v1/{path}", self.base), query).unwrap();
        let resp = reqwest::get(url).await.unwrap();
        resp.json().await.unwrap()
    }

    /// The alerts in `state` named `name`.
    async fn alerts(&self, name: &str, state: &str) -> Vec<Value> {
        let alerts = self.api("alerts", &[]).await;
        alerts["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["labels"]["alertname"] == name && a["state"] == state)
            .cloned()
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_real_prometheus_scraping_herald_fires_the_failure_alert() {
    let receiver = Receiver::start().await;
    // Every callback is refused for good (a 4xx is permanent): it ends failed.
    receiver.set_status(410);
    let db = TestDb::new(Engine::Sqlite).await;
    let token = api_token(&db.url, Role::Operator).await;
    let mut herald = HeraldProcess::spawn_for_loopback_callbacks(&db.url, SECRET);
    let base = herald.ready().await;
    let target = base.trim_start_matches("http://").to_string();
    let prometheus = PrometheusServer::start(&target).await;

    // The precondition: Herald is scraped and up, and nothing has failed.
    wait_for(
        "Herald scraped and up",
        Duration::from_secs(30),
        async || {
            let up = prometheus
                .api("query", &[("query", "up{job=\"herald\"}")])
                .await;
            up["data"]["result"][0]["value"][1] == "1"
        },
    )
    .await;
    assert!(prometheus
        .alerts("HeraldDeliveriesFailing", "firing")
        .await
        .is_empty());

    // A run whose callback fails for good.
    let client = reqwest::Client::new();
    let run = testkit::create_run_via_api(&client, &base, &token, Some(&receiver.url())).await;
    let moved = client
        .post(format!("{base}/api/v1/runs/{run}/transitions"))
        .bearer_auth(&token)
        .json(&json!({"to": "failed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), 200);
    wait_for(
        "HeraldDeliveriesFailing firing for callbacks",
        Duration::from_secs(60),
        async || {
            prometheus
                .alerts("HeraldDeliveriesFailing", "firing")
                .await
                .iter()
                .any(|a| a["labels"]["kind"] == "callback")
        },
    )
    .await;
    assert!(receiver.count() >= 1, "the callback was really refused");
    assert!(prometheus.alerts("HeraldDown", "firing").await.is_empty());

    // Every rule loaded and evaluated without error.
    let rules = prometheus.api("rules", &[]).await;
    let rules: Vec<&Value> = rules["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert_eq!(rules.len(), 12);
    for rule in &rules {
        assert_eq!(rule["health"], "ok", "{rule}");
    }

    // Every dashboard query runs against these series.
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(docs("grafana/herald.json")).unwrap())
            .unwrap();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let answer = prometheus.api("query", &[("query", expr)]).await;
            assert_eq!(answer["status"], "success", "{expr}: {answer}");
            queries += 1;
        }
    }
    assert!(queries >= 12);
    // Only the callback's kind rose (every kind's counter exists from the start).
    let failing = prometheus
        .api(
            "query",
            &[(
                "query",
                "sum by (kind) (increase(herald_outbox_exhausted_total[10m])) > 0",
            )],
        )
        .await;
    let kinds: Vec<&Value> = failing["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["metric"]["kind"])
        .collect();
    assert_eq!(kinds, [&json!("callback")]);
    drop(prometheus);
    herald.kill();
    receiver.stop();
}
