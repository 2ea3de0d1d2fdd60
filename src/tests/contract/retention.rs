//! The retention port (issue 21) on SQLite, PostgreSQL and MariaDB: a pass removes
//! exactly the rows past their retention — settled events by state and kind with
//! their attempt logs and dead letters, terminal runs that own no event any more,
//! audit rows, idempotency keys — and none that are pending, processing, inside
//! retention or still owned; the archive holds every removed row before it goes;
//! one node at a time holds the pass's lease.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use herald::outbox::archive::{read_rows, ArchivePass};
use herald::outbox::metrics::Metrics;
use herald::outbox::retention::{
    PassReport, Retention, RetentionPolicy, CHUNKS_PER_TURN, LEASE_NAME,
};
use herald::store::ports::{
    ArchiveSink, ChunkRemoved, DeliveryReads, Expired, IdempotencyKeys, KindScope, NewAuditEntry,
    NewRun, OutboxStore, RetentionStore, RunRepository, Transactions,
};
use herald::store::{SqlStore, StoreError};
use testkit::{enqueue, parented, wait_for, TestDb};
use vocab::DeliveryStatus;

use super::outbox::event;

testkit::contract_tests!(
    a_pass_removes_exactly_the_rows_past_their_retention_and_archives_them_first,
    a_kind_of_its_own_keeps_its_own_retention,
    one_node_at_a_time_holds_the_retention_lease,
    rows_that_cannot_be_archived_are_not_removed,
    events_that_keep_a_pass_busy_do_not_keep_runs_waiting,
    a_pass_that_goes_round_again_shows_its_lag_while_it_lasts,
    a_pass_two_intervals_behind_says_it_is_catching_up_until_it_ends,
    an_events_chunk_takes_the_runs_it_frees_and_only_those,
    every_target_reports_its_youngest_row_age_from_the_time_its_retention_counts_from,
);

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;

/// Runs `sql` (with `?` placeholders) on the store, binding `values` as text.
async fn exec(store: &SqlStore, sql: &str, values: &[&str]) {
    let sql = store.engine().sql(sql).into_owned();
    let mut query = sqlx::query(&sql);
    for v in values {
        query = query.bind(v.to_string());
    }
    query.execute(store.pool()).await.unwrap();
}

/// Puts the event in `status`, last changed `age_ms` ago (and last due then too,
/// unless `due_ms_ago` says otherwise), by the store's clock.
async fn settle_aged(store: &SqlStore, id: &str, status: &str, age_ms: i64, due_ms_ago: i64) {
    let now = store.engine().now_ms();
    let lease = if status == "processing" {
        format!(", lease_token = 'tok', lease_expires_at = {now} + 600000")
    } else {
        String::new()
    };
    let sql = format!(
        "UPDATE outbox_events SET status = ?, updated_at = {now} - {age_ms}, \
         next_attempt_at = {now} - {due_ms_ago}{lease} WHERE event_id = ?"
    );
    exec(store, &sql, &[status, id]).await;
}

async fn add_attempt(store: &SqlStore, event_id: &str) {
    exec(
        store,
        "INSERT INTO outbox_attempts (event_id, attempt, cycle, started_at, finished_at, outcome, worker) \
         VALUES (?, 1, 1, 1, 2, 'failed', 'w')",
        &[event_id],
    )
    .await;
}

async fn add_dead_letter(store: &SqlStore, event_id: &str) {
    let id = format!("dl-{event_id}");
    exec(
        store,
        "INSERT INTO outbox_dead_letters (id, event_id, cycle, kind, reason, created_at) \
         VALUES (?, ?, 1, 'test', 'gave up', 1)",
        &[&id, event_id],
    )
    .await;
}

/// A run in `status`, created and last changed `age_ms` ago.
async fn aged_run(store: &SqlStore, tenant: &str, status: &str, age_ms: i64) -> String {
    let run = store
        .create_run(NewRun {
            run_type: "etl".into(),
            tenant: tenant.into(),
            callback_url: None,
            routes: vec![],
        })
        .await
        .unwrap();
    let now = store.engine().now_ms();
    let sql = format!(
        "UPDATE runs SET status = ?, created_at = {now} - {age_ms}, updated_at = {now} - {age_ms} WHERE id = ?"
    );
    exec(store, &sql, &[status, &run.id]).await;
    run.id
}

