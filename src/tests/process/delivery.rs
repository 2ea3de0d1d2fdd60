//! Delivery as a real `herald serve` process does it, against real HTTP servers on
//! loopback: the heartbeat keeping a slow handler's lease, SIGTERM with work not
//! yet claimed, the exhaustion signals (`OPERATOR_ALERT`, counters, gauges, `available 0` when the
//! store is down), `Retry-After` in seconds and as an HTTP date as stored, a 3xx
//! being permanent and never followed, and connection refused being retried.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use herald::channels::guard::DestinationGuard;
use herald::channels::webhook::{delivery_client, WebhookHandler, WebhookPayload};
use herald::outbox::handler::Outcome;
use herald::outbox::model::{NewEvent, Settle};
use herald::store::ports::{ClaimRequest, OutboxStore};
use herald::store::{Engine, SqlStore};
use sqlx::Executor;
use testkit::{
    all_completed, enqueue, lines_with, parented, refusing_port, statuses, wait_for, HeraldProcess,
    Receiver, SecretFile, TestDb,
};
use testkit::{callback, worker_flags};
use vocab::DeliveryStatus;

/// The run every event of this file is filed under.
const PARENT: &str = "delivery-gaps";

testkit::contract_tests!(
    a_heartbeat_keeps_the_lease_of_a_handler_slower_than_the_lease,
    three_processes_claiming_one_store_deliver_each_event_once,
);

/// Flags for one process (on a port the kernel picks).
fn flags_of(lease_secs: &'static str) -> Vec<String> {
    worker_flags(lease_secs)
        .into_iter()
        .map(str::to_string)
        .collect()
}

fn spawn(db: &TestDb, flags: &[String]) -> HeraldProcess {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    HeraldProcess::spawn(&db.url, &flags)
}

