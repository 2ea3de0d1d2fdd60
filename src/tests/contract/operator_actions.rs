//! Operators' actions on SQLite, PostgreSQL and MariaDB (issue 19). Every state
//! change an operator causes is audited in the transaction that makes it: a bulk
//! retry that fails part-way leaves every retry it committed audited, and a
//! breaker close whose audit row cannot be written closes nothing (faults are real
//! triggers). A bulk retry's preview counts what the retry will do, past the cap.

use std::sync::Arc;

use app::dto::DeliveryQuery;
use herald::outbox::handler::Registry;
use herald::outbox::model::{NewEvent, Source};
use herald::service::deliveries::DeliveryService;
use herald::service::destinations::DestinationService;
use herald::store::ports::{DeliveryReads, DestinationStore};
use herald::store::SqlStore;
use sqlx::Executor;
use testkit::faults::{InsertFault, StatusFault};
use testkit::{enqueue, TestDb};
use vocab::{Role, Viewer};

testkit::contract_tests!(
    a_bulk_retry_failing_part_way_leaves_every_committed_retry_audited,
    a_breaker_close_whose_audit_row_fails_closes_nothing,
    the_bulk_preview_counts_what_the_retry_will_do_past_the_cap,
);

const EVENTS: usize = 250;

fn operator() -> Viewer {
    Viewer {
        name: "olga".into(),
        role: Role::Operator,
    }
}

fn event(id: String) -> NewEvent {
    NewEvent {
        event_id: id,
        source: Source::Jobs,
        kind: "test".into(),
        parent_type: "run".into(),
        parent_id: "bulk".into(),
        payload: "{}".into(),
        redeliverable: true,
        max_attempts: 6,
        delay_ms: 0,
        destination: None,
        trace_parent: None,
        lane: None,
    }
}

/// The deliveries service over `store`, as `herald serve` wires it.
fn deliveries(store: &SqlStore) -> DeliveryService {
    DeliveryService::new(
        Arc::new(store.clone()),
        Arc::new(store.clone()),
        Arc::new(Registry::new()),
        6,
    )
}

async fn count(store: &SqlStore, status: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) AS n FROM outbox_events WHERE status = '{status}'");
    let row = sqlx::query(&sql).fetch_one(store.pool()).await.unwrap();
    herald::store::row::int(&row, "n").unwrap()
}

async fn a_bulk_retry_failing_part_way_leaves_every_committed_retry_audited(db: &TestDb) {
    let store = db.store().await;
    let events: Vec<NewEvent> = (0..EVENTS).map(|i| event(format!("bulk-{i:03}"))).collect();
    enqueue(&store, &events).await;
    store
        .pool()
        .execute("UPDATE outbox_events SET status = 'failed'")
        .await
        .unwrap();
    assert_eq!(count(&store, "failed").await, EVENTS as i64);
    // The retry of one event in the middle of the listing fails in the engine.
    StatusFault {
        name: "bulk_retry_fault",
        from: Some("failed"),
        to: "pending",
        event_id: Some("bulk-125"),
    }
    .install(&store)
    .await;

    let service = deliveries(&store);
    let query = DeliveryQuery {
        status: Some("failed".into()),
        ..Default::default()
    };
    let answer = service.bulk_retry(Some(&operator()), query, false).await;
    assert!(answer.is_err(), "the fault reached the caller: {answer:?}");

    let retried = count(&store, "pending").await;
    assert!(
        retried > 0 && retried < EVENTS as i64,
        "the fault struck part-way: {retried} of {EVENTS} retried"
    );
    let audited: i64 = store
        .audit(None, 100)
        .await
        .unwrap()
        .iter()
        .filter(|row| row.action == "bulk_retry")
        .map(|row| row.affected)
        .sum();
    assert_eq!(audited, retried, "every committed retry is audited");
}

async fn a_breaker_close_whose_audit_row_fails_closes_nothing(db: &TestDb) {
    let store = db.store().await;
    let destination = "http://127.0.0.1:9";
    store
        .open_breaker(destination, "callback", 5, 60_000)
        .await
        .unwrap();
    InsertFault {
        name: "audit_insert_fault",
        table: "outbox_audit",
    }
    .install(&store)
    .await;

    let answer = DestinationService::for_store(&store)
        .close(Some(&operator()), destination)
        .await;
    assert!(answer.is_err(), "the audit fault reached the caller");
    let breakers = store.breakers().await.unwrap();
    assert_eq!(breakers.len(), 1);
    assert_eq!(breakers[0].state, "open", "an unaudited close is no close");
}

async fn set_statuses(store: &SqlStore, first: &str, below: usize, rest: &str) {
    let sql = format!("UPDATE outbox_events SET status = '{rest}'");
    store.pool().execute(sql.as_str()).await.unwrap();
    let sql =
        format!("UPDATE outbox_events SET status = '{first}' WHERE event_id < 'bulk-{below:04}'");
    store.pool().execute(sql.as_str()).await.unwrap();
}

async fn the_bulk_preview_counts_what_the_retry_will_do_past_the_cap(db: &TestDb) {
    let store = db.store().await;
    let events: Vec<NewEvent> = (0..1_350).map(|i| event(format!("bulk-{i:04}"))).collect();
    enqueue(&store, &events).await;
    let service = deliveries(&store);
    let query = DeliveryQuery {
        status: Some("needs_attention".into()),
        ..Default::default()
    };

    // 150 failed beside 1,200 uncertain: without the acknowledgement, 150 retry
    // (both other counts are capped at 1,001, so their difference says 0).
    set_statuses(&store, "failed", 150, "uncertain").await;
    let preview = service
        .bulk_preview(Some(&operator()), query.clone())
        .await
        .unwrap();
    assert_eq!((preview.matching, preview.uncertain), (1_001, 1_001));
    assert!(preview.capped);
    assert_eq!(preview.without_uncertain, 150);

    // 1,200 failed beside 150 uncertain: a retry without them takes the cap.
    set_statuses(&store, "uncertain", 150, "failed").await;
    let preview = service
        .bulk_preview(Some(&operator()), query.clone())
        .await
        .unwrap();
    assert_eq!(preview.uncertain, 150);
    assert_eq!(preview.without_uncertain, 1_001);
    let expected = preview.without_uncertain.min(preview.cap);
    let outcome = service
        .bulk_retry(Some(&operator()), query, false)
        .await
        .unwrap();
    assert_eq!(
        outcome.retried, expected,
        "the preview said what the retry did"
    );
    assert_eq!(count(&store, "pending").await, i64::from(expected));
    assert!(outcome.capped, "more matched than one bulk retry takes");
    assert_eq!(outcome.retried, 1_000);
}
