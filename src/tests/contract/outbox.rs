//! The outbox port (DESIGN §3), on SQLite, PostgreSQL and MariaDB: enqueue inside
//! the producer's transaction (idempotent, a lost acknowledgement leaving one
//! event), claims under leases (a default lease, only registered kinds, each event
//! once), the fence (stale tokens, expired leases, replayed settlements), racing
//! sweepers, backoff, dead letters and manual retry.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use herald::config::{Settings, SettingsArgs};
use herald::outbox::model::{NewEvent, RetryRefusal, Settle, Settlement, Source};
use herald::store::ports::{ManualRetry, OutboxStore, RunRepository, SweepReport, Transactions};
use herald::store::SqlStore;
use sqlx::Executor;
use testkit::{claim, claim_request, enqueue, settlement, TestDb};
use vocab::DeliveryStatus;

testkit::contract_tests!(
    enqueue_rolls_back_with_the_producer_transaction,
    enqueue_is_idempotent_on_the_event_id,
    a_lost_enqueue_acknowledgement_leaves_exactly_one_event,
    concurrent_claimers_never_hold_the_same_event,
    stale_lease_tokens_cannot_write,
    expired_leases_are_reclaimed_with_a_new_token,
    retries_follow_the_backoff_and_the_cycle_ends_failed_with_a_dead_letter,
    manual_retry_is_a_compare_and_set_that_keeps_id_and_attempts,
    a_retry_compares_the_cycle_the_operator_saw,
    a_settlement_arriving_after_the_sweep_is_refused,
    expired_non_redeliverable_leases_become_uncertain,
    a_sweep_never_overwrites_an_event_that_completed,
    a_replayed_settlement_changes_nothing,
    a_batch_of_completions_tells_fresh_replayed_and_fenced_apart,
    a_batch_completing_one_event_under_a_lost_and_a_held_lease_takes_the_held_one,
    claims_take_only_registered_kinds_and_due_events,
    a_claim_of_expired_and_pending_events_hands_each_out_once,
    a_token_correct_write_after_the_lease_expired_is_refused,
    racing_sweepers_settle_each_expired_row_once,
    a_lease_expiring_on_the_last_attempt_ends_failed_with_a_dead_letter,
    a_claim_with_only_a_default_lease_uses_it,
    a_second_failure_keeps_the_first_dead_letter,
    a_claim_never_hands_out_more_than_its_batch_size,
    a_windowed_claim_takes_only_events_due_within_its_window,
    a_metered_destination_is_claimed_at_most_its_share_oldest_first,
    a_manual_retry_leaves_the_run_untouched,
    the_gauges_show_an_old_pending_event_and_an_expired_lease,
);

pub(crate) fn event(id: &str) -> NewEvent {
    testkit::test_event(id)
}

/// An event whose destination (its planner's origin) is `origin`.
fn event_to(id: &str, origin: Option<&str>) -> NewEvent {
    let mut e = event(id);
    e.destination = origin.map(str::to_string);
    e
}

pub(crate) async fn status(store: &SqlStore, id: &str) -> DeliveryStatus {
    store
        .get_event(id)
        .await
        .unwrap()
        .expect("event exists")
        .status
}

/// Settles as the worker does: a lost commit race (MySQL deadlock 1213, Galera
/// certification failure) rolled everything back, so the whole batch is retried.
pub(crate) async fn settle_retrying(store: &SqlStore, batch: &[Settlement]) -> Vec<bool> {
    for _ in 0..20 {
        match store.settle(batch).await {
            Ok(accepted) => return accepted,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("settle kept failing");
}

async fn enqueue_rolls_back_with_the_producer_transaction(db: &TestDb) {
    let store = db.store().await;
    let mut tx = store.begin_write().await.unwrap();
    store
        .enqueue_in(&mut tx, &event("rolled-back"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(store.get_event("rolled-back").await.unwrap().is_none());

    // A producer's state change and its event commit together.
    let run = store
        .create_run(herald::store::ports::NewRun {
            run_type: "etl".into(),
            tenant: "t".into(),
            callback_url: None,
            routes: Vec::new(),
        })
        .await
        .unwrap();
    let mut tx = store.begin_write().await.unwrap();
    sqlx::query(
        &store
            .engine()
            .sql("UPDATE runs SET status = 'succeeded' WHERE id = ?"),
    )
    .bind(&run.id)
    .execute(&mut *tx)
    .await
    .unwrap();
    store
        .enqueue_in(&mut tx, &event("with-state"))
        .await
        .unwrap();
    drop(tx); // dropped without commit: both vanish
    assert!(store.get_event("with-state").await.unwrap().is_none());
    assert_eq!(
        store.get_run(&run.id).await.unwrap().unwrap().status,
        vocab::RunStatus::Queued
    );
    store.close().await;
}

async fn enqueue_is_idempotent_on_the_event_id(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("e1")]).await;
    let mut changed = event("e1");
    changed.payload = "{\"n\":2}".into();
    enqueue(&store, &[changed, event("e1")]).await;
    let stored = store.get_event("e1").await.unwrap().unwrap();
    assert_eq!(
        stored.payload, "{\"n\":1}",
        "the first (frozen) payload wins"
    );
    assert_eq!(
        store.events_for_parent("run", "run-1").await.unwrap().len(),
        1
    );
    store.close().await;
}

async fn a_lost_enqueue_acknowledgement_leaves_exactly_one_event(db: &TestDb) {
    let store = db.store().await;
    // The commit lands, but the producer never hears so and runs the whole
    // transaction again.
    enqueue(&store, &[event("acked-late")]).await;
    enqueue(&store, &[event("acked-late")]).await;
    let events = store.events_for_parent("run", "run-1").await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].status, DeliveryStatus::Pending);
    store.close().await;
}

