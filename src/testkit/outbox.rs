//! Outbox events for tests: enqueued, claimed and settled straight on the store.

use std::collections::HashMap;
use std::time::Duration;

use herald::outbox::model::NewEvent;
use herald::outbox::model::{ClaimedEvent, Settle, Settlement};
use herald::store::ports::Transactions;
use herald::store::ports::{ClaimRequest, OutboxStore};
use herald::store::SqlStore;
use vocab::DeliveryStatus;

/// An event of the `test` kind (no handler claims it unless a test does), filed
/// under the run `run-1`, with a small payload.
pub fn test_event(id: &str) -> NewEvent {
    NewEvent {
        event_id: id.to_string(),
        source: herald::outbox::model::Source::Jobs,
        kind: "test".into(),
        parent_type: "run".into(),
        parent_id: "run-1".into(),
        payload: "{\"n\":1}".into(),
        redeliverable: true,
        max_attempts: 6,
        delay_ms: 0,
        destination: None,
        trace_parent: None,
        lane: None,
    }
}

/// `event`, filed under the run `parent_id` (so a test reads back only its own).
pub fn parented(mut event: NewEvent, parent_id: &str) -> NewEvent {
    event.parent_type = "run".into();
    event.parent_id = parent_id.into();
    event
}

/// The status of every event of the run `parent_id`, by event id.
pub async fn statuses(store: &SqlStore, parent_id: &str) -> HashMap<String, DeliveryStatus> {
    store
        .events_for_parent("run", parent_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.event_id, e.status))
        .collect()
}

/// Whether every event of the run `parent_id` is completed.
pub async fn all_completed(store: &SqlStore, parent_id: &str) -> bool {
    statuses(store, parent_id)
        .await
        .values()
        .all(|s| *s == DeliveryStatus::Completed)
}

/// Enqueues `events` in one producer transaction.
pub async fn enqueue(store: &SqlStore, events: &[NewEvent]) {
    let mut tx = store.begin_write().await.unwrap();
    store.enqueue_all_in(&mut tx, events).await.unwrap();
    tx.commit().await.unwrap();
}

/// Claims with retries: MySQL/Galera may answer a claim race with a deadlock error.
pub async fn claim(store: &SqlStore, request: &ClaimRequest) -> Vec<ClaimedEvent> {
    for _ in 0..20 {
        match store.claim(request).await {
            Ok(events) => return events,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("claim kept failing");
}

/// A claim of the `test` kind, `limit` events, leased for `lease_ms`.
pub fn claim_request(limit: u32, lease_ms: i64) -> ClaimRequest {
    ClaimRequest {
        lease_token: uuid::Uuid::new_v4().simple().to_string(),
        holder: "test-worker".into(),
        limit,
        kinds: vec!["test".into()],
        lease_ms_by_kind: vec![("test".into(), lease_ms)],
        default_lease_ms: lease_ms,
        due_within_ms: None,
        readmitted: Vec::new(),
        metered: Vec::new(),
        take_expired: true,
    }
}

/// The worker's settlement of a claimed event (the `test` kind's worker).
pub fn settlement(event: &ClaimedEvent, settle: Settle) -> Settlement {
    Settlement {
        event_id: event.event_id.clone(),
        kind: event.kind.clone(),
        lease_token: event.lease_token.clone(),
        attempt: event.attempts,
        cycle: event.cycle,
        worker: "test-worker".into(),
        started_at_ms: 0,
        finished_at_ms: 1,
        settle,
        status_code: Some(200),
        error: Some("boom".into()),
        dead_letter_event: None,
        laned: event.lane.is_some(),
    }
}

/// One sweep of expired leases (up to 100), as maintenance runs it; panics on a
/// store error.
pub async fn sweep(
    store: &SqlStore,
    dead_letter: Option<&herald::outbox::model::DeadLetterNotifier>,
) -> herald::store::ports::SweepReport {
    let mut report = herald::store::ports::SweepReport::default();
    store
        .sweep_expired(100, dead_letter, &mut report)
        .await
        .expect("sweep");
    report
}