async fn aged_audit(store: &SqlStore, subject: &str, age_ms: i64) {
    store
        .record_audit(&NewAuditEntry {
            subject: subject.into(),
            action: "retry".into(),
            actor: "ops".into(),
            from_status: "failed".into(),
            acknowledged_duplicate_risk: false,
            affected: 1,
            reason: None,
        })
        .await
        .unwrap();
    let now = store.engine().now_ms();
    let sql = format!("UPDATE outbox_audit SET at = {now} - {age_ms} WHERE event_id = ?");
    exec(store, &sql, &[subject]).await;
}

async fn aged_key(store: &SqlStore, key: &str, age_ms: i64) {
    let mut tx = store.begin_write().await.unwrap();
    store
        .claim_key_in(&mut tx, "token:t", key, "create_run", "hash")
        .await
        .unwrap();
    store
        .answer_key_in(&mut tx, "token:t", key, 201, "{}")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let now = store.engine().now_ms();
    let sql =
        format!("UPDATE idempotency_keys SET created_at = {now} - {age_ms} WHERE idem_key = ?");
    exec(store, &sql, &[key]).await;
}

async fn ids(store: &SqlStore, sql: &str) -> BTreeSet<String> {
    let rows: Vec<String> = sqlx::query_scalar(sql)
        .fetch_all(store.pool())
        .await
        .unwrap();
    rows.into_iter().collect()
}

fn policy(archive_dir: Option<std::path::PathBuf>) -> RetentionPolicy {
    RetentionPolicy {
        events: BTreeMap::from([
            (DeliveryStatus::Completed, Some(HOUR)),
            (DeliveryStatus::Skipped, Some(HOUR)),
            (DeliveryStatus::Failed, Some(2 * HOUR)),
            (DeliveryStatus::Uncertain, None),
        ]),
        kinds: BTreeMap::new(),
        runs: Some(HOUR),
        audit: Some(HOUR),
        idempotency_keys: Some(HOUR),
        interval: HOUR_INTERVAL,
        // Small chunks, so a pass takes several.
        chunk_rows: 2,
        archive_dir,
    }
}

fn retention(store: &SqlStore, policy: RetentionPolicy, holder: &str) -> Retention {
    retention_over(Arc::new(store.clone()), policy, holder)
}

/// A pass over `store` (the real one, or the real one behind a [`ChunkLog`]).
fn retention_over(
    store: Arc<dyn RetentionStore>,
    policy: RetentionPolicy,
    holder: &str,
) -> Retention {
    Retention {
        store,
        policy,
        metrics: Arc::new(Metrics::new()),
        store_name: "jobs".into(),
        holder: holder.into(),
    }
}

