//! The console's read queries (DESIGN §3, seed 003 "delivery summaries"), run on
//! SQLite, PostgreSQL and MariaDB: delivery counts of a page of runs in one grouped
//! query, the outbox listing's filters and keyset paging, attempt logs of several
//! events, the audit trail, and the runs list's tenant / time / delivery filters.

use std::collections::HashMap;

use herald::outbox::model::{NewEvent, Settle, Source};
use herald::service::error_class::{cause_named, cause_prefixes};
use herald::store::ports::{
    CauseFilter, DeliveryReads, DestinationFilter, EventFilter, FailureGroup, IdKind, ManualRetry,
    NewRun, OutboxStore, RunFilter, RunRepository,
};
use herald::store::SqlStore;
use testkit::{claim, claim_request, enqueue, settlement, TestDb};
use vocab::DeliveryStatus;

use super::outbox::{event, settle_retrying};

testkit::contract_tests!(
    delivery_counts_of_a_page_of_runs_come_from_one_grouped_query,
    the_outbox_listing_filters_by_kind_state_source_and_parent,
    the_outbox_listing_pages_by_keyset_without_gaps_or_repeats,
    attempt_logs_of_several_events_are_read_together,
    the_audit_trail_records_actor_state_and_acknowledgement_newest_first,
    runs_filter_by_tenant_creation_time_and_delivery_state,
    bulk_counts_are_capped_and_audit_rows_carry_their_count,
    ids_are_found_whole_by_their_beginning_or_their_end,
    failures_group_by_kind_destination_and_cause_in_sql,
);

fn child(id: &str, kind: &str, parent_id: &str) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        parent_id: parent_id.into(),
        ..event(id)
    }
}

/// Enqueues `events` and settles each to the state paired with it.
async fn settle_to(store: &SqlStore, events: &[(NewEvent, Option<Settle>)]) {
    let all: Vec<NewEvent> = events.iter().map(|(e, _)| e.clone()).collect();
    enqueue(store, &all).await;
    let mut request = claim_request(100, 30_000);
    request.kinds = all.iter().map(|e| e.kind.clone()).collect();
    request.kinds.sort();
    request.kinds.dedup();
    request.lease_ms_by_kind = request.kinds.iter().map(|k| (k.clone(), 30_000)).collect();
    let claimed = claim(store, &request).await;
    let wanted: HashMap<&str, &Option<Settle>> = events
        .iter()
        .map(|(e, s)| (e.event_id.as_str(), s))
        .collect();
    let batch: Vec<_> = claimed
        .iter()
        .filter_map(|c| {
            wanted[c.event_id.as_str()]
                .clone()
                .map(|settle| settlement(c, settle))
        })
        .collect();
    assert!(settle_retrying(store, &batch).await.iter().all(|ok| *ok));
}

async fn delivery_counts_of_a_page_of_runs_come_from_one_grouped_query(db: &TestDb) {
    let store = db.store().await;
    settle_to(
        &store,
        &[
            (child("a1", "test", "run-a"), Some(Settle::Completed)),
            (child("a2", "test", "run-a"), Some(Settle::Completed)),
            (
                child("a3", "test", "run-a"),
                Some(Settle::Failed { exhausted: true }),
            ),
            (child("a4", "test", "run-a"), Some(Settle::Uncertain)),
            (child("b1", "test", "run-b"), Some(Settle::Skipped)),
            (child("b2", "test", "run-b"), None),
            (
                child("c1", "test", "run-c"),
                Some(Settle::Failed { exhausted: false }),
            ),
        ],
    )
    .await;
    let counts = store
        .status_counts("run", &["run-a".into(), "run-b".into(), "run-none".into()])
        .await
        .unwrap();
    let mut got: Vec<(String, DeliveryStatus, i64)> = counts;
    got.sort_by(|x, y| (x.0.as_str(), x.1.as_str()).cmp(&(y.0.as_str(), y.1.as_str())));
    assert_eq!(
        got,
        vec![
            ("run-a".into(), DeliveryStatus::Completed, 2),
            ("run-a".into(), DeliveryStatus::Failed, 1),
            ("run-a".into(), DeliveryStatus::Uncertain, 1),
            ("run-b".into(), DeliveryStatus::Processing, 1),
            ("run-b".into(), DeliveryStatus::Skipped, 1),
        ],
        "run-c is not on the page; run-none has no events"
    );
    assert!(store.status_counts("run", &[]).await.unwrap().is_empty());
    let mut summary = app::dto::DeliveryCounts::default();
    for (_, status, n) in got.iter().filter(|r| r.0 == "run-a") {
        summary.add(*status, *n);
    }
    assert_eq!(summary.worst, Some(DeliveryStatus::Uncertain));
    assert_eq!(
        (summary.completed, summary.failed, summary.uncertain),
        (2, 1, 1)
    );
    store.close().await;
}

