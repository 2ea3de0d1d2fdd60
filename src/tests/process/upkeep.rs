//! Keeping PostgreSQL's hot tables small (`store::upkeep`, issue 9 item 3), on a
//! real server: once churn leaves enough dead rows, maintenance vacuums and
//! analyzes the table (whether or not autovacuum is on; the test turns it off for
//! its table so that only the upkeep cleans), one node at a time; below the
//! threshold, and on the other engines, it does nothing. The attempt log, which
//! retention empties as deliveries fill it, is kept small the same way.

use std::time::Duration;

use herald::outbox::model::{NewEvent, Source};
use herald::store::ports::OutboxStore;
use herald::store::{Engine, SqlStore};
use sqlx::{Connection, Executor};
use testkit::{enqueue, wait_for, TestDb};

fn event(i: usize) -> NewEvent {
    NewEvent {
        event_id: format!("churn-{i}"),
        source: Source::Jobs,
        kind: "test".into(),
        parent_type: "run".into(),
        parent_id: "upkeep".into(),
        payload: "{}".into(),
        redeliverable: true,
        max_attempts: 6,
        delay_ms: 0,
        destination: None,
        trace_parent: None,
        lane: None,
    }
}

/// A counter of `table` from `pg_stat_user_tables`.
async fn table_stat(store: &SqlStore, table: &str, column: &str) -> i64 {
    let sql = format!(
        "SELECT CAST({column} AS BIGINT) FROM pg_stat_user_tables WHERE relname = '{table}'"
    );
    sqlx::query_scalar::<_, i64>(&sql)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

async fn outbox_stat(store: &SqlStore, column: &str) -> i64 {
    table_stat(store, "outbox_events", column).await
}

async fn dead_rows(store: &SqlStore) -> i64 {
    outbox_stat(store, "n_dead_tup").await
}

async fn vacuums(store: &SqlStore) -> i64 {
    outbox_stat(store, "vacuum_count").await
}

/// Runs `sql` on one connection and has that backend publish its row counts at
/// once, instead of when it next idles (at most once a second).
async fn execute_and_publish(store: &SqlStore, sql: &str) -> u64 {
    let mut conn = store.pool().acquire().await.unwrap();
    let done = (&mut *conn).execute(sql).await.unwrap();
    (&mut *conn)
        .execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    done.rows_affected()
}

/// PostgreSQL counts a backend's row changes in its own memory and publishes them
/// when it goes idle, at most once a second (and within ten seconds): statistics
/// lag the writes. Waits until the published ones show every insert (`n_tup_ins`),
/// then analyzes the table, so they are exact: no dead rows, no changes since.
async fn statistics_made_current(store: &SqlStore, inserted: i64) {
    wait_for(
        "the statistics to count every insert",
        Duration::from_secs(60),
        async || outbox_stat(store, "n_tup_ins").await >= inserted,
    )
    .await;
    store.pool().execute("ANALYZE outbox_events").await.unwrap();
    assert_eq!(dead_rows(store).await, 0, "no dead rows yet");
    assert_eq!(
        outbox_stat(store, "n_mod_since_analyze").await,
        0,
        "nothing changed since the ANALYZE"
    );
    assert_eq!(outbox_stat(store, "n_live_tup").await, inserted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn churned_outbox_is_vacuumed_once_by_one_node_and_not_below_the_threshold() {
    let db = TestDb::new(Engine::Postgres).await;
    let store = db.store().await;
    // Only this test's upkeep cleans the table (a server with autovacuum on could
    // vacuum it between the steps below).
    store
        .pool()
        .execute("ALTER TABLE outbox_events SET (autovacuum_enabled = off)")
        .await
        .unwrap();
    let events: Vec<NewEvent> = (0..12_000).map(event).collect();
    enqueue(&store, &events).await;
    // Below the threshold (12,000 live rows, none dead, none changed since the
    // statistics were made current): nothing to do.
    statistics_made_current(&store, 12_000).await;
    assert!(store.tidy_hot_tables().await.unwrap().is_empty());

    // Every event rewritten once, as a claim would: 12,000 dead rows. The updating
    // backend publishes its counts at once instead of when it next idles.
    execute_and_publish(
        &store,
        "UPDATE outbox_events SET updated_at = updated_at + 1",
    )
    .await;
    wait_for(
        "the statistics to count the dead rows",
        Duration::from_secs(60),
        async || dead_rows(&store).await >= 12_000,
    )
    .await;

    // Another node holds the table's vacuum lock: this one skips it.
    let mut other = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    other
        .execute("SELECT pg_advisory_lock(hashtext('herald:vacuum:outbox_events'))")
        .await
        .unwrap();
    let skipped = store.tidy_hot_tables().await.unwrap();
    assert!(
        skipped.iter().all(|t| t.table != "outbox_events"),
        "vacuumed while another node held the lock: {skipped:?}"
    );
    other
        .execute("SELECT pg_advisory_unlock(hashtext('herald:vacuum:outbox_events'))")
        .await
        .unwrap();
    other.close().await.unwrap();

    let tidied = store.tidy_hot_tables().await.unwrap();
    let outbox = tidied
        .iter()
        .find(|t| t.table == "outbox_events")
        .expect("the churned outbox was vacuumed");
    assert!(outbox.dead_rows >= 12_000, "{outbox:?}");
    wait_for(
        "the vacuum to show in the statistics",
        Duration::from_secs(20),
        async || vacuums(&store).await >= 1 && dead_rows(&store).await < 1_000,
    )
    .await;
    // Clean now: the next pass leaves it alone.
    let again = store.tidy_hot_tables().await.unwrap();
    assert!(
        again.iter().all(|t| t.table != "outbox_events"),
        "{again:?}"
    );
    store.close().await;
    db.drop_db().await;
}

/// The attempt log churns as fast as the outbox at a steady state with retention
/// on: every delivery adds a row, every retention chunk deletes one. Its dead
/// rows are vacuumed too, or each chunk that looks up an event's attempts reads
/// through them (found at 1,000 runs/s with retention 1m on PostgreSQL).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attempt_log_retention_emptied_is_vacuumed_too() {
    let db = TestDb::new(Engine::Postgres).await;
    let store = db.store().await;
    store
        .pool()
        .execute("ALTER TABLE outbox_attempts SET (autovacuum_enabled = off)")
        .await
        .unwrap();
    let inserted = execute_and_publish(
        &store,
        "INSERT INTO outbox_attempts (event_id, attempt, cycle, started_at, finished_at, \
         outcome, worker) SELECT 'gone-' || i, 1, 0, 0, 1, 'delivered', 'upkeep-test' \
         FROM generate_series(1, 12000) AS i",
    )
    .await;
    assert_eq!(inserted, 12_000);
    // Retention removes them all, as it does once their events are past it.
    let deleted = execute_and_publish(&store, "DELETE FROM outbox_attempts").await;
    assert_eq!(deleted, 12_000);
    wait_for(
        "the statistics to count the attempt log's dead rows",
        Duration::from_secs(60),
        async || table_stat(&store, "outbox_attempts", "n_dead_tup").await >= 12_000,
    )
    .await;

    let tidied = store.tidy_hot_tables().await.unwrap();
    let attempts = tidied
        .iter()
        .find(|t| t.table == "outbox_attempts")
        .expect("the emptied attempt log was vacuumed");
    assert!(attempts.dead_rows >= 12_000, "{attempts:?}");
    wait_for(
        "the vacuum to show in the statistics",
        Duration::from_secs(20),
        async || table_stat(&store, "outbox_attempts", "vacuum_count").await >= 1,
    )
    .await;
    store.close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn engines_that_clean_up_by_themselves_are_left_alone() {
    for engine in [Engine::Sqlite, Engine::MySql] {
        let db = TestDb::new(engine).await;
        let store = db.store().await;
        // The same churn that makes PostgreSQL's upkeep vacuum (12,000 rows, every
        // one rewritten): past the threshold, so only the engine decides.
        let events: Vec<NewEvent> = (0..12_000).map(event).collect();
        enqueue(&store, &events).await;
        let rewritten = store
            .pool()
            .execute("UPDATE outbox_events SET updated_at = updated_at + 1")
            .await
            .unwrap();
        assert_eq!(rewritten.rows_affected(), 12_000, "{engine:?}");
        assert!(
            store.tidy_hot_tables().await.unwrap().is_empty(),
            "{engine:?} cleans up by itself"
        );
        store.close().await;
        db.drop_db().await;
    }
}
