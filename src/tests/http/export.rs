//! Exports on all three engines. The reconciliation export (issue 21, item 5):
//! `GET /admin/api/notification-outbox/export` streams every matching event as
//! NDJSON or CSV across several pages, each once; payloads only for `data:read`;
//! a bad filter or format is a `400` naming it; the Deliveries page's
//! `/deliveries/export` answers the same. `herald events export` gives the same
//! rows from the command line, and refuses bad input with a message and a
//! non-zero exit. The audit trail's export (issue 23, item 4): every entry once,
//! across pages, as NDJSON and CSV, to operators only.

use std::collections::HashSet;
use std::time::Duration;

use herald::service::export::EXPORT_PAGE;
use herald::store::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{api_token, wait_for, Receiver, TestDb, TestServer};
use vocab::Role;

const CALLBACK_SECRET: &str = "whsec_ZXhwb3J0LWNhbGxiYWNrLXNlY3JldC1mb3ItdGVzdHM=";

/// More runs than two export pages hold, so the export crosses page boundaries.
const RUNS: usize = EXPORT_PAGE as usize * 2 + 37;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_the_export_holds_every_matching_event_once() {
    the_export_holds_every_matching_event_once(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_the_export_holds_every_matching_event_once() {
    the_export_holds_every_matching_event_once(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_the_export_holds_every_matching_event_once() {
    the_export_holds_every_matching_event_once(Engine::MySql).await;
}

/// An answer as text: its status, content type, file name and body.
async fn fetch(
    server: &TestServer,
    token: &str,
    path: &str,
) -> (StatusCode, String, String, String) {
    let resp = reqwest::Client::new()
        .get(server.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let (kind, disposition) = (header("content-type"), header("content-disposition"));
    (status, kind, disposition, resp.text().await.unwrap())
}

/// One NDJSON export's answer: its status, content type and lines (or the error).
async fn export(server: &TestServer, token: &str, query: &str) -> (StatusCode, String, Vec<Value>) {
    ndjson(
        server,
        token,
        &format!("/admin/api/notification-outbox/export{query}"),
    )
    .await
}

async fn ndjson(server: &TestServer, token: &str, path: &str) -> (StatusCode, String, Vec<Value>) {
    let (status, kind, _, text) = fetch(server, token, path).await;
    if !status.is_success() {
        return (status, kind, vec![serde_json::from_str(&text).unwrap()]);
    }
    let lines = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (status, kind, lines)
}

/// A CSV export: its header and records.
async fn csv(
    server: &TestServer,
    token: &str,
    path: &str,
) -> (Vec<String>, Vec<csv::StringRecord>) {
    let (status, kind, disposition, text) = fetch(server, token, path).await;
    assert_eq!(status, StatusCode::OK, "{path}: {text}");
    assert_eq!(kind, "text/csv; charset=utf-8");
    assert!(
        disposition.starts_with("attachment; filename=\"herald-")
            && disposition.ends_with(".csv\""),
        "{disposition}"
    );
    parse_csv(&text)
}

fn parse_csv(text: &str) -> (Vec<String>, Vec<csv::StringRecord>) {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_string)
        .collect();
    let records = reader.records().map(Result::unwrap).collect();
    (header, records)
}

/// The cells of column `name` of every record.
fn column(header: &[String], records: &[csv::StringRecord], name: &str) -> Vec<String> {
    let at = header.iter().position(|h| h == name).unwrap();
    records.iter().map(|r| r[at].to_string()).collect()
}

fn ids(lines: &[Value]) -> HashSet<String> {
    let ids: HashSet<String> = lines
        .iter()
        .map(|l| l["event_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), lines.len(), "no event is exported twice");
    ids
}

async fn the_export_holds_every_matching_event_once(engine: Engine) {
    let receiver = Receiver::start().await;
    let server = start(engine).await;
    let operator = api_token(&server.db.url, Role::Operator).await;
    let admin = api_token(&server.db.url, Role::Admin).await;
    let reader = api_token(&server.db.url, Role::Reader).await;
    let client = reqwest::Client::new();

    // Runs that finish, each owing one callback, delivered.
    let runs = finished_runs(
        &server,
        &operator,
        &receiver,
        RUNS,
        json!({"secret": "payload-only"}),
    )
    .await;
    let completed = callbacks_once_all_are(&server, "completed", RUNS).await;
    assert_eq!(
        completed.len(),
        RUNS,
        "the precondition: every callback completed"
    );
    assert!(receiver.count() >= RUNS);
    let completed: HashSet<String> = completed.into_iter().collect();

    // An operator's export of the completed callbacks: every one, once, redacted.
    let (status, kind, lines) = export(&server, &operator, "?status=completed&kind=callback").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(kind, "application/x-ndjson");
    assert_eq!(ids(&lines), completed);
    for line in &lines {
        assert_eq!(line["status"], "completed");
        assert_eq!(line["source"], "jobs");
        assert!(
            line["destination"].as_str().unwrap().contains("127.0.0.1"),
            "{line}"
        );
        assert!(line["attempts"].as_i64().unwrap() >= 1);
        assert!(line["completed_at"].is_string());
        assert!(
            line.get("payload").is_none(),
            "no payload without data:read: {line}"
        );
        assert!(!line.to_string().contains("payload-only"));
    }
    // Newest first, as the listing pages.
    let created: Vec<i64> = lines
        .iter()
        .map(|l| {
            herald::service::parse_instant("created_at", l["created_at"].as_str().unwrap(), false)
                .unwrap()
        })
        .collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "{created:?}");

    // The same rows as CSV, in the same order: a header of the line's fields
    // (no payload without data:read), then one record an event; the Deliveries
    // page's address answers the same.
    let json_order: Vec<String> = lines
        .iter()
        .map(|l| l["event_id"].as_str().unwrap().to_string())
        .collect();
    for path in [
        "/admin/api/notification-outbox/export?status=completed&kind=callback&format=csv",
        "/deliveries/export?format=csv&status=completed&kind=callback",
    ] {
        let (header, records) = csv(&server, &operator, path).await;
        assert_eq!(header.first().map(String::as_str), Some("event_id"));
        assert!(!header.contains(&"payload".to_string()), "{header:?}");
        assert_eq!(column(&header, &records, "event_id"), json_order, "{path}");
        assert!(column(&header, &records, "status")
            .iter()
            .all(|s| s == "completed"));
        assert!(!records
            .iter()
            .any(|r| r.iter().any(|c| c.contains("payload-only"))));
    }

    // A reader may export (runs:read), redacted; an admin sees each payload.
    let (status, _, as_reader) = export(&server, &reader, "?status=completed").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&as_reader), completed);
    assert!(as_reader.iter().all(|l| l.get("payload").is_none()));
    let (_, _, as_admin) = export(&server, &admin, "").await;
    assert_eq!(ids(&as_admin), completed, "every event there is");
    for line in &as_admin {
        assert!(line["payload"].is_object(), "{line}");
        assert!(
            line["payload"].to_string().contains("payload-only"),
            "{line}"
        );
    }
    let (header, records) = csv(
        &server,
        &admin,
        &format!("/deliveries/export?format=csv&parent=run:{}", runs[3]),
    )
    .await;
    assert_eq!(header.last().map(String::as_str), Some("payload"));
    assert_eq!(records.len(), 1);
    assert!(column(&header, &records, "payload")[0].contains("payload-only"));
    // An empty CSV export still has its header.
    let (header, records) = csv(
        &server,
        &operator,
        "/deliveries/export?format=csv&kind=none",
    )
    .await;
    assert_eq!((header.len(), records.len()), (21, 0));

    // Filters: one run's events; a window in the future; a kind with none.
    let (_, _, one) = export(&server, &operator, &format!("?parent=run:{}", runs[7])).await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["parent_id"], runs[7].as_str());
    let (status, _, none) = export(&server, &operator, "?since=2999-01-01").await;
    assert_eq!((status, none.len()), (StatusCode::OK, 0));
    let (_, _, none) = export(&server, &operator, "?kind=delivery").await;
    assert!(none.is_empty());
    let (_, _, all_time) = export(&server, &operator, "?since=2000-01-01&until=2999-12-31").await;
    assert_eq!(ids(&all_time), completed);

    // Bad input: a 400 naming what is wrong; no token: 401.
    for (query, field) in [
        ("?status=sent", "status"),
        ("?since=yesterday", "since"),
        ("?until=soon", "until"),
        ("?parent=run", "parent"),
        ("?limit=10", "limit"),
        ("?format=xlsx", "format"),
    ] {
        let (status, _, answer) = export(&server, &operator, query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {answer:?}");
        assert!(answer[0].to_string().contains(field), "{query}: {answer:?}");
    }
    let anonymous = client
        .get(server.url("/admin/api/notification-outbox/export"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    // A signed-out browser following the page's link is sent to sign in, and back.
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_out = browser
        .get(server.url("/deliveries/export?format=csv"))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        signed_out.headers()["location"],
        "/login?next=%2Fdeliveries%2Fexport%3Fformat%3Dcsv"
    );

    // The command line gives the same rows from the store itself.
    let out = herald_cli(&[
        "events",
        "export",
        "--status",
        "completed",
        "--database-url",
        &server.db.url,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(ids(&lines), completed);
    assert!(lines.iter().all(|l| l.get("payload").is_none()));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("Exported {RUNS} events.")));
    let out = herald_cli(&[
        "events",
        "export",
        "--with-payloads",
        "--parent",
        &format!("run:{}", runs[3]),
        "--database-url",
        &server.db.url,
    ]);
    assert!(out.status.success());
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        line["payload"].to_string().contains("payload-only"),
        "{line}"
    );
    let out = herald_cli(&[
        "events",
        "export",
        "--format",
        "csv",
        "--status",
        "completed",
        "--database-url",
        &server.db.url,
    ]);
    assert!(out.status.success());
    let (header, records) = parse_csv(&String::from_utf8(out.stdout).unwrap());
    let exported: HashSet<String> = column(&header, &records, "event_id").into_iter().collect();
    assert_eq!((exported, records.len()), (completed.clone(), RUNS));
    for (args, says) in [
        (vec!["--since", "yesterday"], "since"),
        (vec!["--status", "sent"], "status"),
        (vec!["--format", "pdf"], "format"),
    ] {
        let mut all = vec!["events", "export", "--database-url", &server.db.url];
        all.extend(args.iter().copied());
        let out = herald_cli(&all);
        assert!(!out.status.success(), "{args:?}");
        assert!(out.stdout.is_empty(), "nothing written on bad input");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A store that is not there is not made: an export only reads.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let url = format!("sqlite://{}", missing.display());
    let out = herald_cli(&["events", "export", "--database-url", &url]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.db"));
    assert!(!missing.exists(), "no database file was created");
    receiver.stop();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_the_audit_trail_exports_every_entry_once() {
    the_audit_trail_exports_every_entry_once(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_the_audit_trail_exports_every_entry_once() {
    the_audit_trail_exports_every_entry_once(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_the_audit_trail_exports_every_entry_once() {
    the_audit_trail_exports_every_entry_once(Engine::MySql).await;
}

/// More retries than an export page holds, each audited once.
const RETRIES: usize = EXPORT_PAGE as usize + 9;

async fn the_audit_trail_exports_every_entry_once(engine: Engine) {
    let receiver = Receiver::start().await;
    receiver.set_status(400); // a permanent failure: each callback fails at once
    let server = start(engine).await;
    let operator = api_token(&server.db.url, Role::Operator).await;
    let reader = api_token(&server.db.url, Role::Reader).await;
    let client = reqwest::Client::new();
    finished_runs(&server, &operator, &receiver, RETRIES, json!({})).await;
    let failed = callbacks_once_all_are(&server, "failed", RETRIES).await;
    assert_eq!(
        failed.len(),
        RETRIES,
        "the precondition: every callback failed"
    );

    // Each failed callback retried once by the operator: one audit row each.
    for event_id in &failed {
        let resp = client
            .post(server.url(&format!("/api/v1/deliveries/{event_id}/retry")))
            .bearer_auth(&operator)
            .json(&json!({"kind": "callback", "expected_status": "failed"}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status(),
            StatusCode::OK,
            "{}",
            resp.text().await.unwrap()
        );
    }
    let retried: HashSet<String> = failed.into_iter().collect();

    // NDJSON: every entry once, newest first, as the Audit page shows it.
    let (status, kind, lines) = ndjson(&server, &operator, "/admin/api/audit/export").await;
    assert_eq!(
        (status, kind.as_str()),
        (StatusCode::OK, "application/x-ndjson")
    );
    // The trail holds the users and tokens the test made too: the retries are these.
    let lines: Vec<_> = lines
        .into_iter()
        .filter(|l| l["action"] == "retry")
        .collect();
    assert_eq!(lines.len(), RETRIES);
    let subjects: HashSet<String> = lines
        .iter()
        .map(|l| l["event_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(subjects, retried);
    let ids: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] > w[1]),
        "newest first, none twice"
    );
    for line in &lines {
        assert_eq!(line["action"], "retry", "{line}");
        assert_eq!(line["from_status"], "failed", "{line}");
        assert!(
            line["actor"].as_str().unwrap().contains("operator"),
            "{line}"
        );
        assert_eq!(line["affected"], 1, "{line}");
    }

    // CSV from the Audit page's address: the same entries in the same order.
    let (header, records) = csv(&server, &operator, "/audit/export?format=csv").await;
    assert_eq!(
        header,
        [
            "id",
            "event_id",
            "action",
            "actor",
            "from_status",
            "acknowledged_duplicate_risk",
            "affected",
            "at",
            "reason"
        ]
    );
    let action = header.iter().position(|h| h == "action").unwrap();
    let records: Vec<_> = records
        .into_iter()
        .filter(|r| &r[action] == "retry")
        .collect();
    assert_eq!(column(&header, &records, "id"), ids);
    assert!(column(&header, &records, "acknowledged_duplicate_risk")
        .iter()
        .all(|a| a == "false"));

    // Readers may not read the trail; a bad format or an unknown parameter is a 400.
    for path in ["/admin/api/audit/export", "/audit/export?format=csv"] {
        let (status, _, _, body) = fetch(&server, &reader, path).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert!(body.contains("runs:write"), "{body}");
    }
    for (path, field) in [
        ("/audit/export?format=pdf", "format"),
        ("/admin/api/audit/export?after=x", "after"),
    ] {
        let (status, _, _, body) = fetch(&server, &operator, path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(body.contains(field), "{path}: {body}");
    }
    receiver.stop();
    server.stop().await;
}

async fn start(engine: Engine) -> TestServer {
    TestServer::start_on(TestDb::new(engine).await, |args| {
        args.destination_allowlist = Some("127.0.0.0/8".into());
        args.callback_secret_ref = Some(testkit::secret_ref(CALLBACK_SECRET));
        args.worker_poll_interval_ms = Some(50);
    })
    .await
}

/// `count` runs, each with a callback to `receiver`, moved to `succeeded` with
/// `result` a hundred a request; their ids.
async fn finished_runs(
    server: &TestServer,
    token: &str,
    receiver: &Receiver,
    count: usize,
    result: Value,
) -> Vec<String> {
    let client = reqwest::Client::new();
    let mut runs = Vec::new();
    for _ in 0..count {
        runs.push(
            testkit::create_run_via_api(&client, &server.url(""), token, Some(&receiver.url()))
                .await,
        );
    }
    for chunk in runs.chunks(100) {
        let items: Vec<Value> = chunk
            .iter()
            .map(|id| json!({"run_id": id, "to": "succeeded", "result": result}))
            .collect();
        let resp = client
            .post(server.url("/api/v1/runs/transitions"))
            .bearer_auth(token)
            .json(&json!({ "transitions": items }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    runs
}

/// The callbacks' event ids once `count` of them are in `status`, read from the store.
async fn callbacks_once_all_are(server: &TestServer, status: &str, count: usize) -> Vec<String> {
    let store = server.db.store().await;
    let ids_in_status = async || -> Vec<String> {
        let sql = format!(
            "SELECT event_id FROM outbox_events WHERE status = '{status}' AND kind = 'callback'"
        );
        sqlx::query_scalar(&sql)
            .fetch_all(store.pool())
            .await
            .unwrap()
    };
    wait_for(
        &format!("every callback {status}"),
        Duration::from_secs(60),
        async || ids_in_status().await.len() == count,
    )
    .await;
    let ids = ids_in_status().await;
    store.close().await;
    ids
}

fn herald_cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .output()
        .unwrap()
}
