//! Contract behaviours of the outbox and the transition service that had no test of
//! their own (issue 12, items 10 and 11), on SQLite, PostgreSQL and MariaDB: the
//! lease-expiry half of the fence, racing sweepers, a lease expiring on the cycle's
//! last attempt, racing terminal transitions, and an enqueue failure rolling the run
//! back.

use std::sync::Arc;
use std::time::Duration;

use herald::config::{Settings, SettingsArgs};
use herald::outbox::model::{NewEvent, Settle, Source};
use herald::service::runs::{RunService, TransitionRequest};
use herald::service::ServiceError;
use herald::store::ports::{NewRun, OutboxStore, RunRepository};
use herald::store::{Engine, SqlStore};
use sqlx::Executor;
use vocab::{DeliveryStatus, Role, RunStatus, Viewer};

use crate::support::{claim, claim_request, enqueue, settlement, TestDb};

crate::contract_tests!(
    a_token_correct_write_after_the_lease_expired_is_refused,
    racing_sweepers_settle_each_expired_row_once,
    a_lease_expiring_on_the_last_attempt_ends_failed_with_a_dead_letter,
    racing_terminal_transitions_have_one_winner_and_one_set_of_events,
    a_failing_enqueue_rolls_the_transition_back,
    a_claim_with_only_a_default_lease_uses_it,
    concurrent_transitions_batched_together_answer_as_if_alone,
    concurrent_creations_batched_together_each_get_their_own_run,
);

fn event(id: &str, redeliverable: bool, max_attempts: u32) -> NewEvent {
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
    }
}

