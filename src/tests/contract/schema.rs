//! The schema: migrations apply on every engine, twice without harm, and leave
//! the store ready; a migration that reshapes a table carries its rows over.

use herald::store::ports::OutboxStore;
use herald::store::{SqlStore, StoreOptions};
use sqlx::Executor;
use testkit::TestDb;

testkit::contract_tests!(
    migrations_are_idempotent_and_make_the_store_ready,
    dead_letters_written_before_migration_9_keep_their_event_s_cycle,
    a_database_a_newer_release_migrated_further_still_opens,
);

async fn migrations_are_idempotent_and_make_the_store_ready(db: &TestDb) {
    let store = db.store().await;
    assert!(store.is_ready().await);
    store.migrate().await.expect("second migrate is a no-op");
    assert!(store.is_ready().await);
    store.close().await;
}

/// A rollback (or an old node restarting mid-rollout) opens a database that a
/// newer release has migrated further: the migration this build does not know is
/// left alone, and the store opens and is ready.
async fn a_database_a_newer_release_migrated_further_still_opens(db: &TestDb) {
    let store = db.store().await;
    let newer = "INSERT INTO _sqlx_migrations (version, description, success, checksum, \
                 execution_time) VALUES (999999, 'a newer release', TRUE, ?, 0)";
    sqlx::query(&store.engine().sql(newer))
        .bind(vec![7u8; 48])
        .execute(store.pool())
        .await
        .expect("the newer release's migration recorded");
    store
        .migrate()
        .await
        .expect("a migration this build does not know is left alone");
    assert!(store.is_ready().await);
    store.close().await;
    let reopened = db.store().await;
    assert!(reopened.is_ready().await);
    reopened.close().await;
}

/// A database at migration 8 holds the dead letter of an event failed on its third
/// cycle, and that of an event an operator has retried since (pending on cycle 2):
/// migration 9 (one dead letter per failed cycle) keeps both, each with the cycle
/// that failed, so the retried event's next failure sits beside its first, and
/// there are never two for one cycle.
async fn dead_letters_written_before_migration_9_keep_their_event_s_cycle(db: &TestDb) {
    let store = SqlStore::connect(&StoreOptions {
        url: db.url.clone(),
        max_connections: 4,
    })
    .await
    .unwrap();
    let up_to_8 = sqlx::migrate::Migrator {
        migrations: store
            .engine()
            .migrator()
            .iter()
            .filter(|m| m.version <= 8)
            .cloned()
            .collect::<Vec<_>>()
            .into(),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    up_to_8.run(store.pool()).await.unwrap();
    // Written as a release of migration 8 wrote them (today's insert names
    // columns that came later).
    for sql in [
        "INSERT INTO outbox_events (event_id, source, kind, parent_type, parent_id, payload, \
         redeliverable, status, attempts, cycle, cycle_attempts, max_attempts, next_attempt_at, \
         created_at, updated_at) VALUES \
         ('old', 'jobs', 'test', 'run', 'run-1', '{\"n\":1}', 1, 'pending', 0, 1, 0, 6, 0, 1, 1), \
         ('retried', 'jobs', 'test', 'run', 'run-1', '{\"n\":1}', 1, 'pending', 0, 1, 0, 6, 0, 1, 1)",

        "UPDATE outbox_events SET status = 'failed', cycle = 3 WHERE event_id = 'old'",
        "INSERT INTO outbox_dead_letters (id, event_id, kind, reason, created_at) \
         VALUES ('dead_letter_old', 'old', 'test', 'gone', 1)",
        "UPDATE outbox_events SET status = 'pending', cycle = 2 WHERE event_id = 'retried'",
        "INSERT INTO outbox_dead_letters (id, event_id, kind, reason, created_at) \
         VALUES ('dead_letter_retried', 'retried', 'test', 'first failure', 1)",
    ] {
        store.pool().execute(sql).await.unwrap();
    }

    store.migrate().await.unwrap();
    assert!(store.is_ready().await);
    assert_eq!(
        store.dead_letters("old").await.unwrap(),
        vec![(3, "gone".to_string())]
    );
    let later = "INSERT INTO outbox_dead_letters (id, event_id, cycle, kind, reason, created_at) \
                 VALUES ('dead_letter_old_4', 'old', 4, 'test', 'gone again', 2)";
    store.pool().execute(later).await.unwrap();
    assert_eq!(store.dead_letter_count("old").await.unwrap(), 2);
    // The retried event fails again, on its cycle 2, through the store's settle.
    let claimed = testkit::claim(&store, &testkit::claim_request(10, 30_000)).await;
    assert_eq!(claimed.len(), 1, "only the retried event is due");
    assert_eq!(claimed[0].cycle, 2);
    let mut failing = testkit::settlement(
        &claimed[0],
        herald::outbox::model::Settle::Failed { exhausted: false },
    );
    failing.error = Some("second failure".into());
    assert_eq!(store.settle(&[failing]).await.unwrap(), vec![true]);
    assert_eq!(
        store.dead_letters("retried").await.unwrap(),
        vec![
            (1, "first failure".to_string()),
            (2, "second failure".to_string())
        ]
    );
    let same_cycle =
        "INSERT INTO outbox_dead_letters (id, event_id, cycle, kind, reason, created_at) \
                      VALUES ('another', 'old', 4, 'test', 'twice', 3)";
    assert!(
        store.pool().execute(same_cycle).await.is_err(),
        "one dead letter per cycle"
    );
    store.close().await;
}

/// The SQLite store commits durably: `synchronous = FULL` (2) in WAL, on its
/// connection and again on a store reopened over the same file (the pragmas are
/// set per connection, not kept in the file).
#[tokio::test]
async fn every_sqlite_connection_is_synchronous_full_in_wal() {
    let db = TestDb::new(herald::store::Engine::Sqlite).await;
    for _ in 0..2 {
        let store = db.store().await;
        let mut conn = store.pool().acquire().await.unwrap();
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(synchronous, 2, "FULL");
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(journal, "wal");
        drop(conn);
        store.close().await;
    }
    db.drop_db().await;
}
