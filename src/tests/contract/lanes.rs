//! Ordered lanes (issue 22, docs/ORDERING.md): events of one lane are claimed one
//! at a time, in the order they were enqueued; a lane's head that is retrying or
//! failed holds the rest; other lanes and unordered events flow beside it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use herald::outbox::model::{ClaimedEvent, NewEvent, Settle};
use herald::outbox::model::{RetryRefusal, LANE_PARKED_AT};
use herald::store::ports::{DeliveryReads, ManualSkip, OutboxStore};
use herald::store::SqlStore;
use testkit::{claim, claim_request, enqueue, settlement, test_event, TestDb};
use vocab::DeliveryStatus;

use super::outbox::settle_retrying;

testkit::contract_tests!(
    a_lane_goes_one_event_at_a_time_in_its_order,
    a_replayed_enqueue_keeps_its_place_and_a_done_event_does_not_rejoin,
    racing_claimers_never_hold_two_events_of_one_lane,
    a_skipped_head_lets_its_lane_go_on_with_its_reason_audited,
);

fn laned(id: &str, lane: &str) -> NewEvent {
    NewEvent {
        lane: Some(lane.to_string()),
        ..test_event(id)
    }
}

async fn claim_ids(store: &SqlStore) -> Vec<ClaimedEvent> {
    let mut claimed = claim(store, &claim_request(20, 30_000)).await;
    claimed.sort_by(|a, b| a.event_id.cmp(&b.event_id));
    claimed
}

fn ids(claimed: &[ClaimedEvent]) -> Vec<&str> {
    claimed.iter().map(|c| c.event_id.as_str()).collect()
}

async fn settle(store: &SqlStore, event: &ClaimedEvent, settle: Settle) {
    let accepted = settle_retrying(store, &[settlement(event, settle)]).await;
    assert_eq!(accepted, vec![true], "{} settled", event.event_id);
}

async fn a_lane_goes_one_event_at_a_time_in_its_order(db: &TestDb) {
    let store = db.store().await;
    // Two producer transactions on lane A, one on lane B, one unordered event.
    enqueue(&store, &[laned("a1", "A"), laned("a2", "A")]).await;
    enqueue(
        &store,
        &[laned("a3", "A"), laned("b1", "B"), test_event("u1")],
    )
    .await;

    for (id, behind) in [
        ("a1", false),
        ("a2", true),
        ("a3", true),
        ("b1", false),
        ("u1", false),
    ] {
        let event = store.get_event(id).await.unwrap().unwrap();
        assert_eq!(
            event.next_attempt_at == LANE_PARKED_AT,
            behind,
            "{id} parked"
        );
    }
    let first = claim_ids(&store).await;
    assert_eq!(
        ids(&first),
        ["a1", "b1", "u1"],
        "each lane's head, and the unordered"
    );
    assert_eq!(first[0].lane.as_deref(), Some("A"));
    assert_eq!(first[2].lane, None);
    assert!(
        claim_ids(&store).await.is_empty(),
        "a2 waits behind a1 in flight"
    );

    // A head put back to retry still holds its lane: it is claimed again, not a2.
    settle(&store, &first[0], Settle::Retry { delay_ms: 0 }).await;
    let again = claim_ids(&store).await;
    assert_eq!(ids(&again), ["a1"]);
    settle(&store, &again[0], Settle::Completed).await;
    settle(&store, &first[1], Settle::Completed).await;
    settle(&store, &first[2], Settle::Completed).await;

    // a1 done: a2 is the head, due now (it was parked behind a1, so no claim
    // scanned it); a3 is still parked.
    let parked = |id: &'static str| {
        let store = store.clone();
        async move { store.get_event(id).await.unwrap().unwrap().next_attempt_at == LANE_PARKED_AT }
    };
    assert!(!parked("a2").await, "a2 heads lane A now: due");
    assert!(parked("a3").await, "a3 waits behind a2");
    let next = claim_ids(&store).await;
    assert_eq!(ids(&next), ["a2"]);
    settle(&store, &next[0], Settle::Failed { exhausted: true }).await;
    assert!(
        claim_ids(&store).await.is_empty(),
        "a failed head blocks its lane until an operator acts"
    );
    // Counted as a blocked lane, by its head's source and kind, for the metrics.
    let stats = store.stats(false).await.unwrap();
    assert_eq!(stats.blocked_lanes.len(), 1, "{:?}", stats.blocked_lanes);
    let blocked = &stats.blocked_lanes[0];
    assert_eq!(
        (
            blocked.source.as_str(),
            blocked.kind.as_str(),
            blocked.lanes
        ),
        ("jobs", "test", 1)
    );
    assert!(blocked
        .oldest_blocked_at
        .is_some_and(|at| at <= stats.now_ms));
    let metrics = herald::outbox::metrics::Metrics::new();
    metrics.refresh("jobs", &stats, stats.now_ms);
    let text = metrics.render();
    assert!(
        text.contains("herald_blocked_lanes{kind=\"test\",source=\"jobs\"} 1"),
        "{text}"
    );

    // Other lanes flow beside the blocked one.
    enqueue(&store, &[laned("c1", "C"), test_event("u2")]).await;
    assert_eq!(ids(&claim_ids(&store).await), ["c1", "u2"]);
}