/// On SQLite the store is one connection, so these claimers queue rather than race;
/// `process::delivery::three_processes_claiming_one_store_deliver_each_event_once` races
/// separate processes on every engine.
async fn concurrent_claimers_never_hold_the_same_event(db: &TestDb) {
    let store = Arc::new(db.store().await);
    let events: Vec<NewEvent> = (0..200).map(|i| event(&format!("race-{i:03}"))).collect();
    enqueue(&store, &events).await;
    let mut workers = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        workers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            let mut empty_rounds = 0;
            while empty_rounds < 3 {
                let claimed = claim(&store, &claim_request(16, 30_000)).await;
                if claimed.is_empty() {
                    empty_rounds += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                empty_rounds = 0;
                let batch: Vec<Settlement> = claimed
                    .iter()
                    .map(|e| settlement(e, Settle::Completed))
                    .collect();
                let accepted = settle_retrying(&store, &batch).await;
                assert!(
                    accepted.iter().all(|ok| *ok),
                    "a live lease's completion is accepted"
                );
                mine.extend(claimed.into_iter().map(|e| e.event_id));
            }
            mine
        }));
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for worker in workers {
        for id in worker.await.unwrap() {
            *seen.entry(id).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), 200, "every event was claimed");
    assert!(seen.values().all(|n| *n == 1), "no event was claimed twice");
    for i in [0, 99, 199] {
        let e = store
            .get_event(&format!("race-{i:03}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(e.status, DeliveryStatus::Completed);
        assert_eq!(e.attempts, 1);
    }
    store.close().await;
}

async fn stale_lease_tokens_cannot_write(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("fenced")]).await;
    let claimed = claim(&store, &claim_request(10, 30_000)).await;
    assert_eq!(claimed.len(), 1);
    let mut stale = claimed[0].clone();
    stale.lease_token = "not-the-token".into();
    for settle in [
        Settle::Completed,
        Settle::Retry { delay_ms: 0 },
        Settle::Failed { exhausted: false },
        Settle::Skipped,
        Settle::Uncertain,
    ] {
        let accepted = store
            .settle(&[settlement(&stale, settle.clone())])
            .await
            .unwrap();
        assert_eq!(accepted, vec![false], "{settle:?} with a stale token");
    }
    assert_eq!(
        store
            .renew("not-the-token", &["fenced".into()], 60_000)
            .await
            .unwrap(),
        0
    );
    assert_eq!(status(&store, "fenced").await, DeliveryStatus::Processing);
    assert!(store.attempts("fenced").await.unwrap().is_empty());
    assert_eq!(store.dead_letter_count("fenced").await.unwrap(), 0);
    // The real token still works.
    assert_eq!(
        store
            .renew(&claimed[0].lease_token, &["fenced".into()], 60_000)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .settle(&[settlement(&claimed[0], Settle::Completed)])
            .await
            .unwrap(),
        vec![true]
    );
    assert_eq!(status(&store, "fenced").await, DeliveryStatus::Completed);
    store.close().await;
}

async fn expired_leases_are_reclaimed_with_a_new_token(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("slow")]).await;
    let first = claim(&store, &claim_request(10, 30_000)).await;
    assert_eq!(first.len(), 1);
    assert!(
        claim(&store, &claim_request(10, 30_000)).await.is_empty(),
        "a live lease is not taken over"
    );
    // The lease runs out (set in the past rather than waited for).
    store
        .pool()
        .execute("UPDATE outbox_events SET lease_expires_at = 1 WHERE event_id = 'slow'")
        .await
        .unwrap();
    let second = claim(&store, &claim_request(10, 30_000)).await;
    assert_eq!(
        second.len(),
        1,
        "an expired redeliverable lease is reclaimed"
    );
    assert_ne!(second[0].lease_token, first[0].lease_token);
    assert_eq!(second[0].event_id, "slow", "redelivery keeps the event id");
    assert_eq!(second[0].attempts, 2);
    // The first worker wakes up late: its result is dropped.
    assert_eq!(
        store
            .settle(&[settlement(&first[0], Settle::Completed)])
            .await
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        store
            .renew(&first[0].lease_token, &["slow".into()], 60_000)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .settle(&[settlement(&second[0], Settle::Completed)])
            .await
            .unwrap(),
        vec![true]
    );
    let attempts = store.attempts("slow").await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].attempt, 2);
    store.close().await;
}

async fn retries_follow_the_backoff_and_the_cycle_ends_failed_with_a_dead_letter(db: &TestDb) {
    use herald::outbox::handler::Outcome;
    use herald::outbox::policy::RetryPolicy;
    let store = db.store().await;
    enqueue(&store, &[event("flaky")]).await;
    // Backoffs far longer than any pause of a loaded machine, so "not due yet" is
    // certain; the test then makes each retry due itself instead of waiting.
    let policy = RetryPolicy {
        max_attempts: 6,
        initial_backoff: Duration::from_secs(40),
        max_backoff: Duration::from_secs(100),
        jitter: false,
        lease: Duration::from_secs(30),
    };
    let outcome = Outcome::Retryable {
        error: "503 from receiver".into(),
        status_code: Some(503),
        retry_after: None,
    };
    let mut delays = Vec::new();
    for attempt in 1..=6 {
        let claimed = claim(&store, &claim_request(10, 30_000)).await;
        assert_eq!(claimed.len(), 1, "attempt {attempt} is due");
        assert_eq!(claimed[0].cycle_attempts, attempt);
        let settle = outcome.settle(&claimed[0], &policy);
        if let Settle::Retry { delay_ms } = settle {
            delays.push(delay_ms);
        }
        let before = store.get_event("flaky").await.unwrap().unwrap();
        assert_eq!(
            store
                .settle(&[settlement(&claimed[0], settle)])
                .await
                .unwrap(),
            vec![true]
        );
        let after = store.get_event("flaky").await.unwrap().unwrap();
        if attempt < 6 {
            assert_eq!(after.status, DeliveryStatus::Pending);
            assert!(
                after.next_attempt_at >= before.updated_at + delays.last().unwrap() - 5,
                "due after the backoff"
            );
            assert!(
                claim(&store, &claim_request(10, 30_000)).await.is_empty(),
                "not due before the backoff"
            );
            // The backoff has been checked; skip the wait.
            store
                .pool()
                .execute("UPDATE outbox_events SET next_attempt_at = 0 WHERE event_id = 'flaky'")
                .await
                .unwrap();
        }
    }
    assert_eq!(
        delays,
        vec![40_000, 80_000, 100_000, 100_000, 100_000],
        "exponential, capped"
    );
    let failed = store.get_event("flaky").await.unwrap().unwrap();
    assert_eq!(failed.status, DeliveryStatus::Failed);
    assert_eq!(failed.attempts, 6);
    assert!(failed.failed_at.is_some() && failed.alerted_at.is_some());
    assert_eq!(failed.last_error.as_deref(), Some("boom"));
    assert_eq!(
        failed.dead_letter_id.as_deref(),
        Some("dead_letter_flaky_1")
    );
    assert_eq!(store.dead_letter_count("flaky").await.unwrap(), 1);
    assert_eq!(store.attempts("flaky").await.unwrap().len(), 6);
    assert!(
        claim(&store, &claim_request(10, 30_000)).await.is_empty(),
        "failed is never claimed"
    );
    store.close().await;
}

