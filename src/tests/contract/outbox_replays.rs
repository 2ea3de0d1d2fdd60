//! Lost settle acknowledgements, on SQLite, PostgreSQL and MariaDB: a settlement
//! that committed but whose acknowledgement was lost is replayed by the worker; the
//! store must recognise it as already applied, so the operator alert still fires
//! and nothing is written twice.

use herald::outbox::model::{NewEvent, Settle, Settlement, Source};
use herald::store::ports::Transactions;
use herald::store::ports::{ClaimRequest, OutboxStore};
use testkit::TestDb;

testkit::contract_tests!(
    a_replayed_failure_is_accepted_and_dead_lettered_once,
    a_replayed_uncertain_or_skip_is_accepted,
);

fn event(id: &str, redeliverable: bool) -> NewEvent {
    NewEvent {
        event_id: id.to_string(),
        source: Source::Jobs,
        kind: "test".into(),
        parent_type: "run".into(),
        parent_id: "run-replay".into(),
        payload: "{}".into(),
        redeliverable,
        max_attempts: 6,
        delay_ms: 0,
        destination: None,
        trace_parent: None,
        lane: None,
    }
}

async fn claim_one(store: &herald::store::SqlStore, e: NewEvent) -> Settlement {
    let mut tx = store.begin_write().await.unwrap();
    store.enqueue_in(&mut tx, &e).await.unwrap();
    tx.commit().await.unwrap();
    let claimed = store
        .claim(&ClaimRequest {
            lease_token: uuid::Uuid::new_v4().simple().to_string(),
            holder: "replay-test".into(),
            limit: 1,
            kinds: vec!["test".into()],
            lease_ms_by_kind: vec![("test".into(), 30_000)],
            default_lease_ms: 30_000,
            due_within_ms: None,
            readmitted: Vec::new(),
            metered: Vec::new(),
            take_expired: true,
        })
        .await
        .unwrap();
    let c = &claimed[0];
    Settlement {
        event_id: c.event_id.clone(),
        kind: c.kind.clone(),
        lease_token: c.lease_token.clone(),
        attempt: c.attempts,
        cycle: c.cycle,
        worker: "replay-test".into(),
        started_at_ms: 0,
        finished_at_ms: 1,
        settle: Settle::Failed { exhausted: false },
        status_code: Some(400),
        error: Some("HTTP 400".into()),
        dead_letter_event: None,
        laned: false,
    }
}

async fn a_replayed_failure_is_accepted_and_dead_lettered_once(db: &TestDb) {
    let store = db.store().await;
    let failed = claim_one(&store, event("fails", true)).await;
    assert_eq!(
        store.settle(std::slice::from_ref(&failed)).await.unwrap(),
        vec![true]
    );
    // The commit landed; the worker never heard and replays the same settlement.
    assert_eq!(
        store.settle(&[failed]).await.unwrap(),
        vec![true],
        "an applied failure is recognised, so its OPERATOR_ALERT still fires"
    );
    assert_eq!(store.dead_letter_count("fails").await.unwrap(), 1);
    let attempts = store.attempts("fails").await.unwrap();
    assert_eq!(attempts.len(), 1, "the attempt is logged once");
    store.close().await;
}

async fn a_replayed_uncertain_or_skip_is_accepted(db: &TestDb) {
    let store = db.store().await;
    let mut uncertain = claim_one(&store, event("unsure", false)).await;
    uncertain.settle = Settle::Uncertain;
    assert_eq!(
        store
            .settle(std::slice::from_ref(&uncertain))
            .await
            .unwrap(),
        vec![true]
    );
    assert_eq!(store.settle(&[uncertain]).await.unwrap(), vec![true]);
    let mut skipped = claim_one(&store, event("nothing", true)).await;
    skipped.settle = Settle::Skipped;
    assert_eq!(
        store.settle(std::slice::from_ref(&skipped)).await.unwrap(),
        vec![true]
    );
    assert_eq!(
        store.settle(std::slice::from_ref(&skipped)).await.unwrap(),
        vec![true]
    );
    // A different lease's replay is still refused.
    skipped.lease_token = "someone-else".into();
    assert_eq!(store.settle(&[skipped]).await.unwrap(), vec![false]);
    store.close().await;
}