async fn a_pass_removes_exactly_the_rows_past_their_retention_and_archives_them_first(db: &TestDb) {
    let store = db.store().await;
    // Runs: one whose every event goes in this pass, one that keeps an event, one
    // already without events, one still running, one too young.
    let emptied = aged_run(&store, "ret", "succeeded", 3 * HOUR).await;
    let owning = aged_run(&store, "ret", "succeeded", 3 * HOUR).await;
    let bare = aged_run(&store, "ret", "cancelled", 3 * HOUR).await;
    let running = aged_run(&store, "ret", "running", 3 * HOUR).await;
    let young = aged_run(&store, "ret", "failed", 10 * MINUTE).await;

    let events = [
        ("c-old", &emptied, "completed", 2 * HOUR),
        ("s-old", &emptied, "skipped", 2 * HOUR),
        ("f-old", &emptied, "failed", 3 * HOUR),
        ("c-new", &owning, "completed", 10 * MINUTE),
        ("f-mid", &owning, "failed", 90 * MINUTE),
        ("u-old", &owning, "uncertain", 100 * 24 * HOUR),
        ("p-old", &owning, "pending", 3 * HOUR),
        ("w-old", &owning, "processing", 3 * HOUR),
        ("c-due", &owning, "completed", 2 * HOUR),
    ];
    for (id, run, _, _) in &events {
        // `f-old` heads an ordered lane that `p-old` waits in: removing the
        // failed head releases the lane.
        let lane = ["f-old", "p-old"]
            .contains(id)
            .then(|| "ret-lane".to_string());
        let laned = herald::outbox::model::NewEvent {
            lane,
            ..parented(event(id), run)
        };
        enqueue(&store, &[laned]).await;
    }
    for (id, _, status, age) in &events {
        // `c-due` was skipped over while due later than its change (a backoff):
        // its due time is inside retention, so it stays until that passes too.
        let due = if *id == "c-due" { 10 * MINUTE } else { *age };
        settle_aged(&store, id, status, *age, due).await;
    }
    // `p-old` waits behind `f-old`, parked (as joining the lane left it).
    let park = format!(
        "UPDATE outbox_events SET next_attempt_at = {} WHERE event_id = ?",
        herald::outbox::model::LANE_PARKED_AT
    );
    exec(&store, &park, &["p-old"]).await;
    for id in ["c-old", "f-old", "f-mid"] {
        add_attempt(&store, id).await;
    }
    add_dead_letter(&store, "f-old").await;
    add_dead_letter(&store, "f-mid").await;
    aged_audit(&store, "audit-old", 2 * HOUR).await;
    aged_audit(&store, "audit-new", 10 * MINUTE).await;
    aged_key(&store, "key-old", 2 * HOUR).await;
    aged_key(&store, "key-new", 10 * MINUTE).await;

    let archive = tempfile::tempdir().unwrap();
    let pass = retention(&store, policy(Some(archive.path().join("a"))), "node-a");
    let report = pass.run_pass().await.unwrap();
    assert!(report.ran);

    let left = |sql: &'static str| ids(&store, sql);
    let kept_events = ["c-new", "f-mid", "u-old", "p-old", "w-old", "c-due"];
    assert_eq!(
        left("SELECT event_id FROM outbox_events").await,
        kept_events.iter().map(|s| s.to_string()).collect()
    );
    assert_eq!(
        left("SELECT event_id FROM outbox_attempts").await,
        BTreeSet::from(["f-mid".to_string()])
    );
    assert_eq!(
        left("SELECT event_id FROM outbox_dead_letters").await,
        BTreeSet::from(["f-mid".to_string()])
    );
    assert_eq!(
        left("SELECT id FROM runs").await,
        BTreeSet::from([owning.clone(), running.clone(), young.clone()])
    );
    assert_eq!(
        left("SELECT event_id FROM outbox_audit").await,
        BTreeSet::from(["audit-new".to_string()])
    );
    assert_eq!(
        left("SELECT idem_key FROM idempotency_keys").await,
        BTreeSet::from(["key-new".to_string()])
    );
    assert_eq!(
        report.removed,
        BTreeMap::from([
            ("outbox_events", 3),
            ("outbox_attempts", 2),
            ("outbox_dead_letters", 1),
            ("outbox_audit", 1),
            ("idempotency_keys", 1),
            ("lane_members", 1),
            ("runs", 2),
        ])
    );
    assert_eq!(
        left("SELECT event_id FROM lane_members").await,
        BTreeSet::from(["p-old".to_string()]),
        "the removed head left its lane; the pending event heads it"
    );
    assert_ne!(
        store
            .get_event("p-old")
            .await
            .unwrap()
            .unwrap()
            .next_attempt_at,
        herald::outbox::model::LANE_PARKED_AT,
        "the new head is due, no longer parked"
    );

    // The archive holds every removed row, whole (payloads included), and nothing
    // else: keys are never archived.
    let mut archived: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
    let checked = read_rows(&archive.path().join("a"), |table, row| {
        archived.entry(table.name).or_default().push(row)
    })
    .unwrap();
    assert!(checked.truncated.is_empty());
    let keys = |table: &str, column: &str| -> BTreeSet<String> {
        archived
            .get(table)
            .into_iter()
            .flatten()
            .map(|row| row[column].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        keys("outbox_events", "event_id"),
        BTreeSet::from(["c-old", "s-old", "f-old"].map(String::from))
    );
    assert_eq!(
        keys("outbox_attempts", "event_id"),
        BTreeSet::from(["c-old", "f-old"].map(String::from))
    );
    assert_eq!(
        keys("outbox_dead_letters", "id"),
        BTreeSet::from(["dl-f-old".to_string()])
    );
    assert_eq!(
        keys("lane_members", "event_id"),
        BTreeSet::from(["f-old".to_string()])
    );
    assert_eq!(
        keys("runs", "id"),
        BTreeSet::from([emptied.clone(), bare.clone()])
    );
    assert_eq!(
        keys("outbox_audit", "event_id"),
        BTreeSet::from(["audit-old".to_string()])
    );
    assert!(!archived.contains_key("idempotency_keys"));
    let c_old = archived["outbox_events"]
        .iter()
        .find(|row| row["event_id"] == "c-old")
        .unwrap();
    assert_eq!(c_old["payload"], "{\"n\":1}");
    assert_eq!(c_old["status"], "completed");
    assert_eq!(c_old["parent_id"], emptied.as_str());

    // A second pass finds nothing more.
    let again = pass.run_pass().await.unwrap();
    assert_eq!(again.removed.values().sum::<u64>(), 0);
    store.close().await;
}

async fn a_kind_of_its_own_keeps_its_own_retention(db: &TestDb) {
    let store = db.store().await;
    let mut alert = event("alert-30m");
    alert.kind = "alert".into();
    let mut callback = event("callback-2h");
    callback.kind = "callback".into();
    enqueue(
        &store,
        &[alert, callback, event("test-30m"), event("test-2h")],
    )
    .await;
    for (id, age) in [
        ("alert-30m", 30 * MINUTE),
        ("callback-2h", 2 * HOUR),
        ("test-30m", 30 * MINUTE),
        ("test-2h", 2 * HOUR),
    ] {
        settle_aged(&store, id, "completed", age, age).await;
    }
    let mut policy = policy(None);
    policy.kinds = BTreeMap::from([
        (
            "alert".to_string(),
            BTreeMap::from([(DeliveryStatus::Completed, Some(10 * MINUTE))]),
        ),
        (
            "callback".to_string(),
            BTreeMap::from([(DeliveryStatus::Completed, None)]),
        ),
    ]);
    let report = retention(&store, policy, "node-a")
        .run_pass()
        .await
        .unwrap();
    assert_eq!(report.removed.get("outbox_events"), Some(&2));
    assert_eq!(
        ids(&store, "SELECT event_id FROM outbox_events").await,
        BTreeSet::from(["callback-2h", "test-30m"].map(String::from)),
        "the alert went after its 10 minutes, the callback never, the rest after the hour"
    );
    store.close().await;
}

async fn one_node_at_a_time_holds_the_retention_lease(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("old")]).await;
    settle_aged(&store, "old", "completed", 2 * HOUR, 2 * HOUR).await;

    assert!(store
        .take_lease(LEASE_NAME, "node-a", 60_000)
        .await
        .unwrap());
    assert!(!store
        .take_lease(LEASE_NAME, "node-b", 60_000)
        .await
        .unwrap());
    let report = retention(&store, policy(None), "node-b")
        .run_pass()
        .await
        .unwrap();
    assert!(!report.ran, "node b waits while node a holds the lease");
    assert_eq!(
        ids(&store, "SELECT event_id FROM outbox_events")
            .await
            .len(),
        1
    );
    assert!(
        store
            .take_lease(LEASE_NAME, "node-a", 60_000)
            .await
            .unwrap(),
        "renewed"
    );

    // A lease its holder stopped renewing (a node that died) expires.
    assert!(store.take_lease(LEASE_NAME, "node-a", 300).await.unwrap());
    assert!(!store
        .take_lease(LEASE_NAME, "node-b", 60_000)
        .await
        .unwrap());
    wait_for(
        "node a's lease to expire",
        Duration::from_secs(10),
        async || {
            store
                .take_lease(LEASE_NAME, "node-b", 60_000)
                .await
                .unwrap()
        },
    )
    .await;
    assert!(!store
        .take_lease(LEASE_NAME, "node-a", 60_000)
        .await
        .unwrap());

    // A holder's release lets another in at once.
    store.release_lease(LEASE_NAME, "node-b").await.unwrap();
    let report = retention(&store, policy(None), "node-a")
        .run_pass()
        .await
        .unwrap();
    assert!(report.ran);
    assert_eq!(report.removed.get("outbox_events"), Some(&1));
    store.close().await;
}