async fn manual_retry_is_a_compare_and_set_that_keeps_id_and_attempts(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("shelved"), event("unsure")]).await;
    let claimed = claim(&store, &claim_request(10, 30_000)).await;
    let by_id = |id: &str| claimed.iter().find(|e| e.event_id == id).unwrap().clone();
    store
        .settle(&[
            settlement(&by_id("shelved"), Settle::Failed { exhausted: false }),
            settlement(&by_id("unsure"), Settle::Uncertain),
        ])
        .await
        .unwrap();
    let retry = |id: &str, kind: &str, expected, allow_uncertain| ManualRetry {
        event_id: id.into(),
        kind: kind.into(),
        expected_status: expected,
        expected_cycle: None,
        allow_uncertain,
        actor: "operator".into(),
        max_attempts: 6,
        audit: true,
    };
    assert_eq!(
        store
            .retry_event(&retry("shelved", "test", DeliveryStatus::Pending, false))
            .await
            .unwrap(),
        Err(RetryRefusal::NotRetryable("pending".into()))
    );
    assert!(matches!(
        store
            .retry_event(&retry("shelved", "other", DeliveryStatus::Failed, false))
            .await
            .unwrap(),
        Err(RetryRefusal::KindMismatch { .. })
    ));
    assert_eq!(
        store
            .retry_event(&retry("nope", "test", DeliveryStatus::Failed, false))
            .await
            .unwrap(),
        Err(RetryRefusal::NotFound("nope".into()))
    );
    assert_eq!(
        store
            .retry_event(&retry("unsure", "test", DeliveryStatus::Uncertain, false))
            .await
            .unwrap(),
        Err(RetryRefusal::UncertainNeedsAcknowledgement)
    );
    store
        .retry_event(&retry("shelved", "test", DeliveryStatus::Failed, false))
        .await
        .unwrap()
        .unwrap();
    // A second operator acting on the same stale view is refused (HTTP 409).
    assert!(matches!(
        store.retry_event(&retry("shelved", "test", DeliveryStatus::Failed, false)).await.unwrap(),
        Err(RetryRefusal::StatusChanged { ref current, .. }) if current == "pending"
    ));
    store
        .retry_event(&retry("unsure", "test", DeliveryStatus::Uncertain, true))
        .await
        .unwrap()
        .unwrap();

    let again = claim(&store, &claim_request(10, 30_000)).await;
    assert_eq!(again.len(), 2);
    for e in &again {
        assert_eq!(e.cycle, 2, "a new cycle");
        assert_eq!(e.cycle_attempts, 1, "the cycle restarts");
        assert_eq!(e.attempts, 2, "cumulative attempts are kept");
    }
    let shelved = store.get_event("shelved").await.unwrap().unwrap();
    assert!(shelved.failed_at.is_none() && shelved.alerted_at.is_none());
    let audits: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox_audit")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(audits, 2);
    let acknowledged: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM outbox_audit WHERE acknowledged_duplicate_risk = 1 AND actor = 'operator'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(acknowledged, 1);
    store.close().await;
}

async fn expired_non_redeliverable_leases_become_uncertain(db: &TestDb) {
    let store = db.store().await;
    let mut chat = event("chat-1");
    chat.redeliverable = false;
    enqueue(&store, &[chat]).await;
    let claimed = claim(&store, &claim_request(10, 200)).await;
    assert_eq!(claimed.len(), 1);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(
        claim(&store, &claim_request(10, 200)).await.is_empty(),
        "never resent automatically"
    );
    let report = testkit::sweep(&store, None).await;
    assert_eq!(
        report.uncertain,
        vec![("chat-1".to_string(), "test".to_string())]
    );
    let e = store.get_event("chat-1").await.unwrap().unwrap();
    assert_eq!(e.status, DeliveryStatus::Uncertain);
    assert!(e.uncertain_at.is_some());
    assert_eq!(
        store
            .settle(&[settlement(&claimed[0], Settle::Completed)])
            .await
            .unwrap(),
        vec![false]
    );
    store.close().await;
}

