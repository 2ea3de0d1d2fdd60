//! A retention pass SIGKILLed after a chunk was archived and before its delete
//! committed (issue 21): nothing is lost — the rows are still in the store, the
//! next pass archives them again (an identical copy, said so by `herald archive
//! verify`) and removes them — and the archive checks out from the command line.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use herald::outbox::archive::read_rows;
use herald::outbox::retention::{LEASE_MS, TEST_PAUSE_ENV};
use herald::store::{Engine, SqlStore};
use testkit::{enqueue, parented, test_event as event, wait_for, HeraldProcess, TestDb};

async fn count(store: &SqlStore, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(store.pool())
        .await
        .unwrap()
}

fn verify(dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["archive", "verify"])
        .arg(dir)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pass_killed_between_archiving_and_deleting_loses_nothing() {
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let ids: Vec<String> = (0..5).map(|i| format!("old-{i}")).collect();
    for id in &ids {
        enqueue(&store, &[parented(event(id), "run-ret")]).await;
    }
    let now = store.engine().now_ms();
    sqlx::query(&format!(
        "UPDATE outbox_events SET status = 'completed', updated_at = {now} - 7200000, \
         next_attempt_at = {now} - 7200000"
    ))
    .execute(store.pool())
    .await
    .unwrap();
    for id in &ids {
        sqlx::query(
            "INSERT INTO outbox_attempts (event_id, attempt, cycle, started_at, finished_at, outcome, worker) \
             VALUES (?, 1, 1, 1, 2, 'completed', 'w')",
        )
        .bind(id)
        .execute(store.pool())
        .await
        .unwrap();
    }

    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    let config = dir.path().join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[retention]\ncompleted = \"1h\"\nchunk_rows = 2\ninterval = \"200ms\"\narchive_dir = {:?}\n",
            archive.display().to_string()
        ),
    )
    .unwrap();
    let marker = dir.path().join("archived");
    let pause = format!("archived:{}", marker.display());
    let config_flag = config.display().to_string();
    let mut herald = HeraldProcess::spawn_with_env(
        &db.url,
        &["--config", &config_flag],
        &[(TEST_PAUSE_ENV, &pause)],
    );
    herald.ready().await;
    wait_for(
        "the first chunk to be archived",
        Duration::from_secs(30),
        async || marker.exists(),
    )
    .await;
    herald.kill();

    // Killed between the archive and the delete: every row is still in the store,
    // and the first chunk's attempt logs are already in the archive.
    assert_eq!(count(&store, "outbox_events").await, 5);
    assert_eq!(count(&store, "outbox_attempts").await, 5);
    let mut before = 0;
    read_rows(&archive, |table, _| {
        assert_eq!(table.name, "outbox_attempts");
        before += 1;
    })
    .unwrap();
    assert_eq!(
        before, 2,
        "the killed chunk's two attempt logs were archived"
    );

    // The killed pass's lease has to expire first (a new process is a new node).
    let mut herald = HeraldProcess::spawn(&db.url, &["--config", &config_flag]);
    let base = herald.ready().await;
    wait_for(
        "the next pass to remove every old event",
        Duration::from_millis(LEASE_MS as u64) + Duration::from_secs(30),
        async || count(&store, "outbox_events").await == 0,
    )
    .await;
    // Prometheus sees what the pass removed (counted once each chunk commits).
    let removed_line =
        "herald_retention_rows_removed_total{store=\"jobs+approvals\",table=\"outbox_events\"} 5";
    wait_for(
        "the metrics to count the removed events",
        Duration::from_secs(10),
        async || {
            let metrics = reqwest::get(format!("{base}/metrics")).await;
            match metrics {
                Ok(resp) => resp.text().await.unwrap_or_default().contains(removed_line),
                Err(_) => false,
            }
        },
    )
    .await;
    herald.kill();
    assert_eq!(count(&store, "outbox_attempts").await, 0);

    // Every removed row is archived; the killed chunk's attempt logs twice, as
    // identical copies; no event twice (the kill came before they were written).
    let mut copies: BTreeMap<(String, String), Vec<serde_json::Value>> = BTreeMap::new();
    read_rows(&archive, |table, row| {
        let id = row["event_id"].as_str().unwrap().to_string();
        copies
            .entry((table.name.to_string(), id))
            .or_default()
            .push(row);
    })
    .unwrap();
    for id in &ids {
        let events = &copies[&("outbox_events".to_string(), id.clone())];
        assert_eq!(events.len(), 1, "{id} archived once");
        assert_eq!(events[0]["payload"], "{\"n\":1}");
        let attempts = &copies[&("outbox_attempts".to_string(), id.clone())];
        assert!(
            attempts.iter().all(|a| a == &attempts[0]),
            "{id}: copies are identical"
        );
    }
    let twice = copies
        .iter()
        .filter(|((table, _), rows)| table == "outbox_attempts" && rows.len() == 2)
        .count();
    assert_eq!(twice, 2, "the killed chunk's attempt logs, archived again");

    let out = verify(&archive);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("outbox_events: 5 rows"), "{stdout}");
    assert!(stdout.contains("outbox_attempts: 7 rows"), "{stdout}");

    // Bad input: a folder without archives, and a damaged file, each a clear
    // message and a non-zero exit.
    let empty = tempfile::tempdir().unwrap();
    let out = verify(empty.path());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no archive files"));
    let damaged = archive.join("runs.20260101T000000Z-deadbeef.ndjson.gz");
    std::fs::write(&damaged, b"this is not gzip").unwrap();
    let out = verify(&archive);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("runs.20260101T000000Z-deadbeef"),
        "{stderr}"
    );
    store.close().await;
}