async fn rows_that_cannot_be_archived_are_not_removed(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("old")]).await;
    settle_aged(&store, "old", "completed", 2 * HOUR, 2 * HOUR).await;
    // The archive folder's path is taken by a file: nothing can be written there.
    let dir = tempfile::tempdir().unwrap();
    let blocked = dir.path().join("archive");
    std::fs::write(&blocked, b"not a folder").unwrap();
    let err = retention(&store, policy(Some(blocked)), "node-a")
        .run_pass()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot archive"), "{err}");
    assert_eq!(
        ids(&store, "SELECT event_id FROM outbox_events").await,
        BTreeSet::from(["old".to_string()]),
        "an event that could not be archived stays"
    );
    store.close().await;
}

/// The real store, with the targets of its chunks written down in order, each
/// reading of the oldest retained events with how many chunks came before it,
/// and at each chunk whether the pass's metrics said it was catching up.
struct ChunkLog {
    store: SqlStore,
    metrics: Arc<Metrics>,
    chunks: std::sync::Mutex<Vec<Expired>>,
    oldest_reads: std::sync::Mutex<Vec<OldestRead>>,
    catching_up_reads: std::sync::Mutex<Vec<bool>>,
    /// Each non-empty chunk's target and youngest row age.
    youngest_ages: std::sync::Mutex<Vec<(Expired, i64)>>,
}