async fn a_sweep_never_overwrites_an_event_that_completed(db: &TestDb) {
    let store = db.store().await;
    let mut chat = event("finished");
    chat.redeliverable = false;
    enqueue(&store, &[chat]).await;
    let claimed = claim(&store, &claim_request(10, 30_000)).await;
    assert_eq!(
        store
            .settle(&[settlement(&claimed[0], Settle::Completed)])
            .await
            .unwrap(),
        vec![true]
    );
    // Even with the lease's old expiry in the past, a completed row is left alone.
    sqlx::query("UPDATE outbox_events SET lease_expires_at = 0")
        .execute(store.pool())
        .await
        .unwrap();
    let report = testkit::sweep(&store, None).await;
    assert!(report.uncertain.is_empty() && report.failed.is_empty());
    assert!(claim(&store, &claim_request(10, 30_000)).await.is_empty());
    assert_eq!(status(&store, "finished").await, DeliveryStatus::Completed);
    store.close().await;
}

async fn a_replayed_settlement_changes_nothing(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("once")]).await;
    let claimed = claim(&store, &claim_request(10, 30_000)).await;
    let batch = vec![settlement(&claimed[0], Settle::Completed)];
    assert_eq!(store.settle(&batch).await.unwrap(), vec![true]);
    // The commit landed but the worker did not hear so and tries again: the store
    // recognises the completion as its own and writes nothing twice.
    assert_eq!(store.settle(&batch).await.unwrap(), vec![true]);
    let mut failed = settlement(&claimed[0], Settle::Failed { exhausted: false });
    failed.attempt += 1;
    assert_eq!(
        store.settle(&[failed]).await.unwrap(),
        vec![false],
        "a completed event stays completed"
    );
    assert_eq!(store.dead_letter_count("once").await.unwrap(), 0);
    assert_eq!(store.attempts("once").await.unwrap().len(), 1);
    assert_eq!(status(&store, "once").await, DeliveryStatus::Completed);
    store.close().await;
}

/// A worker's batch of completions (one statement on PostgreSQL, one
/// transaction elsewhere) answers each as the fence says: a fresh one and one
/// already written (its acknowledgement lost) accepted, one under a stale token
/// refused; each attempt logged once, and the whole batch replayed changes
/// nothing.
async fn a_batch_of_completions_tells_fresh_replayed_and_fenced_apart(db: &TestDb) {
    let store = db.store().await;
    enqueue(
        &store,
        &[event("fresh"), event("replayed"), event("fenced")],
    )
    .await;
    let claimed = claim(&store, &claim_request(10, 30_000)).await;
    let completion = |id: &str| {
        let event = claimed.iter().find(|c| c.event_id == id).expect("claimed");
        settlement(event, Settle::Completed)
    };
    let replayed = completion("replayed");
    assert_eq!(
        store.settle(std::slice::from_ref(&replayed)).await.unwrap(),
        vec![true]
    );
    let mut fenced = completion("fenced");
    fenced.lease_token = "not-the-token".into();
    let batch = vec![completion("fresh"), replayed, fenced];
    for round in ["first", "replayed"] {
        assert_eq!(
            store.settle(&batch).await.unwrap(),
            vec![true, true, false],
            "{round} settle of the batch"
        );
    }
    for (id, expected, attempts) in [
        ("fresh", DeliveryStatus::Completed, 1),
        ("replayed", DeliveryStatus::Completed, 1),
        ("fenced", DeliveryStatus::Processing, 0),
    ] {
        let event = store.get_event(id).await.unwrap().expect("event exists");
        assert_eq!(event.status, expected, "{id}");
        let logged = store.attempts(id).await.unwrap();
        assert_eq!(logged.len(), attempts, "{id}'s attempt rows");
        if expected == DeliveryStatus::Completed {
            assert_eq!(event.last_status_code, Some(200), "{id}");
            assert_eq!(logged[0].outcome, "completed", "{id}");
            assert_eq!(logged[0].status_code, Some(200), "{id}");
        }
    }
    store.close().await;
}

/// One event in a batch twice: its completion under a lease that expired (the
/// handler's result waited while the event was claimed again) and under the
/// lease it holds now. The held one is accepted and logged; the lost one is
/// refused and leaves no attempt row.
async fn a_batch_completing_one_event_under_a_lost_and_a_held_lease_takes_the_held_one(
    db: &TestDb,
) {
    let store = db.store().await;
    enqueue(&store, &[event("twice")]).await;
    let lost = claim(&store, &claim_request(10, 200)).await;
    assert_eq!(lost.len(), 1);
    tokio::time::sleep(Duration::from_millis(350)).await;
    let held = claim(&store, &claim_request(10, 30_000)).await;
    assert_eq!(held.len(), 1, "the expired lease is claimed again");
    assert_ne!(held[0].lease_token, lost[0].lease_token);
    let batch = vec![
        settlement(&lost[0], Settle::Completed),
        settlement(&held[0], Settle::Completed),
    ];
    assert_eq!(store.settle(&batch).await.unwrap(), vec![false, true]);
    let logged = store.attempts("twice").await.unwrap();
    assert_eq!(logged.len(), 1, "only the held lease's attempt is logged");
    assert_eq!(logged[0].attempt, held[0].attempts);
    assert_eq!(status(&store, "twice").await, DeliveryStatus::Completed);
    store.close().await;
}

async fn claims_take_only_registered_kinds_and_due_events(db: &TestDb) {
    let store = db.store().await;
    let mut other = event("other-kind");
    other.kind = "unhandled".into();
    let mut later = event("later");
    later.delay_ms = 60_000;
    enqueue(&store, &[other, later, event("now")]).await;
    let claimed = claim(&store, &claim_request(10, 30_000)).await;
    let ids: Vec<&str> = claimed.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, vec!["now"]);
    assert_eq!(claimed[0].payload, "{\"n\":1}");
    store.close().await;
}

