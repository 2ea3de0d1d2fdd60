//! Group commit (`store::group_commit`, issue 9) on real databases: a unit that
//! fails is rolled back alone while the rest of its group commits; a group whose
//! COMMIT fails (a real deferred constraint, checked only at COMMIT) fails every
//! unit and keeps none; many parallel transitions through the HTTP API each commit
//! exactly once with their events.

use std::time::Duration;

use herald::store::ports::WriteTx;
use herald::store::{Engine, GroupCommitter, GroupLimits, SqlStore, StoreError, UnitFuture};
use sqlx::Executor;
use testkit::{create_run_via_api, TestDb, TestServer};

/// Groups close only when `units` have arrived (or after a long linger), so the
/// units a test sends together are one group.
fn committer(store: &SqlStore, units: usize) -> GroupCommitter {
    GroupCommitter::start(
        store.clone(),
        GroupLimits {
            max_units: units,
            linger: Duration::from_secs(10),
        },
    )
}

async fn add_type(tx: &mut WriteTx, engine: Engine, name: &str) -> Result<(), StoreError> {
    let sql = engine
        .sql("INSERT INTO run_types (run_type) VALUES (?)")
        .into_owned();
    sqlx::query(&sql).bind(name).execute(&mut **tx).await?;
    Ok(())
}

async fn types(store: &SqlStore) -> Vec<String> {
    sqlx::query_scalar::<_, String>("SELECT run_type FROM run_types ORDER BY run_type")
        .fetch_all(store.pool())
        .await
        .unwrap()
}

/// A unit's work: inserts `name` and then, when `fail` is set, hits a real
/// constraint (a second insert of the same key) and returns that error.
fn insert<'a>(
    tx: &'a mut WriteTx,
    engine: Engine,
    name: &'static str,
    fail: bool,
) -> UnitFuture<'a, &'static str, StoreError> {
    Box::pin(async move {
        add_type(tx, engine, name).await?;
        if fail {
            add_type(tx, engine, name).await?;
        }
        Ok(name)
    })
}

/// A unit's work whose statement succeeds but whose row breaks a deferred
/// foreign key, so the group's COMMIT fails.
fn orphan(tx: &mut WriteTx) -> UnitFuture<'_, &'static str, StoreError> {
    Box::pin(async move {
        sqlx::query("INSERT INTO fault_child (parent) VALUES (42)")
            .execute(&mut **tx)
            .await?;
        Ok("orphan")
    })
}

async fn a_failing_unit_rolls_back_alone(db: &TestDb) {
    let (store, engine) = (db.store().await, db.engine);
    let group = committer(&store, 3);
    let (a, b, c) = tokio::join!(
        group.run(move |tx| insert(tx, engine, "alpha", false)),
        group.run(move |tx| insert(tx, engine, "bravo", true)),
        group.run(move |tx| insert(tx, engine, "charlie", false)),
    );
    assert_eq!(a.unwrap(), "alpha");
    assert!(
        matches!(b, Err(StoreError::Database(_))),
        "the failing unit gets its own error: {b:?}"
    );
    assert_eq!(c.unwrap(), "charlie");
    assert_eq!(types(&store).await, vec!["alpha", "charlie"]);
    store.close().await;
}