/// How many chunks came before a reading, and the ages it read by state.
type OldestRead = (usize, Vec<(DeliveryStatus, i64)>);

impl ChunkLog {
    fn over(store: &SqlStore) -> Arc<ChunkLog> {
        Arc::new(ChunkLog {
            store: store.clone(),
            metrics: Arc::new(Metrics::new()),
            chunks: Default::default(),
            oldest_reads: Default::default(),
            catching_up_reads: Default::default(),
            youngest_ages: Default::default(),
        })
    }

    /// A pass of `policy` through this log, reporting to its metrics.
    fn retention(self: &Arc<Self>, policy: RetentionPolicy) -> Retention {
        Retention {
            metrics: self.metrics.clone(),
            ..retention_over(self.clone(), policy, "node-a")
        }
    }

    /// `herald_retention_catching_up` of the `jobs` store, as `/metrics` shows it.
    fn catching_up(&self) -> bool {
        self.metrics
            .render()
            .lines()
            .any(|line| line == "herald_retention_catching_up{store=\"jobs\"} 1")
    }
}

#[async_trait::async_trait]
impl RetentionStore for ChunkLog {
    async fn take_lease(
        &self,
        name: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        self.store.take_lease(name, holder, lease_ms).await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        self.store.release_lease(name, holder).await
    }

    async fn remove_expired(
        &self,
        expired: &Expired,
        limit: u32,
        archive: Option<&dyn ArchiveSink>,
    ) -> Result<ChunkRemoved, StoreError> {
        self.chunks.lock().unwrap().push(expired.clone());
        self.catching_up_reads
            .lock()
            .unwrap()
            .push(self.catching_up());
        let removed = self.store.remove_expired(expired, limit, archive).await?;
        if let Some(age) = removed.youngest_age_ms {
            self.youngest_ages
                .lock()
                .unwrap()
                .push((expired.clone(), age));
        }
        Ok(removed)
    }

    async fn oldest_retained(&self) -> Result<Vec<(DeliveryStatus, i64)>, StoreError> {
        let ages = self.store.oldest_retained().await?;
        let chunks = self.chunks.lock().unwrap().len();
        self.oldest_reads
            .lock()
            .unwrap()
            .push((chunks, ages.clone()));
        Ok(ages)
    }
}

/// More settled events than one turn of one-event chunks takes.
const BUSY_EVENTS: usize = CHUNKS_PER_TURN as usize + 10;