async fn a_claim_of_expired_and_pending_events_hands_each_out_once(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("expired")]).await;
    assert_eq!(claim(&store, &claim_request(10, 200)).await.len(), 1);
    tokio::time::sleep(Duration::from_millis(350)).await;
    enqueue(&store, &[event("fresh")]).await;
    let claimed = claim(&store, &claim_request(10, 30_000)).await;
    let mut ids: Vec<&str> = claimed.iter().map(|e| e.event_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec!["expired", "fresh"], "each event exactly once");
    let batch: Vec<Settlement> = claimed
        .iter()
        .map(|e| settlement(e, Settle::Completed))
        .collect();
    assert_eq!(settle_retrying(&store, &batch).await, vec![true, true]);
    store.close().await;
}

fn event_with(id: &str, redeliverable: bool, max_attempts: u32) -> NewEvent {
    NewEvent {
        event_id: id.to_string(),
        source: Source::Jobs,
        kind: "test".into(),
        parent_type: "run".into(),
        parent_id: "gaps".into(),
        payload: "{}".into(),
        redeliverable,
        max_attempts,
        delay_ms: 0,
        destination: None,
        trace_parent: None,
        lane: None,
    }
}

async fn a_token_correct_write_after_the_lease_expired_is_refused(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event_with("expired-own", true, 6)]).await;
    let claimed = claim(&store, &claim_request(1, 300)).await;
    assert_eq!(claimed.len(), 1);
    // Nobody reclaims it: the token is still the row's own, only the time is up.
    tokio::time::sleep(Duration::from_millis(450)).await;
    let token = &claimed[0].lease_token;
    assert_eq!(
        store
            .renew(token, &["expired-own".into()], 60_000)
            .await
            .unwrap(),
        0,
        "an expired lease is not renewed, even by its holder"
    );
    for settle in [
        Settle::Completed,
        Settle::Retry { delay_ms: 0 },
        Settle::Failed { exhausted: true },
        Settle::Skipped,
        Settle::Uncertain,
    ] {
        assert_eq!(
            store
                .settle(&[settlement(&claimed[0], settle.clone())])
                .await
                .unwrap(),
            vec![false],
            "{settle:?} with the right token after expiry"
        );
    }
    let row = store.get_event("expired-own").await.unwrap().unwrap();
    assert_eq!(row.status, DeliveryStatus::Processing);
    assert!(store.attempts("expired-own").await.unwrap().is_empty());
    assert_eq!(store.dead_letter_count("expired-own").await.unwrap(), 0);
    // And the next claimer gets it, under a new token.
    let again = claim(&store, &claim_request(1, 30_000)).await;
    assert_eq!(again.len(), 1);
    assert_ne!(&again[0].lease_token, token);
    store.close().await;
}

async fn racing_sweepers_settle_each_expired_row_once(db: &TestDb) {
    let store = Arc::new(db.store().await);
    // Half must become uncertain (non-redeliverable), half failed (spent cycle).
    let mut events = Vec::new();
    for i in 0..12 {
        events.push(event_with(&format!("chat-{i:02}"), false, 6));
        events.push(event_with(&format!("last-{i:02}"), true, 1));
    }
    enqueue(&store, &events).await;
    assert_eq!(claim(&store, &claim_request(100, 200)).await.len(), 24);
    tokio::time::sleep(Duration::from_millis(350)).await;

    // Four maintenance loops (four nodes) find the same rows processing and expired.
    let barrier = Arc::new(tokio::sync::Barrier::new(4));
    let mut sweepers = Vec::new();
    for _ in 0..4 {
        let store = store.clone();
        let barrier = barrier.clone();
        sweepers.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut reported = Vec::new();
            for _ in 0..20 {
                let mut report = SweepReport::default();
                let swept = store.sweep_expired(100, None, &mut report).await;
                // What a pass committed counts even when it stopped on an error.
                reported.extend(report.uncertain.into_iter().map(|(id, _)| id));
                reported.extend(report.failed.into_iter().map(|(id, _)| id));
                if swept.is_err() {
                    // A lost commit race (MySQL 1213) is retried, as maintenance does.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            reported
        }));
    }
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    for sweeper in sweepers {
        for id in sweeper.await.unwrap() {
            *seen.entry(id).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), 24, "every expired row was swept: {seen:?}");
    assert!(
        seen.values().all(|n| *n == 1),
        "a row was swept (and alerted) by more than one sweeper: {seen:?}"
    );
    for i in 0..12 {
        let chat = store
            .get_event(&format!("chat-{i:02}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(chat.status, DeliveryStatus::Uncertain);
        let last = format!("last-{i:02}");
        let failed = store.get_event(&last).await.unwrap().unwrap();
        assert_eq!(failed.status, DeliveryStatus::Failed);
        assert_eq!(store.dead_letter_count(&last).await.unwrap(), 1);
    }
    store.close().await;
}

async fn a_lease_expiring_on_the_last_attempt_ends_failed_with_a_dead_letter(db: &TestDb) {
    let store = db.store().await;
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        "dead_letter_route = \"ops\"\n[[routes]]\nname = \"ops\"\nchannel = \"webhook\"\n\
         url = \"https://ops.example/dead\"\n",
    )
    .unwrap();
    let settings = Settings::resolve(&SettingsArgs {
        database_url: Some(db.url.clone()),
        config: Some(config.path().to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    let planner = Arc::new(herald::runtime::jobs_planner(&settings));
    let notifier = planner.dead_letter_notifier();
    enqueue(&store, &[event_with("last-try", true, 2)]).await;
    // First attempt: a retry, due at once.
    let first = claim(&store, &claim_request(1, 30_000)).await;
    assert_eq!(
        store
            .settle(&[settlement(&first[0], Settle::Retry { delay_ms: 0 })])
            .await
            .unwrap(),
        vec![true]
    );
    // Second (last) attempt: the worker dies holding it.
    let last = claim(&store, &claim_request(1, 200)).await;
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].cycle_attempts, 2);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(
        claim(&store, &claim_request(1, 30_000)).await.is_empty(),
        "a spent cycle is not redelivered"
    );
    let report = testkit::sweep(&store, notifier.as_ref()).await;
    assert_eq!(report.failed, vec![("last-try".into(), "test".into())]);
    assert!(report.uncertain.is_empty());
    let failed = store.get_event("last-try").await.unwrap().unwrap();
    assert_eq!(failed.status, DeliveryStatus::Failed);
    assert!(failed.failed_at.is_some() && failed.alerted_at.is_some());
    assert_eq!(
        failed.dead_letter_id.as_deref(),
        Some("dead_letter_last-try_1")
    );
    assert!(failed
        .last_error
        .as_deref()
        .unwrap_or_default()
        .contains("lease expired"));
    assert_eq!(store.dead_letter_count("last-try").await.unwrap(), 1);
    let notice = store
        .get_event("dead_letter_last-try_1")
        .await
        .unwrap()
        .expect("the dead-letter notice was enqueued with the failure");
    assert_eq!(notice.status, DeliveryStatus::Pending);
    assert_eq!(notice.kind, "dead_letter");
    // A second sweep finds nothing more to do.
    let again = testkit::sweep(&store, notifier.as_ref()).await;
    assert!(again.failed.is_empty() && again.uncertain.is_empty());
    store.close().await;
}

async fn a_claim_with_only_a_default_lease_uses_it(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event_with("default-lease", true, 6)]).await;
    let mut request = claim_request(1, 60_000);
    request.lease_ms_by_kind.clear();
    let claimed = store
        .claim(&request)
        .await
        .expect("a claim without per-kind leases");
    assert_eq!(claimed.len(), 1);
    let row = store.get_event("default-lease").await.unwrap().unwrap();
    let lease = row.lease_expires_at.unwrap() - row.updated_at;
    assert_eq!(lease, 60_000, "the default lease applies");
    store.close().await;
}

