//! The reconciliation export (issue 21, item 5) on all three engines: `GET
//! /admin/api/notification-outbox/export` streams every matching event as NDJSON
//! across several pages, each once; payloads only for `data:read`; a bad filter is
//! a `400` naming it. `herald events export` gives the same rows from the command
//! line, and refuses bad input with a message and a non-zero exit.

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

/// One export's answer: its status, content type and lines.
async fn export(server: &TestServer, token: &str, query: &str) -> (StatusCode, String, Vec<Value>) {
    let resp = reqwest::Client::new()
        .get(server.url(&format!("/admin/api/notification-outbox/export{query}")))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let kind = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = resp.text().await.unwrap();
    if !status.is_success() {
        return (status, kind, vec![serde_json::from_str(&text).unwrap()]);
    }
    let lines = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (status, kind, lines)
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
    let server = TestServer::start_on(TestDb::new(engine).await, |args| {
        args.destination_allowlist = Some("127.0.0.0/8".into());
        args.callback_secret_ref = Some(testkit::secret_ref(CALLBACK_SECRET));
        args.worker_poll_interval_ms = Some(50);
    })
    .await;
    let operator = api_token(&server.db.url, Role::Operator).await;
    let admin = api_token(&server.db.url, Role::Admin).await;
    let reader = api_token(&server.db.url, Role::Reader).await;
    let client = reqwest::Client::new();

    // Runs that finish, each owing one callback, delivered; and one that is only
    // running (owing nothing).
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        runs.push(
            testkit::create_run_via_api(&client, &server.url(""), &operator, Some(&receiver.url()))
                .await,
        );
    }
    for chunk in runs.chunks(100) {
        let items: Vec<Value> = chunk
            .iter()
            .map(
                |id| json!({"run_id": id, "to": "succeeded", "result": {"secret": "payload-only"}}),
            )
            .collect();
        let resp = client
            .post(server.url("/api/v1/runs/transitions"))
            .bearer_auth(&operator)
            .json(&json!({ "transitions": items }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let store = server.db.store().await;
    let completed_ids = async || -> Vec<String> {
        sqlx::query_scalar(
            "SELECT event_id FROM outbox_events WHERE status = 'completed' AND kind = 'callback'",
        )
        .fetch_all(store.pool())
        .await
        .unwrap()
    };
    wait_for(
        "every callback completed",
        Duration::from_secs(60),
        async || completed_ids().await.len() == RUNS,
    )
    .await;
    let completed = completed_ids().await;
    store.close().await;
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
    for (args, says) in [
        (vec!["--since", "yesterday"], "since"),
        (vec!["--status", "sent"], "status"),
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

fn herald_cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .output()
        .unwrap()
}