/// [`BUSY_EVENTS`] events completed two hours ago (last due three hours ago),
/// owned by a run that is not there (so no chunk of events frees a run).
async fn settle_busy_events(store: &SqlStore) {
    let events: Vec<_> = (0..BUSY_EVENTS)
        .map(|i| {
            let mut e = event(&format!("busy-{i:03}"));
            e.parent_id = "another-run".into();
            e
        })
        .collect();
    enqueue(store, &events).await;
    for e in &events {
        settle_aged(store, &e.event_id, "completed", 2 * HOUR, 3 * HOUR).await;
    }
}

/// One pass of [`policy`] (passes `interval` apart) in chunks of one event (so
/// the busy events need a second round), its chunks and readings logged; every
/// busy event goes.
async fn pass_in_single_chunks(
    store: &SqlStore,
    interval: Duration,
) -> (Arc<ChunkLog>, PassReport) {
    let log = ChunkLog::over(store);
    let mut policy = policy(None);
    policy.chunk_rows = 1;
    policy.interval = interval;
    let report = log.retention(policy).run_pass().await.unwrap();
    assert_eq!(
        report.removed.get("outbox_events"),
        Some(&(BUSY_EVENTS as u64))
    );
    (log, report)
}

/// Settled events that fill chunk after chunk (a busy store with a short
/// retention) take turns with the other targets: an expired run is removed after
/// at most one turn of event chunks, not after every event is gone.
async fn events_that_keep_a_pass_busy_do_not_keep_runs_waiting(db: &TestDb) {
    let store = db.store().await;
    settle_busy_events(&store).await;
    let run = aged_run(&store, "t", "succeeded", 2 * HOUR).await;

    let (log, report) = pass_in_single_chunks(&store, HOUR_INTERVAL).await;
    assert_eq!(report.removed.get("runs"), Some(&1));
    assert!(
        ids(&store, "SELECT id FROM runs").await.is_empty(),
        "{run} stays"
    );

    let chunks = log.chunks.lock().unwrap().clone();
    let runs_first = chunks
        .iter()
        .position(|c| matches!(c, Expired::Runs { .. }))
        .expect("the runs target had a chunk");
    let events_before = chunks[..runs_first]
        .iter()
        .filter(|c| matches!(c, Expired::Events { .. }))
        .count();
    assert!(
        events_before <= CHUNKS_PER_TURN as usize + RETAINED_STATE_TARGETS,
        "the run waited behind {events_before} event chunks"
    );
    assert!(
        chunks[runs_first..]
            .iter()
            .any(|c| matches!(c, Expired::Events { .. })),
        "events were still due when the run went"
    );
    store.close().await;
}

/// A pass that goes round again (more settled events due than a turn takes)
/// reads the oldest retained event's age after each round, while it still
/// removes, not only at its end: an operator sees retention's lag while a pass
/// falls behind. Mid-pass the figure is the age of the events still to go; at
/// the end nothing completed is left.
async fn a_pass_that_goes_round_again_shows_its_lag_while_it_lasts(db: &TestDb) {
    let store = db.store().await;
    settle_busy_events(&store).await;
    let (log, _) = pass_in_single_chunks(&store, HOUR_INTERVAL).await;

    let chunks = log.chunks.lock().unwrap().len();
    let reads = log.oldest_reads.lock().unwrap().clone();
    let completed = |ages: &[(DeliveryStatus, i64)]| {
        ages.iter()
            .find(|(s, _)| *s == DeliveryStatus::Completed)
            .map(|(_, age)| *age)
    };
    let (during, ages) = reads
        .iter()
        .find(|(before, _)| *before < chunks)
        .unwrap_or_else(|| panic!("no reading before the pass's last chunk: {reads:?}"));
    assert!(
        *during >= CHUNKS_PER_TURN as usize,
        "read after a full turn, not before ({during} chunks)"
    );
    let lag = completed(ages).expect("completed events were still retained mid-pass");
    assert!(
        lag >= 2 * HOUR - 60_000,
        "mid-pass the figure shows the events still to go: {lag} ms"
    );
    let (after, ages) = reads.last().expect("read at the pass's end");
    assert_eq!(*after, chunks);
    assert_eq!(
        completed(ages),
        None,
        "nothing completed is left at the end"
    );
    store.close().await;
}

