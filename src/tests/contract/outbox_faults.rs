//! Claims and sweeps under database faults, on SQLite, PostgreSQL and MariaDB: a
//! fault is injected with a real trigger, so the statement really fails inside the
//! engine.

use std::time::Duration;

use herald::outbox::model::{NewEvent, Source};
use herald::store::ports::Transactions;
use herald::store::ports::{ClaimRequest, Claimed, OutboxStore, SweepReport};
use herald::store::SqlStore;
use testkit::faults::StatusFault;
use testkit::TestDb;
use vocab::DeliveryStatus;

testkit::contract_tests!(
    a_failed_due_claim_still_hands_out_the_reclaimed_events,
    a_failed_claim_statement_leaves_every_event_pending,
    a_sweep_stopped_by_an_error_still_reports_what_it_committed,
);

fn event(id: &str) -> NewEvent {
    NewEvent {
        event_id: id.to_string(),
        source: Source::Jobs,
        kind: "test".into(),
        parent_type: "run".into(),
        parent_id: "run-faults".into(),
        payload: "{}".into(),
        redeliverable: true,
        max_attempts: 6,
        delay_ms: 0,
        destination: None,
        trace_parent: None,
        lane: None,
    }
}

fn claim_request(lease_ms: i64) -> ClaimRequest {
    ClaimRequest {
        lease_token: uuid::Uuid::new_v4().simple().to_string(),
        holder: "fault-test".into(),
        limit: 10,
        kinds: vec!["test".into()],
        lease_ms_by_kind: vec![("test".into(), lease_ms)],
        default_lease_ms: lease_ms,
        due_within_ms: None,
        readmitted: Vec::new(),
        metered: Vec::new(),
        take_expired: true,
    }
}

/// Makes every `pending → processing` update fail inside the database.
async fn fail_claims_of_pending_events(store: &SqlStore) {
    StatusFault {
        name: "refuse_pending_claims",
        from: Some("pending"),
        to: "processing",
        event_id: None,
    }
    .install(store)
    .await;
}

async fn status(store: &SqlStore, id: &str) -> DeliveryStatus {
    store.get_event(id).await.unwrap().expect("event").status
}

async fn a_failed_due_claim_still_hands_out_the_reclaimed_events(db: &TestDb) {
    let store = db.store().await;
    let mut tx = store.begin_write().await.unwrap();
    store.enqueue_in(&mut tx, &event("expired")).await.unwrap();
    tx.commit().await.unwrap();
    // A worker claims it and dies: its lease expires.
    assert_eq!(store.claim(&claim_request(200)).await.unwrap().len(), 1);
    let mut tx = store.begin_write().await.unwrap();
    store.enqueue_in(&mut tx, &event("due")).await.unwrap();
    tx.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;

    // The reclaim commits; then claiming the due event fails in the database.
    fail_claims_of_pending_events(&store).await;
    let Claimed {
        events: claimed,
        cut_short,
    } = store
        .claim_avoiding(&claim_request(30_000), &[])
        .await
        .expect("the reclaimed event is handed out despite the second failure");
    let ids: Vec<&str> = claimed.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["expired"]);
    assert!(
        cut_short,
        "one event of ten is no proof that nothing else is due: the claim says it was cut short"
    );
    assert_eq!(claimed[0].attempts, 2);
    assert_eq!(status(&store, "due").await, DeliveryStatus::Pending);
    store.close().await;
}

async fn a_failed_claim_statement_leaves_every_event_pending(db: &TestDb) {
    let store = db.store().await;
    let mut tx = store.begin_write().await.unwrap();
    for id in ["a", "b", "c"] {
        store.enqueue_in(&mut tx, &event(id)).await.unwrap();
    }
    tx.commit().await.unwrap();
    fail_claims_of_pending_events(&store).await;
    assert!(store.claim(&claim_request(30_000)).await.is_err());
    for id in ["a", "b", "c"] {
        let e = store.get_event(id).await.unwrap().unwrap();
        assert_eq!(e.status, DeliveryStatus::Pending, "{id}");
        assert_eq!(e.attempts, 0, "{id}: no attempt spent");
    }
    store.close().await;
}

/// Event `a` was committed `uncertain` when the sweep's update of `b` failed: the
/// caller still learns of `a`, so its warning and metric are not lost (issue 19).
async fn a_sweep_stopped_by_an_error_still_reports_what_it_committed(db: &TestDb) {
    let store = db.store().await;
    // Two in-flight deliveries that must not be resent; `a`'s lease expires first.
    for (id, lease_ms) in [("sweep-a", 200), ("sweep-b", 400)] {
        let event = NewEvent {
            redeliverable: false,
            ..event(id)
        };
        let mut tx = store.begin_write().await.unwrap();
        store.enqueue_in(&mut tx, &event).await.unwrap();
        tx.commit().await.unwrap();
        let claimed = store
            .claim(&ClaimRequest {
                limit: 1,
                ..claim_request(lease_ms)
            })
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].event_id, id);
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    StatusFault {
        name: "refuse_sweeping_b",
        from: Some("processing"),
        to: "uncertain",
        event_id: Some("sweep-b"),
    }
    .install(&store)
    .await;

    let mut report = SweepReport::default();
    let swept = store.sweep_expired(100, None, &mut report).await;
    assert!(swept.is_err(), "the fault stopped the sweep");
    assert_eq!(status(&store, "sweep-a").await, DeliveryStatus::Uncertain);
    assert_eq!(status(&store, "sweep-b").await, DeliveryStatus::Processing);
    assert_eq!(
        report.uncertain,
        vec![("sweep-a".to_string(), "test".to_string())],
        "what was committed before the error is reported"
    );
}
