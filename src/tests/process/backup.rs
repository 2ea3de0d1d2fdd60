//! `herald backup --to FILE` (issue 21): a copy of a SQLite store taken while
//! producers create and move runs as fast as they can holds every run (and every
//! move) acknowledged before the backup started, checks out, and serves; bad
//! input is a clear message and a non-zero exit.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herald::store::{Engine, SqlStore, StoreOptions};
use serde_json::{json, Value};
use testkit::{api_token, HeraldProcess, TestDb};
use vocab::Role;

fn herald(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .output()
        .unwrap()
}

/// What the producers were told, by run: when its creation and its last move
/// were acknowledged, and to which state.
#[derive(Default)]
struct Acknowledged {
    created: HashMap<String, Instant>,
    moved: HashMap<String, (Instant, String)>,
    transitions: u64,
}

async fn produce(base: String, token: String, acked: Arc<Mutex<Acknowledged>>, until: Instant) {
    let client = reqwest::Client::new();
    while Instant::now() < until {
        let resp = client
            .post(format!("{base}/api/v1/runs"))
            .bearer_auth(&token)
            .json(&json!({"type": "etl", "tenant": "backup"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        let run: Value = resp.json().await.unwrap();
        let id = run["id"].as_str().unwrap().to_string();
        acked
            .lock()
            .unwrap()
            .created
            .insert(id.clone(), Instant::now());
        for to in ["running", "succeeded"] {
            let resp = client
                .post(format!("{base}/api/v1/runs/{id}/transitions"))
                .bearer_auth(&token)
                .json(&json!({"to": to}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            let mut acked = acked.lock().unwrap();
            acked
                .moved
                .insert(id.clone(), (Instant::now(), to.to_string()));
            acked.transitions += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_load_holds_every_acknowledged_run_and_serves() {
    let db = TestDb::new(Engine::Sqlite).await;
    let token = api_token(&db.url, Role::Operator).await;
    let mut serving = HeraldProcess::spawn(&db.url, &[]);
    let base = serving.ready().await;

    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    let load_started = Instant::now();
    let until = load_started + Duration::from_secs(4);
    let producers: Vec<_> = (0..48)
        .map(|_| tokio::spawn(produce(base.clone(), token.clone(), acked.clone(), until)))
        .collect();
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("herald-backup.db");
    let copy_arg = copy.display().to_string();
    let started = Instant::now();
    let (url, to) = (db.url.clone(), copy_arg.clone());
    let out = tokio::task::spawn_blocking(move || {
        herald(&["backup", "--to", &to, "--database-url", &url])
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("checked it"), "{stdout}");
    for producer in producers {
        producer.await.unwrap();
    }
    let acked = Arc::try_unwrap(acked).ok().unwrap().into_inner().unwrap();
    let rate = acked.transitions as f64 / load_started.elapsed().as_secs_f64();
    println!("transitions acknowledged during the test: {rate:.0}/s");
    let before: Vec<&String> = acked
        .created
        .iter()
        .filter(|(_, at)| **at < started)
        .map(|(id, _)| id)
        .collect();
    assert!(before.len() > 10, "the load ran before the backup");
    let after = acked.created.values().filter(|at| **at > started).count();
    assert!(after > 0, "the load went on while the backup ran");

    // Every run acknowledged before the backup started is in it, each at least
    // in the last state acknowledged before then.
    let backup = SqlStore::connect(&StoreOptions {
        url: format!("sqlite://{copy_arg}"),
        max_connections: 1,
    })
    .await
    .unwrap();
    let stored: HashMap<String, String> = sqlx::query_as("SELECT id, status FROM runs")
        .fetch_all(backup.pool())
        .await
        .unwrap()
        .into_iter()
        .collect();
    backup.close().await;
    for id in &before {
        let status = stored
            .get(*id)
            .unwrap_or_else(|| panic!("run {id} is missing"));
        if let Some((at, to)) = acked.moved.get(*id) {
            if *at < started && to == "succeeded" {
                assert_eq!(status, "succeeded", "run {id}");
            }
        }
    }
    serving.kill();

    // The copy serves: a new process on it answers for a run.
    let restored_dir = tempfile::tempdir().unwrap();
    let restored = restored_dir.path().join("herald.db");
    std::fs::copy(&copy, &restored).unwrap();
    let restored_url = format!("sqlite://{}", restored.display());
    let mut herald_on_copy = HeraldProcess::spawn(&restored_url, &[]);
    let base = herald_on_copy.ready().await;
    let resp = reqwest::Client::new()
        .get(format!("{base}/api/v1/runs/{}", before[0]))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    herald_on_copy.kill();

    // Bad input: a file that exists is never overwritten; other engines are
    // pointed to their own tools.
    let out = herald(&["backup", "--to", &copy_arg, "--database-url", &db.url]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    let postgres = TestDb::new(Engine::Postgres).await;
    let out = herald(&[
        "backup",
        "--to",
        "/tmp/never.db",
        "--database-url",
        &postgres.url,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("pg_dump"));
    postgres.drop_db().await;
}