/// A pass whose chunks find rows more than two intervals past their retention
/// has fallen behind what comes due, and rests less between chunks: the metrics
/// say so from its first rest on, and stop saying so when it ends. The same rows
/// an hour overdue are not behind for passes an hour apart (the line is two
/// hours). Each chunk reports its youngest row's age by the store's clock, from
/// the events' last change (two hours ago), not their last due time (three).
async fn a_pass_two_intervals_behind_says_it_is_catching_up_until_it_ends(db: &TestDb) {
    let store = db.store().await;
    // Completed two hours ago, an hour past their retention.
    settle_busy_events(&store).await;
    let (log, _) = pass_in_single_chunks(&store, HOUR_INTERVAL).await;
    let reads = log.catching_up_reads.lock().unwrap().clone();
    assert!(
        reads.len() > CHUNKS_PER_TURN as usize,
        "{} chunks",
        reads.len()
    );
    assert!(
        !reads.contains(&true),
        "an hour overdue, passes hourly: {reads:?}"
    );
    assert!(!log.catching_up());
    let ages = log.youngest_ages.lock().unwrap().clone();
    assert_eq!(
        ages.len(),
        BUSY_EVENTS,
        "one age a chunk that removed an event"
    );
    for (_, age) in ages {
        assert!(
            (2 * HOUR - MINUTE..2 * HOUR + 10 * MINUTE).contains(&age),
            "a chunk of events completed two hours ago reports an age of {age} ms"
        );
    }

    settle_busy_events(&store).await;
    let (log, _) = pass_in_single_chunks(&store, Duration::from_secs(60)).await;
    let reads = log.catching_up_reads.lock().unwrap().clone();
    assert!(!reads[0], "before its first chunk the pass has not rested");
    assert!(
        reads[1..].iter().all(|read| *read),
        "an hour overdue with passes a minute apart, every rest is the catch-up pace's: {reads:?}"
    );
    assert!(
        !log.catching_up(),
        "the pass ended, and with it the catch-up"
    );
    store.close().await;
}

/// [`policy`]'s interval: passes an hour apart.
const HOUR_INTERVAL: Duration = Duration::from_secs(3600);

/// The event targets of [`policy`] besides the busy one (skipped and failed
/// events, each a chunk that finds nothing).
const RETAINED_STATE_TARGETS: usize = 2;

/// A chunk of events removes, in its own transaction, the runs whose last event
/// it removed when they are terminal and past `retention.runs` (archived first),
/// so the runs target need not walk past every old run that still owns an event
/// (a second of PostgreSQL's time a chunk at 1,500 runs/s); it leaves a run that
/// still owns an event, one still running, one inside retention, and every run
/// when runs are kept forever.
async fn an_events_chunk_takes_the_runs_it_frees_and_only_those(db: &TestDb) {
    let store = db.store().await;
    let freed = aged_run(&store, "ret", "succeeded", 3 * HOUR).await;
    let owning = aged_run(&store, "ret", "failed", 3 * HOUR).await;
    let running = aged_run(&store, "ret", "running", 3 * HOUR).await;
    let young = aged_run(&store, "ret", "succeeded", 10 * MINUTE).await;
    let kept_forever = aged_run(&store, "ret", "succeeded", 3 * HOUR).await;
    let events = [
        ("freed-1", &freed, "completed"),
        ("freed-2", &freed, "completed"),
        ("owning-1", &owning, "completed"),
        ("owning-2", &owning, "failed"),
        ("running-1", &running, "completed"),
        ("young-1", &young, "completed"),
        ("forever-1", &kept_forever, "skipped"),
    ];
    for (id, run, status) in &events {
        enqueue(&store, &[parented(event(id), run)]).await;
        settle_aged(&store, id, status, 2 * HOUR, 2 * HOUR).await;
    }
    let events_chunk = |status, runs_older_than_ms| Expired::Events {
        status,
        kinds: KindScope::AllBut(vec![]),
        older_than_ms: HOUR,
        runs_older_than_ms,
    };

    // Runs kept forever: the chunk removes its event and leaves its run.
    let removed = store
        .remove_expired(&events_chunk(DeliveryStatus::Skipped, None), 1_000, None)
        .await
        .unwrap();
    assert_eq!(removed.tables.first(), Some(&("outbox_events", 1)));
    assert!(!removed.tables.iter().any(|(table, _)| *table == "runs"));
    assert!(ids(&store, "SELECT id FROM runs")
        .await
        .contains(&kept_forever));

    let dir = tempfile::tempdir().unwrap();
    let archive = ArchivePass::new(dir.path(), "chunk");
    let removed = store
        .remove_expired(
            &events_chunk(DeliveryStatus::Completed, Some(HOUR)),
            1_000,
            Some(&archive as &dyn ArchiveSink),
        )
        .await
        .unwrap();
    assert_eq!(removed.primary(), 5, "{removed:?}");
    assert!(
        removed.tables.contains(&("runs", 1)),
        "the freed run did not go with its last event: {removed:?}"
    );
    assert_eq!(
        ids(&store, "SELECT id FROM runs").await,
        BTreeSet::from([owning, running, young, kept_forever])
    );
    assert_eq!(
        ids(&store, "SELECT event_id FROM outbox_events").await,
        BTreeSet::from(["owning-2".to_string()])
    );
    let mut archived_runs = Vec::new();
    read_rows(dir.path(), |table, row| {
        if table.name == "runs" {
            archived_runs.push(row);
        }
    })
    .unwrap();
    assert_eq!(archived_runs.len(), 1, "{archived_runs:?}");
    assert_eq!(archived_runs[0]["id"], freed.as_str());
    assert_eq!(archived_runs[0]["status"], "succeeded");
    store.close().await;
}