/// Two operators look at one failed delivery in cycle 1; the first retries it and
/// it fails again, in cycle 2. The second's retry is of a state they never saw: it
/// is refused with the current state, though the status reads the same (issue 19).
async fn a_retry_compares_the_cycle_the_operator_saw(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("seen-twice")]).await;
    let fail_once = async || {
        let claimed = claim(&store, &claim_request(1, 30_000)).await;
        assert_eq!(claimed.len(), 1);
        let settled = store
            .settle(&[settlement(&claimed[0], Settle::Failed { exhausted: false })])
            .await
            .unwrap();
        assert_eq!(settled, vec![true]);
    };
    let retry = |cycle: i64| ManualRetry {
        event_id: "seen-twice".into(),
        kind: "test".into(),
        expected_status: DeliveryStatus::Failed,
        expected_cycle: Some(cycle),
        allow_uncertain: false,
        actor: "operator".into(),
        max_attempts: 6,
        audit: true,
    };
    fail_once().await;
    let seen = store.get_event("seen-twice").await.unwrap().unwrap();
    assert_eq!((seen.status, seen.cycle), (DeliveryStatus::Failed, 1));

    store.retry_event(&retry(1)).await.unwrap().unwrap();
    fail_once().await;
    assert_eq!(
        store.retry_event(&retry(1)).await.unwrap(),
        Err(RetryRefusal::CycleChanged {
            current: "failed".into(),
            current_cycle: 2,
            expected_cycle: 1,
        })
    );
    let now = store.get_event("seen-twice").await.unwrap().unwrap();
    assert_eq!(
        (now.status, now.cycle),
        (DeliveryStatus::Failed, 2),
        "left alone"
    );
    // The state as it is now can be retried.
    store.retry_event(&retry(2)).await.unwrap().unwrap();
    store.close().await;
}

/// A worker whose lease expired settles after the sweep moved its event on: the
/// fence refuses it, so nothing is written twice and no alert fires twice
/// (issue 19). Both sweeps: to `uncertain` (not redeliverable) and to `failed`
/// (the cycle's last attempt).
async fn a_settlement_arriving_after_the_sweep_is_refused(db: &TestDb) {
    let store = db.store().await;
    enqueue(
        &store,
        &[
            event_with("late-unsure", false, 6),
            event_with("late-last", true, 1),
        ],
    )
    .await;
    let claimed = claim(&store, &claim_request(10, 200)).await;
    assert_eq!(claimed.len(), 2);
    tokio::time::sleep(Duration::from_millis(350)).await;
    let report = testkit::sweep(&store, None).await;
    assert_eq!(report.uncertain.len(), 1, "{report:?}");
    assert_eq!(report.failed.len(), 1, "{report:?}");
    let by_id = |id: &str| claimed.iter().find(|e| e.event_id == id).unwrap().clone();
    let late = store
        .settle(&[
            settlement(&by_id("late-unsure"), Settle::Uncertain),
            settlement(&by_id("late-last"), Settle::Failed { exhausted: true }),
        ])
        .await
        .unwrap();
    assert_eq!(late, vec![false, false], "late settlements are refused");
    let unsure = store.get_event("late-unsure").await.unwrap().unwrap();
    assert_eq!(unsure.status, DeliveryStatus::Uncertain);
    store.close().await;
}