/// The Prometheus text of a process on loopback, if it answers.
async fn metrics(base: &str) -> Option<String> {
    herald::channels::install_crypto_provider();
    reqwest::get(format!("{base}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()
}

async fn a_heartbeat_keeps_the_lease_of_a_handler_slower_than_the_lease(db: &TestDb) {
    let store = db.store().await;
    let receiver = Receiver::start().await;
    // The receiver takes three leases' time to answer (leases of 3 s: a heartbeat
    // a loaded machine delays by a second still renews in time).
    receiver.set_hold(Duration::from_secs(9));
    enqueue(
        &store,
        &[parented(callback("slow-one", &receiver.url()), PARENT)],
    )
    .await;
    let herald = HeraldProcess::spawn(&db.url, &worker_flags("3"));
    wait_for("the slow delivery", Duration::from_secs(60), async || {
        statuses(&store, PARENT).await["slow-one"] == DeliveryStatus::Completed
    })
    .await;
    // Another lease's time: a lost lease would have been reclaimed and resent.
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(herald);
    assert_eq!(
        receiver.arrivals(),
        vec!["slow-one".to_string()],
        "exactly one delivery"
    );
    let row = store.get_event("slow-one").await.unwrap().unwrap();
    assert_eq!(row.attempts, 1, "one attempt, never reclaimed");
    assert_eq!(store.attempts("slow-one").await.unwrap().len(), 1);
    receiver.stop();
    store.close().await;
}

/// Claim races between processes, each with its own connections (within one
/// SQLite process every claim shares one connection and cannot race itself).
async fn three_processes_claiming_one_store_deliver_each_event_once(db: &TestDb) {
    let store = db.store().await;
    let receiver = Receiver::start().await;
    receiver.set_hold(Duration::from_millis(100));
    let events: Vec<NewEvent> = (0..90)
        .map(|i| parented(callback(&format!("shared-{i:02}"), &receiver.url()), PARENT))
        .collect();
    // The store is migrated (opening it migrates), so the three start together.
    let mut processes: Vec<HeraldProcess> = (0..3).map(|_| spawn(db, &flags_of("30"))).collect();
    for process in &mut processes {
        process.ready().await;
    }
    enqueue(&store, &events).await;
    wait_for(
        "every event completed",
        Duration::from_secs(60),
        async || {
            let now = statuses(&store, PARENT).await;
            now.len() == 90 && now.values().all(|s| *s == DeliveryStatus::Completed)
        },
    )
    .await;
    drop(processes);
    let seen = receiver.arrivals_per_event();
    assert_eq!(seen.len(), 90);
    assert!(
        seen.values().all(|n| *n == 1),
        "an event was claimed by two processes: {seen:?}"
    );
    let mut workers = std::collections::HashSet::new();
    for event in &events {
        for attempt in store.attempts(&event.event_id).await.unwrap() {
            workers.insert(attempt.worker);
        }
    }
    assert!(
        workers.len() >= 2,
        "the processes really shared the work: {workers:?}"
    );
    receiver.stop();
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_with_work_not_yet_claimed_exits_zero_and_the_next_process_delivers_it() {
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    receiver.set_hold(Duration::from_millis(1000));
    let events: Vec<NewEvent> = (0..6)
        .map(|i| parented(callback(&format!("queued-{i}"), &receiver.url()), PARENT))
        .collect();
    enqueue(&store, &events).await;
    // One slot: the rest wait, due but unclaimed, while the first is in flight.
    let mut flags: Vec<String> = flags_of("30");
    for (flag, value) in [("--worker-concurrency", "1"), ("--worker-batch-size", "1")] {
        let at = flags.iter().position(|f| f == flag).unwrap();
        flags[at + 1] = value.into();
    }
    let herald = spawn(&db, &flags);
    wait_for("the first delivery", Duration::from_secs(30), async || {
        !receiver.arrivals().is_empty()
    })
    .await;
    let status = herald
        .terminate(Duration::from_secs(20))
        .expect("herald exits after SIGTERM");
    assert!(status.success(), "exit status {status:?}");
    let after = statuses(&store, PARENT).await;
    let delivered = receiver.arrivals().len();
    assert!(delivered < 6, "the stop landed with work unclaimed");
    assert_eq!(
        after
            .values()
            .filter(|s| **s == DeliveryStatus::Completed)
            .count(),
        delivered,
        "what was sent was settled before the exit: {after:?}"
    );
    assert_eq!(
        after
            .values()
            .filter(|s| **s == DeliveryStatus::Pending)
            .count(),
        6 - delivered,
        "the rest is still pending, not stranded in processing: {after:?}"
    );
    for (id, status) in &after {
        if *status == DeliveryStatus::Pending {
            let row = store.get_event(id).await.unwrap().unwrap();
            assert_eq!(row.attempts, 0, "{id} spent no attempt");
        }
    }

    receiver.set_hold(Duration::ZERO);
    let herald = spawn(&db, &flags_of("30"));
    wait_for(
        "the next process delivers the rest",
        Duration::from_secs(30),
        async || all_completed(&store, PARENT).await,
    )
    .await;
    drop(herald);
    let seen = receiver.arrivals_per_event();
    assert_eq!(seen.len(), 6, "nothing lost: {seen:?}");
    assert!(seen.values().all(|n| *n == 1), "nothing twice: {seen:?}");
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exhaustion_reaches_the_log_the_counter_and_the_gauges_and_an_outage_reads_unavailable() {
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    receiver.set_status(503);
    // One event exhausts its cycle at the receiver (the worker's alert) ...
    let mut refused = parented(callback("refused", &receiver.url()), PARENT);
    refused.max_attempts = 1;
    // ... and one is taken by a worker that dies on its last attempt (the sweep's).
    let mut orphan = parented(callback("orphaned", &receiver.url()), PARENT);
    orphan.max_attempts = 1;
    enqueue(&store, &[orphan]).await;
    let dead_worker = ClaimRequest {
        lease_token: "dead-worker".into(),
        holder: "dead-worker".into(),
        limit: 1,
        kinds: vec!["callback".into()],
        lease_ms_by_kind: vec![("callback".into(), 200)],
        default_lease_ms: 200,
        due_within_ms: None,
        readmitted: Vec::new(),
        metered: Vec::new(),
        take_expired: true,
    };
    assert_eq!(store.claim(&dead_worker).await.unwrap().len(), 1);
    enqueue(&store, &[refused]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut herald = spawn(&db, &flags_of("30"));
    let base = herald.base().await;
    wait_for("both failed", Duration::from_secs(30), async || {
        statuses(&store, PARENT)
            .await
            .values()
            .all(|s| *s == DeliveryStatus::Failed)
    })
    .await;
    assert_eq!(receiver.arrivals(), vec!["refused".to_string()]);
    wait_for("two alerts", Duration::from_secs(10), async || {
        lines_with(&herald.log, "OPERATOR_ALERT").len() >= 2
    })
    .await;
    let alerts = lines_with(&herald.log, "OPERATOR_ALERT");
    assert_eq!(alerts.len(), 2, "{alerts:?}");
    assert!(alerts.iter().any(|l| l.contains("refused")), "{alerts:?}");
    assert!(
        alerts
            .iter()
            .any(|l| l.contains("orphaned") && l.contains("lease expired")),
        "{alerts:?}"
    );
    assert!(
        !alerts.iter().any(|l| l.contains(&receiver.url())),
        "no destination in the alert: {alerts:?}"
    );

    let exhausted = r#"herald_outbox_exhausted_total{kind="callback"} 2"#;
    let failed_gauge = r#"herald_outbox_events{kind="callback",source="jobs",status="failed"} 2"#;
    let up = r#"herald_outbox_available{source="jobs"} 1"#;
    let down = r#"herald_outbox_available{source="jobs"} 0"#;
    wait_for(
        "the counter and gauges",
        Duration::from_secs(10),
        async || {
            metrics(&base).await.is_some_and(|m| {
                m.contains(exhausted) && m.contains(failed_gauge) && m.contains(up)
            })
        },
    )
    .await;

    // The outbox's table disappears from under the running process.
    store
        .pool()
        .execute("ALTER TABLE outbox_events RENAME TO outbox_events_gone")
        .await
        .unwrap();
    wait_for("available 0", Duration::from_secs(10), async || {
        metrics(&base).await.is_some_and(|m| m.contains(down))
    })
    .await;
    store
        .pool()
        .execute("ALTER TABLE outbox_events_gone RENAME TO outbox_events")
        .await
        .unwrap();
    wait_for("available 1 again", Duration::from_secs(10), async || {
        metrics(&base).await.is_some_and(|m| m.contains(up))
    })
    .await;
    drop(herald);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

/// Waits until `id` has spent at least `attempts` attempts and is pending again
/// (a short backoff may already have spent another when it is seen).
async fn pending_after(
    store: &SqlStore,
    id: &str,
    attempts: i64,
) -> herald::outbox::model::EventRecord {
    let mut found = None;
    wait_for(
        "a retry to be scheduled",
        Duration::from_secs(20),
        async || {
            let row = store.get_event(id).await.unwrap().unwrap();
            let ready = row.status == DeliveryStatus::Pending && row.attempts >= attempts;
            if ready {
                found = Some(row);
            }
            ready
        },
    )
    .await;
    found.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retry_after_in_seconds_and_as_an_http_date_is_the_stored_next_attempt() {
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    receiver.script(&[(429, Some("3"))]);
    let herald = spawn(&db, &flags_of("30"));
    enqueue(
        &store,
        &[parented(callback("in-seconds", &receiver.url()), PARENT)],
    )
    .await;
    let row = pending_after(&store, "in-seconds", 1).await;
    // The settle statement sets both from one clock reading.
    assert_eq!(
        row.next_attempt_at - row.updated_at,
        3000,
        "Retry-After: 3 beats the 100 ms backoff"
    );
    assert_eq!(row.last_status_code, Some(429));

    // A minute ahead: far more than a slow machine takes to send and settle.
    let when = SystemTime::now() + Duration::from_secs(60);
    receiver.script(&[(503, Some(&httpdate::fmt_http_date(when)))]);
    enqueue(
        &store,
        &[parented(callback("as-a-date", &receiver.url()), PARENT)],
    )
    .await;
    let row = pending_after(&store, "as-a-date", 1).await;
    let delay = row.next_attempt_at - row.updated_at;
    // The date has whole seconds and some of them passed on the way.
    assert!(
        (50_000..=60_000).contains(&delay),
        "Retry-After as an HTTP date a minute ahead gave a delay of {delay} ms"
    );
    drop(herald);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

fn loopback_handler() -> WebhookHandler {
    let guard = DestinationGuard::new(DestinationGuard::parse_allowlist("127.0.0.0/8").unwrap());
    WebhookHandler::new(
        delivery_client(Duration::from_secs(5), &guard).unwrap(),
        guard,
    )
}

fn payload(url: String) -> WebhookPayload {
    WebhookPayload {
        url,
        body: serde_json::json!({"status": "succeeded"}),
        secret_ref: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_3xx_is_permanent_and_never_followed() {
    use axum::routing::{any, post};
    let followed = Arc::new(AtomicUsize::new(0));
    let counter = followed.clone();
    let app = axum::Router::new()
        .route(
            "/moved/{status}",
            post(
                |axum::extract::Path(status): axum::extract::Path<u16>| async move {
                    (
                        axum::http::StatusCode::from_u16(status).unwrap(),
                        [("location", "/elsewhere")],
                    )
                },
            ),
        )
        .route(
            "/elsewhere",
            any(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async { "followed" }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let handler = loopback_handler();
    for status in [301u16, 302, 303, 307, 308] {
        let outcome = handler
            .deliver("moved", payload(format!("http://{addr}/moved/{status}")))
            .await;
        assert!(
            matches!(&outcome, Outcome::Permanent { status_code: Some(code), .. } if *code == status),
            "{status}: {outcome:?}"
        );
        // A permanent outcome ends the event failed at once, never retried.
        let claimed = herald::outbox::model::ClaimedEvent {
            event_id: "moved".into(),
            source: "jobs".into(),
            kind: "callback".into(),
            parent_type: "run".into(),
            parent_id: "delivery-gaps".into(),
            payload: String::new(),
            redeliverable: true,
            attempts: 1,
            cycle: 1,
            cycle_attempts: 1,
            max_attempts: 6,
            lease_token: "t".into(),
            destination: None,
            trace_parent: None,
            lane: None,
        };
        let policy = herald::outbox::policy::RetryPolicy {
            max_attempts: 6,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            jitter: false,
            lease: Duration::from_secs(30),
        };
        assert_eq!(
            outcome.settle(&claimed, &policy),
            Settle::Failed { exhausted: false }
        );
    }
    assert_eq!(
        followed.load(Ordering::SeqCst),
        0,
        "a redirect was followed"
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_refused_is_retried() {
    // A port nobody listens on (held, so nobody can start to).
    let (_unlistened, port) = refusing_port();
    let outcome = loopback_handler()
        .deliver("refused", payload(format!("http://127.0.0.1:{port}/hook")))
        .await;
    assert!(
        matches!(&outcome, Outcome::Retryable { error, status_code: None, .. } if error.contains("connection")),
        "{outcome:?}"
    );

    // And through a real process: attempts pile up as retries, not a failure.
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    enqueue(
        &store,
        &[parented(
            callback("nobody-home", &format!("http://127.0.0.1:{port}/hook")),
            PARENT,
        )],
    )
    .await;
    let herald = spawn(&db, &flags_of("30"));
    let row = pending_after(&store, "nobody-home", 2).await;
    drop(herald);
    assert!(
        row.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("connection"),
        "{row:?}"
    );
    assert_eq!(row.last_status_code, None);
    store.close().await;
    db.drop_db().await;
}

const OLD_SECRET: &str = "whsec_b2xkLXJvdXRlLXNlY3JldC1mb3ItdGVzdHM=";
const NEW_SECRET: &str = "whsec_bmV3LXJvdXRlLXNlY3JldC1mb3ItdGVzdHM=";

fn route_config(
    receiver: &Receiver,
    prefix: &str,
    brand: &str,
    secret: &SecretFile,
) -> tempfile::NamedTempFile {
    let text = format!(
        r#"
[[routes]]
name = "ops"
channel = "webhook"
url = "{hook}"
brand = "{brand}"
secret_ref = "{secret_ref}"

[[routes]]
name = "ops-chat"
channel = "chat"
url = "{chat}"
brand = "{brand}"
"#,
        hook = receiver.url_for(&format!("{prefix}-hook")),
        chat = receiver.url_for(&format!("{prefix}-chat")),
        secret_ref = secret.reference(),
    );
    testkit::config_file(&text)
}

/// Ends a run routed to `ops` and `ops-chat` under the configuration `config`, in
/// this process (nothing is sent: no worker runs here); returns its id.
async fn commit_routed_run(
    db: &TestDb,
    store: &SqlStore,
    config: &tempfile::NamedTempFile,
) -> String {
    let (run, owed) = testkit::finish_routed_run_in_process(
        db,
        store,
        config,
        "acme",
        &["ops", "ops-chat"],
        serde_json::json!({"rows": 7}),
    )
    .await;
    assert_eq!(owed, 2);
    run
}

/// Waits until both of the run's deliveries completed.
async fn both_delivered(store: &SqlStore, run: &str) {
    wait_for("both deliveries", Duration::from_secs(30), async || {
        let events = store.events_for_parent("run", run).await.unwrap();
        events.len() == 2 && events.iter().all(|e| e.status == DeliveryStatus::Completed)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_route_changed_between_commit_and_send_does_not_change_what_was_frozen() {
    let (old_secret, new_secret) = (SecretFile::new(OLD_SECRET), SecretFile::new(NEW_SECRET));
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    receiver.verify_with("old-hook", OLD_SECRET);
    let committed_with = route_config(&receiver, "old", "Old Brand", &old_secret);
    // The run ends while the first configuration is in force; nothing is sent yet.
    let run = commit_routed_run(&db, &store, &committed_with).await;

    // The operator then moves the route, rebrands it and rotates its secret
    // reference; a new process starts with that configuration.
    let changed = route_config(&receiver, "new", "New Brand", &new_secret);
    let mut flags = flags_of("30");
    flags.extend(["--config".to_string(), changed.path().display().to_string()]);
    let herald = spawn(&db, &flags);
    both_delivered(&store, &run).await;
    drop(herald);

    let requests = receiver.requests();
    assert!(
        requests.iter().all(|r| r.path.starts_with("/old-")),
        "sent where the commit froze it: {:?}",
        requests.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    let hook = requests.iter().find(|r| r.path == "/old-hook").unwrap();
    assert_eq!(hook.body["brand"], "Old Brand");
    assert_eq!(hook.body["result"], serde_json::json!({"rows": 7}));
    assert_eq!(
        hook.verified,
        Some(true),
        "signed through the secret reference frozen at commit"
    );
    let chat = requests.iter().find(|r| r.path == "/old-chat").unwrap();
    assert_eq!(chat.body["username"], "Old Brand");
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

/// The secret a route's reference names is read when the request is signed, not
/// when the run ended: rotated in its file between commit and send, the new
/// secret signs (and the old one no longer verifies) (issue 19).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_secret_rotated_between_commit_and_send_signs_with_the_new_value() {
    let secret = SecretFile::new(OLD_SECRET);
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    let config = route_config(&receiver, "same", "Brand", &secret);
    let run = commit_routed_run(&db, &store, &config).await;
    // Rotated in place: the reference is unchanged, its value is new.
    secret.rewrite(NEW_SECRET);
    receiver.verify_with("same-hook", NEW_SECRET);
    let mut flags = flags_of("30");
    flags.extend(["--config".to_string(), config.path().display().to_string()]);
    let herald = spawn(&db, &flags);
    both_delivered(&store, &run).await;
    drop(herald);
    let hook = receiver
        .requests()
        .into_iter()
        .find(|r| r.path == "/same-hook")
        .unwrap();
    assert_eq!(hook.verified, Some(true), "signed with the rotated secret");
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

/// A node that cannot read the callback signing secret says so when it starts,
/// keeps the callbacks waiting (unsent, spending no attempt, however long it
/// lasts), never blames their receiver (its breaker stays closed), and sends them,
/// signed, once the secret is fixed in place (issue 19).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreadable_signing_secret_keeps_callbacks_waiting_unblamed_until_it_is_fixed() {
    herald::channels::install_crypto_provider();
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    let secret = SecretFile::new("not a secret");
    let reference = secret.reference();
    let events: Vec<NewEvent> = (0..3)
        .map(|i| {
            let mut event = parented(callback(&format!("unsigned-{i}"), &receiver.url()), PARENT);
            event.payload = serde_json::to_string(&WebhookPayload {
                url: receiver.url(),
                body: serde_json::json!({ "run_id": PARENT, "status": "succeeded" }),
                secret_ref: Some(reference.clone()),
            })
            .unwrap();
            event
        })
        .collect();
    enqueue(&store, &events).await;
    let mut flags = worker_flags("3");
    flags.extend([
        "--callback-secret-ref",
        reference.as_str(),
        "--breaker-failures",
        "1",
        "--max-attempts",
        "2",
        "--max-backoff-ms",
        "200",
    ]);
    let mut herald = HeraldProcess::spawn(&db.url, &flags);
    herald.ready().await;
    wait_for(
        "every callback to have been tried and held for want of its secret",
        Duration::from_secs(30),
        async || {
            for event in &events {
                let stored = store.get_event(&event.event_id).await.unwrap().unwrap();
                if !stored.last_error.unwrap_or_default().contains("secret") {
                    return false;
                }
            }
            true
        },
    )
    .await;
    // Ten times what two counted attempts would take to exhaust the cycle (a wait
    // of 200 ms each): still waiting, no attempt spent.
    tokio::time::sleep(Duration::from_secs(4)).await;
    // (Every 200 ms a deferred try claims it again: it may be caught in flight,
    // `processing` with the one attempt that claim holds until it is given back.)
    for event in &events {
        let stored = store.get_event(&event.event_id).await.unwrap().unwrap();
        assert!(
            matches!(
                stored.status,
                DeliveryStatus::Pending | DeliveryStatus::Processing
            ),
            "kept, not failed: {stored:?}"
        );
        assert!(stored.attempts <= 1, "no attempt was spent: {stored:?}");
        assert!(stored.failed_at.is_none(), "{stored:?}");
    }
    let breakers = herald::store::ports::DestinationStore::breakers(&store)
        .await
        .unwrap();
    assert!(
        breakers.iter().all(|b| b.state == "closed"),
        "a node's own configuration never opens its receiver's breaker: {breakers:?}"
    );
    assert_eq!(receiver.count(), 0, "nothing unsigned left the node");
    let alerts = lines_with(&herald.log, "the callback signing secret cannot be read");
    assert_eq!(alerts.len(), 1, "said once, at start");
    assert!(
        alerts[0].contains("ERROR") && alerts[0].contains(&reference),
        "an error line naming the reference: {alerts:?}"
    );

    // Fixed in place: every callback goes, signed with it.
    secret.rewrite(NEW_SECRET);
    receiver.verify_with("hook", NEW_SECRET);
    wait_for(
        "every callback delivered",
        Duration::from_secs(30),
        async || all_completed(&store, PARENT).await,
    )
    .await;
    let arrived = receiver.requests();
    assert_eq!(arrived.len(), 3, "each once");
    assert!(arrived.iter().all(|r| r.verified == Some(true)), "signed");
    herald.kill();
}