async fn a_replayed_enqueue_keeps_its_place_and_a_done_event_does_not_rejoin(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[laned("r1", "R"), laned("r2", "R")]).await;
    // The producer's unit replayed (insert-if-absent): r1 keeps its place.
    enqueue(&store, &[laned("r1", "R")]).await;
    let head = claim_ids(&store).await;
    assert_eq!(ids(&head), ["r1"]);
    settle(&store, &head[0], Settle::Completed).await;

    // Replayed again after r1 was delivered: r1 does not rejoin, r2 goes.
    enqueue(&store, &[laned("r1", "R")]).await;
    let next = claim_ids(&store).await;
    assert_eq!(ids(&next), ["r2"]);
    // A skipped head lets its lane go too.
    enqueue(&store, &[laned("r3", "R")]).await;
    settle(&store, &next[0], Settle::Skipped).await;
    assert_eq!(ids(&claim_ids(&store).await), ["r3"]);
}

/// Four workers claim and complete 3 lanes of 12 events and 12 unordered ones:
/// no two events of a lane are ever held at once, and each lane completes in
/// its order.
async fn racing_claimers_never_hold_two_events_of_one_lane(db: &TestDb) {
    const LANES: usize = 3;
    const EACH: usize = 12;
    let store = db.store().await;
    for i in 0..EACH {
        // One producer transaction per step, as transitions commit one by one.
        let mut events: Vec<NewEvent> = (0..LANES)
            .map(|l| laned(&format!("l{l}_{i:02}"), &format!("lane-{l}")))
            .collect();
        events.push(test_event(&format!("u_{i:02}")));
        enqueue(&store, &events).await;
    }
    let holding: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let completed: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (store, holding, completed) = (store.clone(), holding.clone(), completed.clone());
        workers.push(tokio::spawn(async move {
            let mut idle = 0;
            while idle < 20 {
                let claimed = claim(&store, &claim_request(4, 30_000)).await;
                if claimed.is_empty() {
                    idle += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
                idle = 0;
                for event in &claimed {
                    if let Some(lane) = &event.lane {
                        let earlier = holding
                            .lock()
                            .unwrap()
                            .insert(lane.clone(), event.event_id.clone());
                        assert_eq!(
                            earlier, None,
                            "{} claimed while {lane} was held",
                            event.event_id
                        );
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                for event in &claimed {
                    // Let go before the settlement commits: the lane's next event
                    // can only be claimed after it, so a claim seen now is a
                    // second one in flight.
                    if let Some(lane) = &event.lane {
                        holding.lock().unwrap().remove(lane);
                        completed
                            .lock()
                            .unwrap()
                            .push((lane.clone(), event.event_id.clone()));
                    }
                    settle(&store, event, Settle::Completed).await;
                }
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let completed = completed.lock().unwrap();
    for l in 0..LANES {
        let lane = format!("lane-{l}");
        let order: Vec<&str> = completed
            .iter()
            .filter(|(x, _)| *x == lane)
            .map(|(_, id)| id.as_str())
            .collect();
        let expected: Vec<String> = (0..EACH).map(|i| format!("l{l}_{i:02}")).collect();
        assert_eq!(order, expected, "{lane} completed in its order");
    }
}

fn skip_of(event: &str, status: DeliveryStatus, cycle: Option<i64>) -> ManualSkip {
    ManualSkip {
        event_id: event.to_string(),
        kind: "test".into(),
        expected_status: status,
        expected_cycle: cycle,
        allow_uncertain: false,
        actor: "operator-1".into(),
        reason: "the receiver retired this endpoint".into(),
    }
}

/// An operator's skip of a blocked head (docs/ORDERING.md §6): listed first with
/// what waits behind it; refused (changing nothing) when the state or cycle seen
/// is stale, when the state is not failed or uncertain, or for an uncertain head
/// without the acknowledgement; once done, the lane's next event goes, and the
/// audit row with the reason is there.
async fn a_skipped_head_lets_its_lane_go_on_with_its_reason_audited(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[laned("s1", "S"), laned("u1", "U")]).await;
    enqueue(&store, &[laned("s2", "S"), laned("s3", "S")]).await;
    let heads = claim_ids(&store).await;
    assert_eq!(ids(&heads), ["s1", "u1"]);
    settle(&store, &heads[0], Settle::Failed { exhausted: true }).await;
    settle(&store, &heads[1], Settle::Uncertain).await;

    let (blocked, open) = store.blocked_lanes(50).await.unwrap();
    assert_eq!(open, 2, "two lanes hold open members");
    let mut listed: Vec<(&str, &str, i64)> = blocked
        .iter()
        .map(|b| (b.lane.as_str(), b.head.event_id.as_str(), b.waiting))
        .collect();
    listed.sort();
    assert_eq!(listed, [("S", "s1", 2), ("U", "u1", 0)]);

    // Refusals change nothing.
    let cycle = Some(heads[0].cycle);
    let refused = |outcome: Result<(), RetryRefusal>| outcome.expect_err("refused");
    assert!(matches!(
        refused(
            store
                .skip_event(&skip_of("s1", DeliveryStatus::Failed, Some(7)))
                .await
                .unwrap()
        ),
        RetryRefusal::CycleChanged { .. }
    ));
    assert_eq!(
        refused(
            store
                .skip_event(&skip_of("s1", DeliveryStatus::Pending, cycle))
                .await
                .unwrap()
        ),
        RetryRefusal::NotSkippable("pending".into())
    );
    assert_eq!(
        refused(
            store
                .skip_event(&skip_of("u1", DeliveryStatus::Uncertain, None))
                .await
                .unwrap()
        ),
        RetryRefusal::SkipNeedsAcknowledgement
    );
    assert!(matches!(
        refused(
            store
                .skip_event(&skip_of("nope", DeliveryStatus::Failed, None))
                .await
                .unwrap()
        ),
        RetryRefusal::NotFound(_)
    ));
    assert!(claim_ids(&store).await.is_empty(), "both lanes still held");
    assert!(
        store.audit(None, 10).await.unwrap().is_empty(),
        "no refusal audited"
    );

    // The skip: s2 heads lane S now, s3 still waits behind it.
    store
        .skip_event(&skip_of("s1", DeliveryStatus::Failed, cycle))
        .await
        .unwrap()
        .expect("skipped");
    let skipped = store.get_event("s1").await.unwrap().unwrap();
    assert_eq!(skipped.status, DeliveryStatus::Skipped);
    assert!(
        skipped
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("operator-1") && e.contains("retired this endpoint")),
        "{:?}",
        skipped.last_error
    );
    let audit = store.audit(None, 10).await.unwrap();
    assert_eq!(audit.len(), 1, "one audit row: {audit:?}");
    assert_eq!(
        (
            audit[0].event_id.as_str(),
            audit[0].action.as_str(),
            audit[0].actor.as_str(),
            audit[0].from_status.as_str(),
            audit[0].reason.as_deref()
        ),
        (
            "s1",
            "skip",
            "operator-1",
            "failed",
            Some("the receiver retired this endpoint")
        )
    );
    assert_eq!(ids(&claim_ids(&store).await), ["s2"]);
    // A second skip from the same view finds it changed.
    assert!(matches!(
        refused(
            store
                .skip_event(&skip_of("s1", DeliveryStatus::Failed, cycle))
                .await
                .unwrap()
        ),
        RetryRefusal::StatusChanged { .. }
    ));

    // The uncertain head, acknowledged: no lane is blocked any more.
    store
        .skip_event(&ManualSkip {
            allow_uncertain: true,
            ..skip_of("u1", DeliveryStatus::Uncertain, None)
        })
        .await
        .unwrap()
        .expect("skipped");
    let (blocked, open) = store.blocked_lanes(50).await.unwrap();
    assert!(blocked.is_empty(), "{blocked:?}");
    assert_eq!(open, 1, "lane S holds s2 (in flight) and s3");
    assert!(store.stats(false).await.unwrap().blocked_lanes.is_empty());
}
