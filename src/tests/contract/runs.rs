//! The runs port and the run services on it, on SQLite, PostgreSQL and MariaDB:
//! keyset paging and filters, the Runs page's capped status counts (a million runs
//! cost no more than the cap), racing terminal transitions, an enqueue failure
//! rolling the transition back, batched creations and transitions answering each
//! caller as if alone, and (on PostgreSQL, with a real trigger) a conflict on one
//! run failing only its own item of the batch.

use herald::config::{Settings, SettingsArgs};
use herald::service::runs::{RunService, TransitionRequest};
use herald::service::ServiceError;
use herald::store::ports::{NewRun, OutboxStore, RunFilter, RunRepository, Transactions};
use herald::store::{Engine, SqlStore};
use sqlx::Executor;
use testkit::TestDb;
use vocab::{Role, RunStatus, Viewer};

testkit::contract_tests!(
    status_counts_are_exact_below_the_cap_and_stop_just_above_it,
    runs_page_newest_first_without_gaps_or_repeats,
    runs_filter_by_type_and_status,
    racing_terminal_transitions_have_one_winner_and_one_set_of_events,
    a_failing_enqueue_rolls_the_transition_back,
    concurrent_transitions_batched_together_answer_as_if_alone,
    concurrent_creations_batched_together_each_get_their_own_run,
    a_run_type_is_remembered_only_once_committed,
);

async fn status_counts_are_exact_below_the_cap_and_stop_just_above_it(db: &TestDb) {
    let store = db.store().await;
    for _ in 0..7 {
        store
            .create_run(NewRun {
                run_type: "etl".into(),
                tenant: "acme".into(),
                callback_url: None,
                routes: Vec::new(),
            })
            .await
            .unwrap();
    }
    // Two of the seven failed.
    store
        .pool()
        .execute(
            "UPDATE runs SET status = 'failed' WHERE id IN \
             (SELECT id FROM (SELECT id FROM runs ORDER BY id LIMIT 2) two)",
        )
        .await
        .unwrap();
    let count = |counts: &[(RunStatus, i64)], status| {
        counts
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, n)| *n)
            .unwrap()
    };
    let exact = store.count_by_status(100).await.unwrap();
    assert_eq!(exact.len(), RunStatus::ALL.len(), "every status is counted");
    assert_eq!(count(&exact, RunStatus::Queued), 5);
    assert_eq!(count(&exact, RunStatus::Failed), 2);
    assert_eq!(count(&exact, RunStatus::Succeeded), 0);
    // Capped at 3: five queued count as 4 ("3+"), two failed stay exact.
    let capped = store.count_by_status(3).await.unwrap();
    assert_eq!(count(&capped, RunStatus::Queued), 4);
    assert_eq!(count(&capped, RunStatus::Failed), 2);
    store.close().await;
}

async fn runs_page_newest_first_without_gaps_or_repeats(db: &TestDb) {
    let store = db.store().await;
    let mut created = Vec::new();
    for i in 0..25 {
        let run = store
            .create_run(NewRun {
                run_type: "etl".into(),
                tenant: format!("t{i}"),
                callback_url: Some("https://example.com/hook".into()),
                routes: vec!["ops".into()],
            })
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::Queued);
        created.push(run.id);
    }
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .list_runs(&RunFilter {
                before_id: before.clone(),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        before = page.last().map(|r| r.id.clone());
        seen.extend(page.into_iter().map(|r| r.id));
    }
    created.reverse();
    assert_eq!(seen, created, "newest first, every run exactly once");
    let run = store.get_run(&created[0]).await.unwrap().expect("get");
    assert_eq!(
        run.callback_url.as_deref(),
        Some("https://example.com/hook")
    );
    assert!(store.get_run("nope").await.unwrap().is_none());
    store.close().await;
}

async fn runs_filter_by_type_and_status(db: &TestDb) {
    let store = db.store().await;
    for run_type in ["etl", "etl", "report"] {
        store
            .create_run(NewRun {
                run_type: run_type.into(),
                tenant: "acme".into(),
                callback_url: None,
                routes: Vec::new(),
            })
            .await
            .unwrap();
    }
    let etl = store
        .list_runs(&RunFilter {
            run_type: Some("etl".into()),
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(etl.len(), 2);
    assert!(etl.iter().all(|r| r.run_type == "etl"));
    let queued = store
        .list_runs(&RunFilter {
            status: Some(RunStatus::Queued),
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(queued.len(), 3);
    let failed = store
        .list_runs(&RunFilter {
            status: Some(RunStatus::Failed),
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(failed.is_empty());
    assert_eq!(
        store.run_types().await.unwrap(),
        vec!["etl".to_string(), "report".to_string()]
    );
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
    testkit::run_service(store, &settings)
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
                approval: None,
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
                    approval: None,
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
                approval: None,
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
                approval: None,
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
    // The precondition of every answer above: requests really shared batches.
    let (largest, _) = service.largest_batches();
    assert!(largest > 1, "no batch held more than one transition");
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
    let (_, largest) = service.largest_batches();
    assert!(largest > 1, "no batch held more than one creation");
    store.close().await;
}

/// A creation reads `run_types` only for types this process has not seen
/// committed. A type whose creation rolled back is inserted again by the next
/// creation and listed, even where a second creation in the same transaction
/// read it (SQLite's grouped write units share one transaction; elsewhere each
/// creation has its own).
async fn a_run_type_is_remembered_only_once_committed(db: &TestDb) {
    let store = db.store().await;
    let new_run = |run_type: &str| NewRun {
        run_type: run_type.into(),
        tenant: "acme".into(),
        callback_url: None,
        routes: Vec::new(),
    };
    let mut tx = store.begin_write().await.unwrap();
    store
        .create_runs_in(&mut tx, &[new_run("ghost")])
        .await
        .unwrap();
    if store.engine().groups_commits() {
        store
            .create_runs_in(&mut tx, &[new_run("ghost")])
            .await
            .unwrap();
    }
    tx.rollback().await.unwrap();
    assert!(store.run_types().await.unwrap().is_empty());
    for _ in 0..3 {
        store.create_run(new_run("ghost")).await.unwrap();
        store.create_run(new_run("kept")).await.unwrap();
    }
    assert_eq!(
        store.run_types().await.unwrap(),
        vec!["ghost".to_string(), "kept".to_string()]
    );
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
                approval: None,
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
    // Only a shared batch makes this a test of neighbours.
    let (largest, _) = service.largest_batches();
    assert!(largest > 1, "no batch held more than one transition");
    store.close().await;
    db.drop_db().await;
}