/// Runs, audit rows and keys each report their chunk's youngest row age from the
/// time their own retention counts from (a run's last change, not its creation;
/// an audit row's time; a key's creation), by the store's clock: the figure the
/// catch-up pace compares with two intervals. Each target holds two rows of
/// different ages, so a chunk that reported its oldest row, or another column,
/// fails.
async fn every_target_reports_its_youngest_row_age_from_the_time_its_retention_counts_from(
    db: &TestDb,
) {
    let store = db.store().await;
    let now = store.engine().now_ms();
    for (age, created) in [(3 * HOUR, 9 * HOUR), (5 * HOUR, 9 * HOUR)] {
        let run = aged_run(&store, "ages", "succeeded", created).await;
        let sql = format!("UPDATE runs SET updated_at = {now} - {age} WHERE id = ?");
        exec(&store, &sql, &[&run]).await;
    }
    aged_audit(&store, "audit-young", 4 * HOUR).await;
    aged_audit(&store, "audit-old", 7 * HOUR).await;
    aged_key(&store, "key-young", 6 * HOUR).await;
    aged_key(&store, "key-old", 8 * HOUR).await;

    let log = ChunkLog::over(&store);
    let mut policy = policy(None);
    policy.chunk_rows = 10;
    let report = log.retention(policy).run_pass().await.unwrap();
    for table in ["runs", "outbox_audit", "idempotency_keys"] {
        assert_eq!(report.removed.get(table), Some(&2), "{table}: {report:?}");
    }

    let ages = log.youngest_ages.lock().unwrap().clone();
    let age_of = |target: fn(&Expired) -> bool, name: &str| {
        let found: Vec<i64> = ages
            .iter()
            .filter(|(expired, _)| target(expired))
            .map(|(_, age)| *age)
            .collect();
        assert_eq!(found.len(), 1, "one chunk of {name} removed rows: {ages:?}");
        found[0]
    };
    let expected = [
        (
            age_of(|e| matches!(e, Expired::Runs { .. }), "runs"),
            3 * HOUR,
            "runs",
        ),
        (
            age_of(|e| matches!(e, Expired::Audit { .. }), "audit rows"),
            4 * HOUR,
            "audit rows",
        ),
        (
            age_of(|e| matches!(e, Expired::IdempotencyKeys { .. }), "keys"),
            6 * HOUR,
            "keys",
        ),
    ];
    for (age, want, name) in expected {
        // The store's clock has moved on by the time the chunk reads it.
        assert!(
            (want - MINUTE..want + 10 * MINUTE).contains(&age),
            "a chunk of {name} whose youngest row is {want} ms old reports {age} ms"
        );
    }
    store.close().await;
}