/// An event fails, an operator retries it, and it fails again for another reason:
/// both failures keep their dead letter, one per cycle, and the event points at
/// the latest (issue 19: the second used to overwrite the first's reason).
async fn a_second_failure_keeps_the_first_dead_letter(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("twice")]).await;
    let first = claim(&store, &claim_request(10, 30_000)).await.remove(0);
    let mut failing = settlement(&first, Settle::Failed { exhausted: false });
    failing.error = Some("the receiver said 410 Gone".into());
    assert_eq!(store.settle(&[failing]).await.unwrap(), vec![true]);
    store
        .retry_event(&ManualRetry {
            event_id: "twice".into(),
            kind: "test".into(),
            expected_status: DeliveryStatus::Failed,
            expected_cycle: Some(1),
            allow_uncertain: false,
            actor: "operator".into(),
            max_attempts: 6,
            audit: true,
        })
        .await
        .unwrap()
        .unwrap();
    let second = claim(&store, &claim_request(10, 30_000)).await.remove(0);
    assert_eq!(second.cycle, 2);
    let mut failing = settlement(&second, Settle::Failed { exhausted: false });
    failing.error = Some("the receiver said 403 Forbidden".into());
    assert_eq!(store.settle(&[failing]).await.unwrap(), vec![true]);

    assert_eq!(
        store.dead_letters("twice").await.unwrap(),
        vec![
            (1, "the receiver said 410 Gone".to_string()),
            (2, "the receiver said 403 Forbidden".to_string()),
        ]
    );
    let failed = store.get_event("twice").await.unwrap().unwrap();
    assert_eq!(
        failed.dead_letter_id.as_deref(),
        Some("dead_letter_twice_2")
    );
    store.close().await;
}

/// However much is due (expired leases and pending events, some with a
/// destination, some avoided), one claim hands out at most its batch size, and
/// claim after claim hands out each event once.
async fn a_claim_never_hands_out_more_than_its_batch_size(db: &TestDb) {
    let store = db.store().await;
    let events: Vec<NewEvent> = (0..15)
        .map(|i| {
            let mut e = event(&format!("cap-{i:02}"));
            e.destination = match i % 3 {
                0 => Some("https://partner.example:443".into()),
                1 => Some("https://avoided.example:443".into()),
                _ => None,
            };
            e
        })
        .collect();
    enqueue(&store, &events[..6]).await;
    assert_eq!(claim(&store, &claim_request(6, 200)).await.len(), 6);
    tokio::time::sleep(Duration::from_millis(350)).await;
    enqueue(&store, &events[6..]).await;
    let avoid = vec!["https://avoided.example:443".to_string()];
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20 {
        let claimed = store
            .claim_avoiding(&claim_request(4, 30_000), &avoid)
            .await
            .unwrap()
            .events;
        assert!(
            claimed.len() <= 4,
            "a claim of 4 handed out {}",
            claimed.len()
        );
        if claimed.is_empty() {
            break;
        }
        for e in claimed {
            assert!(seen.insert(e.event_id.clone()), "{} twice", e.event_id);
        }
    }
    // Every event but the avoided destination's pending ones (its expired leases
    // are reclaimed whatever the destination: they were admitted once already).
    let avoided_pending = (6..15).filter(|i| i % 3 == 1).count();
    assert_eq!(seen.len(), 15 - avoided_pending, "{seen:?}");
    store.close().await;
}

/// The ids one claim leaving out `avoid` hands out, sorted.
async fn claimed_ids(
    store: &SqlStore,
    request: &herald::store::ports::ClaimRequest,
    avoid: &[String],
) -> Vec<String> {
    let claimed = store.claim_avoiding(request, avoid).await.unwrap();
    assert!(!claimed.cut_short, "every pick ran");
    let mut ids: Vec<String> = claimed.events.into_iter().map(|e| e.event_id).collect();
    ids.sort();
    ids
}

/// A claim with a window (`due_within_ms`, what `outbox::frontier` sets after a
/// drained claim) takes only pending events due inside it, still leaving out the
/// avoided destinations and still reclaiming expired leases of any age; with
/// destinations readmitted it takes theirs whole, oldest first; the events before
/// the window are claimed by the next claim without one.
async fn a_windowed_claim_takes_only_events_due_within_its_window(db: &TestDb) {
    let store = db.store().await;
    let busy = "https://busy.example:443";
    let other = "https://other.example:443";
    enqueue(&store, &[event("expired-lease")]).await;
    let leased = claim(&store, &claim_request(1, 30_000)).await;
    assert_eq!(leased.len(), 1);
    let third = "https://third.example:443";
    enqueue(
        &store,
        &[
            event_to("old-other", Some(other)),
            event_to("old-busy", Some(busy)),
            event_to("old-third", Some(third)),
        ],
    )
    .await;
    // Arranged: two events due a minute ago, one lease that expired long ago.
    store
        .pool()
        .execute(
            "UPDATE outbox_events SET next_attempt_at = next_attempt_at - 60000, \
             lease_expires_at = CASE WHEN status = 'processing' THEN 1 ELSE lease_expires_at END",
        )
        .await
        .unwrap();
    enqueue(
        &store,
        &[
            event_to("new-other", Some(other)),
            event_to("new-busy", Some(busy)),
        ],
    )
    .await;

    let avoid = vec![busy.to_string()];
    let windowed = herald::store::ports::ClaimRequest {
        due_within_ms: Some(30_000),
        ..claim_request(10, 30_000)
    };
    assert_eq!(
        claimed_ids(&store, &windowed, &avoid).await,
        ["expired-lease", "new-other"],
        "the window, and the expired lease"
    );
    assert_eq!(status(&store, "old-busy").await, DeliveryStatus::Pending);
    assert_eq!(status(&store, "new-busy").await, DeliveryStatus::Pending);

    // `busy` back: its events of any age, then the window (nothing new in it).
    let readmitted = herald::store::ports::ClaimRequest {
        readmitted: vec![busy.to_string()],
        ..windowed
    };
    assert_eq!(
        claimed_ids(&store, &readmitted, &[]).await,
        ["new-busy", "old-busy"],
        "the readmitted destination whole"
    );
    assert_eq!(
        claimed_ids(&store, &claim_request(10, 30_000), &[]).await,
        ["old-other", "old-third"],
        "a full claim"
    );
    store.close().await;
}