async fn a_token_correct_write_after_the_lease_expired_is_refused(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("expired-own", true, 6)]).await;
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
        events.push(event(&format!("chat-{i:02}"), false, 6));
        events.push(event(&format!("last-{i:02}"), true, 1));
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
                match store.sweep_expired(100, None).await {
                    Ok(report) => {
                        reported.extend(report.uncertain.into_iter().map(|(id, _)| id));
                        reported.extend(report.failed.into_iter().map(|(id, _)| id));
                    }
                    // A lost commit race (MySQL 1213) is retried, as maintenance does.
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
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
    enqueue(&store, &[event("last-try", true, 2)]).await;
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
    let report = store.sweep_expired(100, notifier.as_ref()).await.unwrap();
    assert_eq!(report.failed, vec![("last-try".into(), "test".into())]);
    assert!(report.uncertain.is_empty());
    let failed = store.get_event("last-try").await.unwrap().unwrap();
    assert_eq!(failed.status, DeliveryStatus::Failed);
    assert!(failed.failed_at.is_some() && failed.alerted_at.is_some());
    assert_eq!(
        failed.dead_letter_id.as_deref(),
        Some("dead_letter_last-try")
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
    let again = store.sweep_expired(100, notifier.as_ref()).await.unwrap();
    assert!(again.failed.is_empty() && again.uncertain.is_empty());
    store.close().await;
}

fn operator() -> Viewer {
    Viewer {
        name: "racer".into(),
        role: Role::Operator,
    }
}

fn run_service(db: &TestDb, store: &SqlStore) -> RunService {
    let settings = Settings::resolve(&SettingsArgs {
        database_url: Some(db.url.clone()),
        ..Default::default()
    })
    .unwrap();
    crate::support::run_service(store, &settings)
}

async fn running_run_with_a_callback(store: &SqlStore, service: &RunService) -> String {
    let run = store
        .create_run(NewRun {
            run_type: "etl".into(),
            tenant: "acme".into(),
            callback_url: Some("https://receiver.example/hook".into()),
            routes: Vec::new(),
        })
        .await
        .unwrap();
    service
        .transition(
            Some(&operator()),
            &run.id,
            TransitionRequest {
                to: RunStatus::Running,
                result: None,
            },
        )
        .await
        .unwrap();
    run.id
}

async fn racing_terminal_transitions_have_one_winner_and_one_set_of_events(db: &TestDb) {
    let store = db.store().await;
    let service = run_service(db, &store);
    for round in 0..8 {
        let run = running_run_with_a_callback(&store, &service).await;
        let mut racers = Vec::new();
        for to in [RunStatus::Succeeded, RunStatus::Failed] {
            let service = service.clone();
            let run = run.clone();
            racers.push(tokio::spawn(async move {
                let request = TransitionRequest {
                    to,
                    result: Some(serde_json::json!({"by": to.as_str()})),
                };
                (
                    to,
                    service.transition(Some(&operator()), &run, request).await,
                )
            }));
        }
        let mut winners = Vec::new();
        for racer in racers {
            match racer.await.unwrap() {
                (to, Ok(response)) => {
                    assert!(!response.replayed);
                    winners.push((to, response.notifications));
                }
                (_, Err(ServiceError::IllegalTransition { current, .. })) => {
                    assert!(current.is_terminal(), "the loser sees the winner's state");
                }
                (to, Err(other)) => {
                    panic!("round {round}: the move to {to:?} failed with {other:?}, not a 409")
                }
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one winner");
        let (to, notifications) = winners.pop().unwrap();
        let stored = store.get_run(&run).await.unwrap().unwrap();
        assert_eq!(stored.status, to, "the winner's state is the run's");
        let events = store.events_for_parent("run", &run).await.unwrap();
        let mut ids: Vec<String> = events.into_iter().map(|e| e.event_id).collect();
        ids.sort();
        assert_eq!(ids, notifications, "one set of events, the winner's");
        assert_eq!(ids, vec![format!("callback_{run}_{}_2", to.as_str())]);
    }
    store.close().await;
}

/// Makes every insert into `outbox_events` fail inside the engine.
async fn refuse_enqueues(store: &SqlStore) {
    let statements: Vec<&str> = match store.engine() {
        Engine::Sqlite => vec![
            "CREATE TRIGGER refuse_enqueue BEFORE INSERT ON outbox_events \
             BEGIN SELECT RAISE(ABORT, 'injected fault'); END",
        ],
        Engine::Postgres => vec![
            "CREATE FUNCTION refuse_enqueue() RETURNS trigger AS $$ BEGIN \
             RAISE EXCEPTION 'injected fault'; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER refuse_enqueue BEFORE INSERT ON outbox_events \
             FOR EACH ROW EXECUTE FUNCTION refuse_enqueue()",
        ],
        Engine::MySql => vec![
            "CREATE TRIGGER refuse_enqueue BEFORE INSERT ON outbox_events FOR EACH ROW \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected fault'",
        ],
    };
    for sql in statements {
        store.pool().execute(sql).await.expect("install the fault");
    }
}

async fn a_failing_enqueue_rolls_the_transition_back(db: &TestDb) {
    let store = db.store().await;
    let service = run_service(db, &store);
    let run = running_run_with_a_callback(&store, &service).await;
    let before = store.get_run(&run).await.unwrap().unwrap();
    refuse_enqueues(&store).await;
    let refused = service
        .transition(
            Some(&operator()),
            &run,
            TransitionRequest {
                to: RunStatus::Succeeded,
                result: Some(serde_json::json!({"rows": 1})),
            },
        )
        .await;
    assert!(
        matches!(refused, Err(ServiceError::Internal(_))),
        "{refused:?}"
    );
    let after = store.get_run(&run).await.unwrap().unwrap();
    assert_eq!(
        after.status,
        RunStatus::Running,
        "the run moved without its events"
    );
    assert_eq!(after.transition_seq, before.transition_seq);
    assert_eq!(after.result, None);
    assert!(store
        .events_for_parent("run", &run)
        .await
        .unwrap()
        .is_empty());
    store.close().await;
}

async fn a_claim_with_only_a_default_lease_uses_it(db: &TestDb) {
    let store = db.store().await;
    enqueue(&store, &[event("default-lease", true, 6)]).await;
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

/// Many transitions at once share batches (`service::transitions`): repeats of one
/// run in the same batch, a race between two terminal states, a missing run and an
/// illegal move each get the answer they would get alone, and every finished run
/// owes exactly one set of events.
async fn concurrent_transitions_batched_together_answer_as_if_alone(db: &TestDb) {
    let store = db.store().await;
    let service = run_service(db, &store);
    let mut runs = Vec::new();
    for _ in 0..24 {
        runs.push(running_run_with_a_callback(&store, &service).await);
    }
    // (run, target, result): each run is asked twice, all at once.
    let mut asks = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let same = serde_json::json!({"n": i});
        match i % 3 {
            // The same request twice: one moves the run, the other is a repeat.
            0 => {
                asks.push((run.clone(), RunStatus::Succeeded, same.clone()));
                asks.push((run.clone(), RunStatus::Succeeded, same));
            }
            // Two terminal states race: one wins, the other is illegal.
            1 => {
                asks.push((run.clone(), RunStatus::Succeeded, same.clone()));
                asks.push((run.clone(), RunStatus::Failed, same));
            }
            // A legal move and an illegal one (nothing moves to `queued`).
            _ => {
                asks.push((run.clone(), RunStatus::Cancelled, same.clone()));
                asks.push((run.clone(), RunStatus::Queued, same));
            }
        }
    }
    asks.push((
        "no-such-run".into(),
        RunStatus::Succeeded,
        serde_json::json!(null),
    ));
    let mut racers = tokio::task::JoinSet::new();
    for (run, to, result) in asks {
        let service = service.clone();
        racers.spawn(async move {
            let request = TransitionRequest {
                to,
                result: Some(result),
            };
            let outcome = service.transition(Some(&operator()), &run, request).await;
            (run, to, outcome)
        });
    }
    let mut moved: std::collections::HashMap<String, Vec<RunStatus>> = Default::default();
    let mut repeats: std::collections::HashMap<String, usize> = Default::default();
    while let Some(joined) = racers.join_next().await {
        match joined.unwrap() {
            (run, to, Ok(response)) if response.replayed => {
                assert_eq!(response.run.status, to);
                *repeats.entry(run).or_default() += 1;
            }
            (run, to, Ok(response)) => {
                assert_eq!(response.run.status, to);
                assert_eq!(response.notifications.len(), 1, "{run}: one callback owed");
                moved.entry(run).or_default().push(to);
            }
            (run, _, Err(ServiceError::NotFound(_))) => assert_eq!(run, "no-such-run"),
            (run, to, Err(ServiceError::IllegalTransition { current, requested })) => {
                assert_eq!(requested, to);
                assert!(
                    current.is_terminal() || to == RunStatus::Queued,
                    "{run}: refused {to:?} from {current:?}"
                );
            }
            (run, to, Err(other)) => panic!("{run} → {to:?}: {other:?}"),
        }
    }
    for (i, run) in runs.iter().enumerate() {
        let wins = moved.get(run).cloned().unwrap_or_default();
        assert_eq!(
            wins.len(),
            1,
            "{run}: exactly one move took effect: {wins:?}"
        );
        let expected_repeats = usize::from(i % 3 == 0);
        assert_eq!(
            repeats.get(run).copied().unwrap_or(0),
            expected_repeats,
            "{run}"
        );
        let stored = store.get_run(run).await.unwrap().unwrap();
        assert_eq!(
            stored.status, wins[0],
            "{run}: the winner's state is stored"
        );
        assert_eq!(
            stored
                .result
                .as_deref()
                .map(|r| serde_json::from_str::<serde_json::Value>(r).unwrap()),
            Some(serde_json::json!({"n": i})),
            "{run}: its own result, not another run's"
        );
        let events = store.events_for_parent("run", run).await.unwrap();
        assert_eq!(events.len(), 1, "{run}: one set of events");
    }
    store.close().await;
}

/// Many creations at once share batches (`service::creations`), several of them
/// of types nobody has used yet: each caller gets its own run as it asked for it,
/// and each type is listed once.
async fn concurrent_creations_batched_together_each_get_their_own_run(db: &TestDb) {
    let store = db.store().await;
    let service = run_service(db, &store);
    let mut creators = tokio::task::JoinSet::new();
    for i in 0..150usize {
        let service = service.clone();
        creators.spawn(async move {
            let input = herald::service::runs::CreateRun {
                run_type: format!("type-{}", i % 7),
                tenant: format!("tenant-{i}"),
                callback_url: Some(format!("https://receiver.example/hook/{i}")),
                routes: Vec::new(),
            };
            (i, service.create(Some(&operator()), input).await)
        });
    }
    let mut ids = std::collections::HashSet::new();
    while let Some(joined) = creators.join_next().await {
        let (i, created) = joined.unwrap();
        let run = created.unwrap_or_else(|e| panic!("creation {i}: {e:?}"));
        assert_eq!(run.run_type, format!("type-{}", i % 7));
        assert_eq!(run.tenant, format!("tenant-{i}"));
        assert_eq!(run.status, RunStatus::Queued);
        let stored = store.get_run(&run.id).await.unwrap().expect("stored");
        assert_eq!(stored.tenant, format!("tenant-{i}"), "its own row");
        assert_eq!(
            stored.callback_url.as_deref(),
            Some(format!("https://receiver.example/hook/{i}").as_str())
        );
        assert!(ids.insert(run.id), "a fresh id each");
    }
    let types = store.run_types().await.unwrap();
    let expected: Vec<String> = (0..7).map(|t| format!("type-{t}")).collect();
    assert_eq!(types, expected, "each type listed once");
    store.close().await;
}

/// A lost race on one run (here a real trigger raising PostgreSQL's
/// serialization failure for it) fails that run's transition alone: the batch it
/// shared is tried again item by item, and its neighbours still move.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conflict_on_one_run_does_not_fail_its_batch_neighbours() {
    let db = TestDb::new(Engine::Postgres).await;
    let store = db.store().await;
    let service = run_service(&db, &store);
    let mut runs = Vec::new();
    for _ in 0..40 {
        runs.push(running_run_with_a_callback(&store, &service).await);
    }
    let contested = runs[7].clone();
    for sql in [
        "CREATE FUNCTION lose_race() RETURNS trigger AS $$ BEGIN \
         RAISE EXCEPTION 'injected lost race' USING ERRCODE = '40001'; END $$ LANGUAGE plpgsql"
            .to_string(),
        format!(
            "CREATE TRIGGER lose_race BEFORE UPDATE ON runs FOR EACH ROW \
             WHEN (OLD.id = '{contested}') EXECUTE FUNCTION lose_race()"
        ),
    ] {
        store
            .pool()
            .execute(sql.as_str())
            .await
            .expect("install the fault");
    }
    let mut movers = tokio::task::JoinSet::new();
    for run in runs.clone() {
        let service = service.clone();
        movers.spawn(async move {
            let request = TransitionRequest {
                to: RunStatus::Succeeded,
                result: None,
            };
            (
                run.clone(),
                service.transition(Some(&operator()), &run, request).await,
            )
        });
    }
    while let Some(joined) = movers.join_next().await {
        match joined.unwrap() {
            (run, Err(ServiceError::Unavailable(message))) if run == contested => {
                assert!(message.contains("conflict"), "{message}");
            }
            (run, outcome) if run == contested => panic!("the contested run: {outcome:?}"),
            (run, Ok(response)) => assert_eq!(response.run.status, RunStatus::Succeeded, "{run}"),
            (run, Err(err)) => panic!("{run} failed with its neighbour: {err:?}"),
        }
    }
    for run in &runs {
        let stored = store.get_run(run).await.unwrap().unwrap();
        let events = store.events_for_parent("run", run).await.unwrap();
        if *run == contested {
            assert_eq!(stored.status, RunStatus::Running);
            assert!(
                events.is_empty(),
                "no events for a move that did not happen"
            );
        } else {
            assert_eq!(stored.status, RunStatus::Succeeded);
            assert_eq!(events.len(), 1);
        }
    }
    store.close().await;
    db.drop_db().await;
}