async fn the_outbox_listing_filters_by_kind_state_source_and_parent(db: &TestDb) {
    let store = db.store().await;
    let approvals = NewEvent {
        source: Source::Approvals,
        parent_type: "approval".into(),
        ..child("p1", "prompt", "ap-1")
    };
    settle_to(
        &store,
        &[
            (
                child("x1", "test", "run-1"),
                Some(Settle::Failed { exhausted: true }),
            ),
            (child("x2", "test", "run-2"), Some(Settle::Uncertain)),
            (child("x3", "other", "run-1"), Some(Settle::Completed)),
            (approvals, Some(Settle::Failed { exhausted: true })),
        ],
    )
    .await;
    let ids = |events: Vec<herald::outbox::model::EventRecord>| {
        let mut ids: Vec<String> = events.into_iter().map(|e| e.event_id).collect();
        ids.sort();
        ids
    };
    let list = |filter: EventFilter| {
        let store = store.clone();
        async move {
            store
                .list_events(&EventFilter {
                    limit: 50,
                    ..filter
                })
                .await
                .unwrap()
        }
    };
    assert_eq!(
        ids(list(EventFilter::default()).await),
        ["p1", "x1", "x2", "x3"]
    );
    assert_eq!(
        ids(list(EventFilter {
            kind: Some("test".into()),
            ..Default::default()
        })
        .await),
        ["x1", "x2"]
    );
    assert_eq!(
        ids(list(EventFilter {
            statuses: vec![DeliveryStatus::Failed, DeliveryStatus::Uncertain],
            ..Default::default()
        })
        .await),
        ["p1", "x1", "x2"]
    );
    assert_eq!(
        ids(list(EventFilter {
            source: Some("approvals".into()),
            ..Default::default()
        })
        .await),
        ["p1"]
    );
    assert_eq!(
        ids(list(EventFilter {
            parent_type: Some("run".into()),
            parent_id: Some("run-1".into()),
            ..Default::default()
        })
        .await),
        ["x1", "x3"]
    );
    store.close().await;
}

async fn the_outbox_listing_pages_by_keyset_without_gaps_or_repeats(db: &TestDb) {
    let store = db.store().await;
    // Several events share a created_at (one transaction, one clock reading), so the
    // cursor must break ties by event id.
    let events: Vec<NewEvent> = (0..7).map(|i| event(&format!("k{i}"))).collect();
    enqueue(&store, &events).await;
    enqueue(&store, &[event("k7"), event("k8")]).await;
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .list_events(&EventFilter {
                before: before.clone(),
                limit: 2,
                ..Default::default()
            })
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        for pair in page.windows(2) {
            assert!(
                (pair[0].created_at, &pair[0].event_id) > (pair[1].created_at, &pair[1].event_id),
                "newest first"
            );
        }
        before = page.last().map(|e| (e.created_at, e.event_id.clone()));
        seen.extend(page.into_iter().map(|e| e.event_id));
    }
    seen.sort();
    let expected: Vec<String> = (0..9).map(|i| format!("k{i}")).collect();
    assert_eq!(seen, expected, "every event exactly once");
    store.close().await;
}