async fn a_failed_commit_fails_every_unit(db: &TestDb) {
    let (store, engine) = (db.store().await, db.engine);
    // A deferred foreign key is checked at COMMIT, not by the statement: the
    // group's COMMIT itself fails, inside the engine.
    let setup: &[&str] = match db.engine {
        Engine::Postgres => &[
            "CREATE TABLE fault_parent (id BIGINT PRIMARY KEY)",
            "CREATE TABLE fault_child (parent BIGINT REFERENCES fault_parent (id) DEFERRABLE INITIALLY DEFERRED)",
        ],
        _ => &[
            "CREATE TABLE fault_parent (id INTEGER PRIMARY KEY)",
            "CREATE TABLE fault_child (parent INTEGER REFERENCES fault_parent (id) DEFERRABLE INITIALLY DEFERRED)",
        ],
    };
    for sql in setup {
        store.pool().execute(*sql).await.unwrap();
    }
    let group = committer(&store, 3);
    let (a, b, c) = tokio::join!(
        group.run(move |tx| insert(tx, engine, "alpha", false)),
        group.run(orphan),
        group.run(move |tx| insert(tx, engine, "charlie", false)),
    );
    for result in [a, b, c] {
        assert!(
            matches!(result, Err(StoreError::GroupCommit { .. })),
            "every unit of a group that did not commit fails: {result:?}"
        );
    }
    assert!(
        types(&store).await.is_empty(),
        "nothing of the group was kept"
    );
    // The writer goes on: its next group commits.
    let (d, e, f) = tokio::join!(
        group.run(move |tx| insert(tx, engine, "delta", false)),
        group.run(move |tx| insert(tx, engine, "echo", false)),
        group.run(move |tx| insert(tx, engine, "foxtrot", false)),
    );
    assert_eq!(
        (d.unwrap(), e.unwrap(), f.unwrap()),
        ("delta", "echo", "foxtrot")
    );
    assert_eq!(types(&store).await, vec!["delta", "echo", "foxtrot"]);
    store.close().await;
}

mod sqlite {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_failing_unit_rolls_back_alone() {
        let db = TestDb::new(Engine::Sqlite).await;
        super::a_failing_unit_rolls_back_alone(&db).await;
        db.drop_db().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_failed_commit_fails_every_unit() {
        let db = TestDb::new(Engine::Sqlite).await;
        super::a_failed_commit_fails_every_unit(&db).await;
        db.drop_db().await;
    }
}

mod postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_failing_unit_rolls_back_alone() {
        let db = TestDb::new(Engine::Postgres).await;
        super::a_failing_unit_rolls_back_alone(&db).await;
        db.drop_db().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_failed_commit_fails_every_unit() {
        let db = TestDb::new(Engine::Postgres).await;
        super::a_failed_commit_fails_every_unit(&db).await;
        db.drop_db().await;
    }
}

mod mysql {
    use super::*;

    /// MariaDB has no deferred constraints, so only the per-unit rollback here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_failing_unit_rolls_back_alone() {
        let db = TestDb::new(Engine::MySql).await;
        super::a_failing_unit_rolls_back_alone(&db).await;
        db.drop_db().await;
    }
}

/// 300 transitions at once through the JSON API of a server on SQLite (where
/// transitions are group-committed): each is answered 200 once, each run ends
/// `succeeded`, and each owes exactly its one callback event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_parallel_transitions_each_commit_once_with_their_events() {
    let server = TestServer::start_with(|args| {
        // The callbacks point at a closed port: only what was committed matters here.
        args.worker_poll_interval_ms = Some(600_000);
    })
    .await;
    let token = server.token(vocab::Role::Operator).await;
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for _ in 0..300 {
        ids.push(
            create_run_via_api(
                &client,
                &server.url(""),
                &token,
                Some("http://127.0.0.1:9/hook"),
            )
            .await,
        );
    }
    let mut tasks = tokio::task::JoinSet::new();
    for id in ids.clone() {
        let (client, token, url) = (
            client.clone(),
            token.clone(),
            server.url(&format!("/api/v1/runs/{id}/transitions")),
        );
        tasks.spawn(async move {
            let resp = client
                .post(url)
                .bearer_auth(token)
                .json(&serde_json::json!({"to": "succeeded", "result": {"n": 1}}))
                .send()
                .await
                .unwrap();
            let status = resp.status();
            let body: serde_json::Value = resp.json().await.unwrap();
            (status, body)
        });
    }
    while let Some(joined) = tasks.join_next().await {
        let (status, body) = joined.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["replayed"], false);
        assert_eq!(body["notifications"].as_array().unwrap().len(), 1);
    }
    let store = server.db.store().await;
    let succeeded: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM runs WHERE status = 'succeeded' AND transition_seq = 1",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(succeeded, 300);
    let events: Vec<(String, i64)> = sqlx::query_as(
        "SELECT parent_id, COUNT(*) FROM outbox_events WHERE kind = 'callback' GROUP BY parent_id",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(events.len(), 300);
    assert!(events.iter().all(|(id, n)| *n == 1 && ids.contains(id)));
    store.close().await;
    server.stop().await;
}