/// A metered destination (`ClaimRequest::metered`, a slow one: `outbox::pace`)
/// is claimed apart, at most its share and oldest first, and left out of the rest
/// of the claim; the claim's limit still bounds the whole.
async fn a_metered_destination_is_claimed_at_most_its_share_oldest_first(db: &TestDb) {
    let store = db.store().await;
    let slow = "https://slow.example:443";
    enqueue(
        &store,
        &[
            event_to("slow-old-1", Some(slow)),
            event_to("slow-old-2", Some(slow)),
            event_to("slow-old-3", Some(slow)),
        ],
    )
    .await;
    // Arranged: the old ones due a minute, a second and a half and two seconds
    // before the rest.
    for (id, ms) in [
        ("slow-old-1", 60_000),
        ("slow-old-2", 2_000),
        ("slow-old-3", 1_500),
    ] {
        let sql = store.engine().sql(
            "UPDATE outbox_events SET next_attempt_at = next_attempt_at - ? WHERE event_id = ?",
        );
        sqlx::query(&sql)
            .bind(ms as i64)
            .bind(id)
            .execute(store.pool())
            .await
            .unwrap();
    }
    enqueue(
        &store,
        &[
            event_to("slow-new-1", Some(slow)),
            event_to("slow-new-2", Some(slow)),
            event_to("other", Some("https://other.example:443")),
            event_to("nowhere", None),
        ],
    )
    .await;

    let metered = |limit: u32, share: u32| herald::store::ports::ClaimRequest {
        metered: vec![(slow.to_string(), share)],
        ..claim_request(limit, 30_000)
    };
    assert_eq!(
        claimed_ids(&store, &metered(1, 2), &[]).await,
        ["slow-old-1"],
        "the limit bounds the whole claim"
    );
    assert_eq!(
        claimed_ids(&store, &metered(10, 2), &[]).await,
        ["nowhere", "other", "slow-old-2", "slow-old-3"],
        "its share, oldest first; the rest of the claim leaves it out"
    );
    assert_eq!(
        claimed_ids(&store, &claim_request(10, 30_000), &[]).await,
        ["slow-new-1", "slow-new-2"],
        "unmetered, the rest"
    );
    store.close().await;
}

/// Retrying a run's failed delivery changes the delivery only: the run keeps its
/// status, its result and its `updated_at`.
async fn a_manual_retry_leaves_the_run_untouched(db: &TestDb) {
    let store = db.store().await;
    let run = store
        .create_run(herald::store::ports::NewRun {
            run_type: "etl".into(),
            tenant: "acme".into(),
            callback_url: None,
            routes: Vec::new(),
        })
        .await
        .unwrap();
    let mut owed = event("run-owed");
    owed.parent_id = run.id.clone();
    enqueue(&store, &[owed]).await;
    let claimed = claim(&store, &claim_request(1, 30_000)).await.remove(0);
    store
        .settle(&[settlement(&claimed, Settle::Failed { exhausted: true })])
        .await
        .unwrap();
    let before = store.get_run(&run.id).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    store
        .retry_event(&ManualRetry {
            event_id: "run-owed".into(),
            kind: "test".into(),
            expected_status: DeliveryStatus::Failed,
            expected_cycle: Some(1),
            allow_uncertain: false,
            actor: "operator".into(),
            max_attempts: 6,
            audit: true,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status(&store, "run-owed").await, DeliveryStatus::Pending);
    let after = store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(
        (after.status, &after.result, after.updated_at_ms),
        (before.status, &before.result, before.updated_at_ms),
        "the run is untouched"
    );
    store.close().await;
}

/// The value of the gauge line starting with `series` in `text`.
fn gauge(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} missing:\n{text}"))
}

/// A pending event created 90 s ago and a lease that expired unsettled read above
/// 0 in `herald_outbox_oldest_pending_age_seconds` and `herald_outbox_expired_leases`
/// (and both fall back to 0 once the events move on).
async fn the_gauges_show_an_old_pending_event_and_an_expired_lease(db: &TestDb) {
    use herald::outbox::metrics::Metrics;
    let store = db.store().await;
    enqueue(&store, &[event("held"), event("waiting")]).await;
    let held = claim(&store, &claim_request(1, 30_000)).await.remove(0);
    let (held_id, waiting) = if held.event_id == "held" {
        ("held", "waiting")
    } else {
        ("waiting", "held")
    };
    // Arranged as time would leave them: the other event 90 s old and still
    // pending, the claimed one's lease run out without a settlement.
    for (sql, id) in [
        (
            "UPDATE outbox_events SET created_at = created_at - 90000 WHERE event_id = ?",
            waiting,
        ),
        (
            "UPDATE outbox_events SET lease_expires_at = 1 WHERE event_id = ?",
            held_id,
        ),
    ] {
        sqlx::query(&store.engine().sql(sql))
            .bind(id)
            .execute(store.pool())
            .await
            .unwrap();
    }
    let metrics = Metrics::new();
    metrics.declare("jobs", "test");
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    metrics.refresh("jobs", &store.stats(false).await.unwrap(), now_ms());
    let text = metrics.render();
    let age = gauge(
        &text,
        r#"herald_outbox_oldest_pending_age_seconds{kind="test",source="jobs"}"#,
    );
    assert!((90.0..120.0).contains(&age), "oldest pending age {age}");
    let expired = r#"herald_outbox_expired_leases{kind="test",source="jobs"}"#;
    assert_eq!(gauge(&text, expired), 1.0);

    // Both settle: the gauges read 0 again.
    let both = claim(&store, &claim_request(10, 30_000)).await;
    assert_eq!(both.len(), 2, "the pending one and the expired lease");
    let done: Vec<Settlement> = both
        .iter()
        .map(|e| settlement(e, Settle::Completed))
        .collect();
    settle_retrying(&store, &done).await;
    metrics.refresh("jobs", &store.stats(false).await.unwrap(), now_ms());
    let text = metrics.render();
    assert_eq!(
        gauge(
            &text,
            r#"herald_outbox_oldest_pending_age_seconds{kind="test",source="jobs"}"#
        ),
        0.0
    );
    assert_eq!(gauge(&text, expired), 0.0);
    store.close().await;
}