async fn attempt_logs_of_several_events_are_read_together(db: &TestDb) {
    let store = db.store().await;
    settle_to(
        &store,
        &[
            (event("t1"), Some(Settle::Retry { delay_ms: 0 })),
            (event("t2"), Some(Settle::Completed)),
            (event("t3"), None),
        ],
    )
    .await;
    // t1's second attempt.
    let request = claim_request(10, 30_000);
    let again = claim(&store, &request).await;
    let t1 = again
        .iter()
        .find(|c| c.event_id == "t1")
        .expect("t1 is due again");
    assert!(settle_retrying(&store, &[settlement(t1, Settle::Completed)]).await[0]);

    let logs = store
        .attempts_of(&["t1".into(), "t2".into(), "t3".into()])
        .await
        .unwrap();
    let summary: Vec<(String, i64, String)> = logs
        .into_iter()
        .map(|(id, a)| (id, a.attempt, a.outcome))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("t1".into(), 1, "retry".into()),
            ("t1".into(), 2, "completed".into()),
            ("t2".into(), 1, "completed".into()),
        ],
        "in event and attempt order; t3 has none"
    );
    assert!(store.attempts_of(&[]).await.unwrap().is_empty());
    store.close().await;
}

async fn the_audit_trail_records_actor_state_and_acknowledgement_newest_first(db: &TestDb) {
    let store = db.store().await;
    settle_to(
        &store,
        &[
            (event("f1"), Some(Settle::Failed { exhausted: true })),
            (event("u1"), Some(Settle::Uncertain)),
        ],
    )
    .await;
    let retry = |id: &str, status, ack, actor: &str| ManualRetry {
        event_id: id.into(),
        kind: "test".into(),
        expected_status: status,
        expected_cycle: None,
        allow_uncertain: ack,
        actor: actor.into(),
        max_attempts: 6,
        audit: true,
    };
    store
        .retry_event(&retry("f1", DeliveryStatus::Failed, false, "olga"))
        .await
        .unwrap()
        .unwrap();
    store
        .retry_event(&retry("u1", DeliveryStatus::Uncertain, true, "omar"))
        .await
        .unwrap()
        .unwrap();
    // A lost compare-and-set writes no audit row.
    assert!(store
        .retry_event(&retry("f1", DeliveryStatus::Failed, false, "late"))
        .await
        .unwrap()
        .is_err());
    let trail = store.audit(None, 10).await.unwrap();
    let rows: Vec<(&str, &str, &str, bool)> = trail
        .iter()
        .map(|r| {
            (
                r.event_id.as_str(),
                r.actor.as_str(),
                r.from_status.as_str(),
                r.acknowledged_duplicate_risk,
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("u1", "omar", "uncertain", true),
            ("f1", "olga", "failed", false)
        ]
    );
    let older = store.audit(Some(&trail[0].id), 10).await.unwrap();
    assert_eq!(older.len(), 1);
    assert_eq!(older[0].event_id, "f1");
    store.close().await;
}

async fn runs_filter_by_tenant_creation_time_and_delivery_state(db: &TestDb) {
    let store = db.store().await;
    let mut runs = Vec::new();
    for tenant in ["acme", "acme", "globex"] {
        runs.push(
            store
                .create_run(NewRun {
                    run_type: "etl".into(),
                    tenant: tenant.into(),
                    callback_url: None,
                    routes: Vec::new(),
                })
                .await
                .unwrap(),
        );
    }
    settle_to(
        &store,
        &[
            (
                child("r0", "test", &runs[0].id),
                Some(Settle::Failed { exhausted: true }),
            ),
            (child("r1", "test", &runs[1].id), Some(Settle::Completed)),
            (child("r2", "test", &runs[2].id), Some(Settle::Uncertain)),
        ],
    )
    .await;
    let list = |filter: RunFilter| {
        let store = store.clone();
        async move {
            let mut ids: Vec<String> = store
                .list_runs(&RunFilter {
                    limit: 50,
                    ..filter
                })
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .collect();
            ids.sort();
            ids
        }
    };
    let sorted = |mut ids: Vec<String>| {
        ids.sort();
        ids
    };
    assert_eq!(
        list(RunFilter {
            tenant: Some("acme".into()),
            ..Default::default()
        })
        .await,
        sorted(vec![runs[0].id.clone(), runs[1].id.clone()])
    );
    assert_eq!(
        list(RunFilter {
            delivery_states: vec![DeliveryStatus::Failed, DeliveryStatus::Uncertain],
            ..Default::default()
        })
        .await,
        sorted(vec![runs[0].id.clone(), runs[2].id.clone()])
    );
    assert_eq!(
        list(RunFilter {
            delivery_states: vec![DeliveryStatus::Completed],
            tenant: Some("acme".into()),
            ..Default::default()
        })
        .await,
        vec![runs[1].id.clone()]
    );
    let first = runs[0].created_at_ms;
    let last = runs[2].created_at_ms;
    assert_eq!(
        list(RunFilter {
            created_from_ms: Some(last + 1),
            ..Default::default()
        })
        .await,
        Vec::<String>::new()
    );
    assert_eq!(
        list(RunFilter {
            created_to_ms: Some(first),
            ..Default::default()
        })
        .await,
        Vec::<String>::new()
    );
    assert_eq!(
        list(RunFilter {
            created_from_ms: Some(first),
            created_to_ms: Some(last + 1),
            tenant: Some("globex".into()),
            ..Default::default()
        })
        .await,
        vec![runs[2].id.clone()]
    );
    // The type list comes from the run_types table the runs keep current.
    store
        .create_run(NewRun {
            run_type: "report".into(),
            tenant: "acme".into(),
            callback_url: None,
            routes: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(store.run_types().await.unwrap(), ["etl", "report"]);
    store.close().await;
}

async fn bulk_counts_are_capped_and_audit_rows_carry_their_count(db: &TestDb) {
    let store = db.store().await;
    let events: Vec<NewEvent> = (0..5).map(|i| event(&format!("c{i}"))).collect();
    enqueue(&store, &events).await;
    let all = EventFilter::default();
    assert_eq!(store.count_events(&all, 100).await.unwrap(), 5);
    assert_eq!(
        store.count_events(&all, 3).await.unwrap(),
        3,
        "counting stops at the cap"
    );
    let none = EventFilter {
        statuses: vec![DeliveryStatus::Failed],
        ..Default::default()
    };
    assert_eq!(store.count_events(&none, 100).await.unwrap(), 0);
    store
        .record_audit(&herald::store::ports::NewAuditEntry {
            subject: "bulk: status=failed".into(),
            action: "bulk_retry".into(),
            actor: "olga".into(),
            from_status: "failed".into(),
            acknowledged_duplicate_risk: false,
            affected: 42,
            reason: None,
        })
        .await
        .unwrap();
    let trail = store.audit(None, 10).await.unwrap();
    assert_eq!(trail.len(), 1);
    assert_eq!(trail[0].affected, 42);
    assert_eq!(trail[0].action, "bulk_retry");
    assert_eq!(trail[0].event_id, "bulk: status=failed");
    store.close().await;
}

/// The console's find by id: a whole id through its key (alone: the tables are
/// not read through for it), a part of one by its beginning or end (through
/// the indexes of migration 0017: an end longer than what they index holds in
/// full; an event's by its beginning only); `_` and `%` in the text are
/// characters, not wildcards, and its case holds on every engine.
async fn ids_are_found_whole_by_their_beginning_or_their_end(db: &TestDb) {
    let store = db.store().await;
    let run = store
        .create_run(NewRun {
            run_type: "etl".into(),
            tenant: "acme".into(),
            callback_url: None,
            routes: Vec::new(),
        })
        .await
        .unwrap();
    enqueue(
        &store,
        &[
            child("find_me_0001", "test", &run.id),
            child("find_me_0001_again", "test", &run.id),
            child("findXme_0002", "test", &run.id),
            child("event_ends_ab12cd34", "test", &run.id),
        ],
    )
    .await;
    let found = |needle: &str| {
        let needle = needle.to_string();
        let store = store.clone();
        async move {
            let mut found: Vec<(IdKind, String, bool)> = store
                .find_ids(&needle, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|m| (m.kind, m.id, m.exact))
                .collect();
            found.sort();
            found
        }
    };
    let whole = store.find_ids(&run.id, 10).await.unwrap();
    assert_eq!(whole.len(), 1, "{whole:?}");
    assert!(whole[0].exact && whole[0].kind == IdKind::Run);
    assert_eq!(
        (whole[0].owner_type.as_str(), whole[0].owner_id.as_str()),
        ("run", "etl")
    );
    let end = &run.id[run.id.len() - 12..];
    assert_eq!(found(end).await, vec![(IdKind::Run, run.id.clone(), false)]);
    let upper = end.to_uppercase();
    if upper != end {
        assert_eq!(found(&upper).await, vec![], "the text's case holds");
    }
    assert_eq!(
        found("find_me_").await,
        vec![
            (IdKind::Event, "find_me_0001".to_string(), false),
            (IdKind::Event, "find_me_0001_again".to_string(), false)
        ],
        "`_` is a character"
    );
    let event = store.find_ids("find_me_0001", 10).await.unwrap();
    assert_eq!(
        event.len(),
        1,
        "a whole id answers alone (no scan): {event:?}"
    );
    assert_eq!(
        (
            event[0].owner_type.as_str(),
            event[0].owner_id.as_str(),
            event[0].exact
        ),
        ("run", run.id.as_str(), true)
    );
    // Runs with ids of the test's choosing (producers' ids are the store's).
    for id in [
        "tail_one_12345678",
        "tail_two_12345678",
        "ends-ab12cd34-ends-ab12cd34",
    ] {
        let sql = "INSERT INTO runs (id, run_type, tenant, status, routes, transition_seq, \
                   created_at, updated_at) VALUES (?, 'etl', 'acme', 'running', '[]', 1, 1, 1)";
        sqlx::query(&store.engine().sql(sql))
            .bind(id)
            .execute(store.pool())
            .await
            .unwrap();
    }
    // The stores index an id's last 8 characters: a longer end holds in full.
    let run_of = |id: &str| (IdKind::Run, id.to_string(), false);
    assert_eq!(
        found("one_12345678").await,
        vec![run_of("tail_one_12345678")]
    );
    assert_eq!(found("_12345678").await.len(), 2);
    // Beginning and ending with the text: listed once.
    assert_eq!(
        found("ends-ab12cd34").await,
        vec![run_of("ends-ab12cd34-ends-ab12cd34")]
    );
    assert_eq!(
        found("ENDS-AB12CD34").await,
        vec![],
        "the text's case holds"
    );
    // An event id ends with its route or transition: only its beginning names it.
    assert_eq!(found("ends_ab12cd34").await, vec![]);
    assert_eq!(
        found("event_ends").await,
        vec![(IdKind::Event, "event_ends_ab12cd34".to_string(), false)]
    );
    assert_eq!(found("%me_0001").await, vec![]);
    assert_eq!(found("nothing-has-this-id").await, vec![]);
    store.close().await;
}

/// Failures grouped by cause (issue 23, item 3): failed and uncertain events
/// counted per kind, source, destination and the class of their last error, in
/// SQL, whatever the error's case; a listing and a count narrowed to one group
/// hold exactly its events.
async fn failures_group_by_kind_destination_and_cause_in_sql(db: &TestDb) {
    let store = db.store().await;
    let a = "https://a.example.com";
    let b = "https://b.example.com";
    let to = |id: &str, kind: &str, destination: Option<&str>| NewEvent {
        kind: kind.into(),
        destination: destination.map(str::to_string),
        ..event(id)
    };
    let failed = Settle::Failed { exhausted: true };
    // (event, how it settles, its error)
    let events = [
        (
            to("f1", "callback", Some(a)),
            failed.clone(),
            Some("receiver answered 400 Bad Request"),
        ),
        (
            to("f2", "callback", Some(a)),
            failed.clone(),
            Some("receiver answered 410 Gone"),
        ),
        (
            to("f3", "callback", Some(a)),
            failed.clone(),
            Some("Receiver Answered 500"),
        ),
        (
            to("f4", "callback", Some(a)),
            failed.clone(),
            Some("timed out after 10 s"),
        ),
        (
            to("f5", "callback", Some(b)),
            Settle::Uncertain,
            Some("receiver answered 503"),
        ),
        (
            to("f6", "callback", Some(a)),
            failed.clone(),
            Some("thread panicked: x_y%z"),
        ),
        (to("f7", "field_update", None), failed.clone(), None),
        (to("f8", "callback", Some(a)), Settle::Completed, None),
        // Two prefixes of one class: one group.
        (
            to("f9", "callback", Some(b)),
            failed.clone(),
            Some("invalid destination URL: x"),
        ),
        (
            to("f10", "callback", Some(b)),
            failed.clone(),
            Some("destination URL has no host"),
        ),
    ];
    let all: Vec<NewEvent> = events.iter().map(|(e, _, _)| e.clone()).collect();
    enqueue(&store, &all).await;
    let mut request = claim_request(100, 30_000);
    request.kinds = vec!["callback".into(), "field_update".into()];
    request.lease_ms_by_kind = request.kinds.iter().map(|k| (k.clone(), 30_000)).collect();
    let claimed = claim(&store, &request).await;
    assert_eq!(
        claimed.len(),
        events.len(),
        "the precondition: every event claimed"
    );
    let batch: Vec<_> = claimed
        .iter()
        .map(|c| {
            let (_, settle, error) = events
                .iter()
                .find(|(e, _, _)| e.event_id == c.event_id)
                .unwrap();
            herald::outbox::model::Settlement {
                error: error.map(str::to_string),
                ..settlement(c, settle.clone())
            }
        })
        .collect();
    assert!(settle_retrying(&store, &batch).await.iter().all(|ok| *ok));

    let prefixes = cause_prefixes();
    let cause = |text: &str| {
        prefixes
            .iter()
            .find(|(p, _)| text.starts_with(p))
            .unwrap()
            .1
    };
    let receiver = cause("receiver answered");
    let mut groups: Vec<(String, Option<String>, i64, i64)> = store
        .failure_groups(&prefixes, 50)
        .await
        .unwrap()
        .into_iter()
        .map(|g: FailureGroup| (g.kind, g.destination, g.cause, g.count))
        .collect();
    groups.sort();
    let mut expected = vec![
        ("callback".to_string(), Some(a.to_string()), receiver, 3),
        (
            "callback".to_string(),
            Some(a.to_string()),
            cause("timed out"),
            1,
        ),
        ("callback".to_string(), Some(a.to_string()), -1, 1),
        ("callback".to_string(), Some(b.to_string()), receiver, 1),
        (
            "callback".to_string(),
            Some(b.to_string()),
            cause("invalid destination url"),
            2,
        ),
        ("field_update".to_string(), None, -2, 1),
    ];
    expected.sort();
    assert_eq!(groups, expected);
    let largest = store.failure_groups(&prefixes, 1).await.unwrap();
    assert_eq!(
        (largest.len(), largest[0].count),
        (1, 3),
        "largest first, limited"
    );

    // One group, listed and counted: exactly its events.
    let group = EventFilter {
        statuses: vec![DeliveryStatus::Failed, DeliveryStatus::Uncertain],
        kind: Some("callback".into()),
        destination: Some(DestinationFilter::Origin(a.into())),
        cause: Some(CauseFilter {
            rules: prefixes.clone(),
            cause: cause_named("the receiver answered with an error status").unwrap(),
        }),
        limit: 10,
        ..Default::default()
    };
    let mut listed: Vec<String> = store
        .list_events(&group)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    listed.sort();
    assert_eq!(listed, ["f1", "f2", "f3"]);
    assert_eq!(store.count_events(&group, 100).await.unwrap(), 3);
    let unclassified = EventFilter {
        cause: Some(CauseFilter {
            rules: prefixes.clone(),
            cause: -1,
        }),
        ..group.clone()
    };
    let listed = store.list_events(&unclassified).await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>(),
        ["f6"]
    );
    let nowhere = EventFilter {
        destination: Some(DestinationFilter::None),
        kind: None,
        cause: None,
        ..group
    };
    let listed = store.list_events(&nowhere).await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>(),
        ["f7"]
    );
    store.close().await;
}
