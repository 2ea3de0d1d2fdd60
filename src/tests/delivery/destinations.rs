//! Per-destination health through a real server and a real receiver on loopback:
//! the circuit breaker opens after N consecutive retryable failures, the events it
//! holds back keep their attempt counts, `/metrics` shows it by route name, one
//! half-open probe closes it; operators close it by hand (audited), readers cannot.

use std::time::Duration;

use herald::outbox::frontier::FULL_WALK_EVERY;
use herald::store::ports::{DeliveryReads, DestinationStore, OutboxStore};
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{finish_routed_run, json_of, metrics_with, wait_for, wall_ms, Receiver, TestServer};
use vocab::{DeliveryStatus, Role};

/// Whether every one of `events` is in `status`.
async fn all_in(
    store: &herald::store::SqlStore,
    events: &[String],
    status: DeliveryStatus,
) -> bool {
    for id in events {
        if store.get_event(id).await.unwrap().unwrap().status != status {
            return false;
        }
    }
    true
}

/// How long the breaker stays open before its probe.
const BREAKER_OPEN_MS: u64 = 10_000;

/// A server reading `routes` (a routes file's text), sending to loopback, polling
/// every 50 ms, with `settings` on top; the routes file lives as long as the
/// server needs it.
async fn server_with_routes(
    routes: String,
    settings: impl FnOnce(&mut herald::config::SettingsArgs),
) -> (TestServer, tempfile::NamedTempFile) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), routes).unwrap();
    let path = file.path().to_path_buf();
    let server = TestServer::start_with(move |args| {
        args.config = Some(path);
        args.destination_allowlist = Some("127.0.0.0/8".into());
        args.worker_poll_interval_ms = Some(50);
        settings(args);
    })
    .await;
    (server, file)
}

/// A server whose `hooks` route (capped at 2 in flight) points at `receiver`
/// ([`server_with_routes`]).
async fn hooks_server(
    receiver: &Receiver,
    settings: impl FnOnce(&mut herald::config::SettingsArgs),
) -> (TestServer, tempfile::NamedTempFile) {
    let routes = format!(
        r#"
[[routes]]
name = "hooks"
channel = "webhook"
url = "{url}"
max_in_flight = 2
"#,
        url = receiver.url_for("hooks")
    );
    server_with_routes(routes, settings).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_breaker_opens_after_n_failures_holds_events_without_spending_attempts_and_a_probe_closes_it(
) {
    let receiver = Receiver::start().await;
    receiver.set_status(503);
    let (server, _routes) = hooks_server(&receiver, |args| {
        args.initial_backoff_ms = Some(100);
        args.max_backoff_ms = Some(200);
        args.maintenance_interval_ms = Some(200);
        args.breaker_failures = Some(3);
        // Long enough that the checks below run inside the window on any machine
        // (asserted), short enough that the probe comes within the test's wait.
        args.breaker_open_ms = Some(BREAKER_OPEN_MS);
    })
    .await;
    let base = format!("http://{}", server.addr);
    let operator = server.token(Role::Operator).await;
    let events = runs_to(&server, &operator, "hooks", 10).await;
    let store = server.db.store().await;

    wait_for("the breaker to open", Duration::from_secs(20), async || {
        store
            .breakers()
            .await
            .unwrap()
            .iter()
            .any(|b| b.route == "hooks" && b.state == "open")
    })
    .await;
    let breaker = store.breakers().await.unwrap().remove(0);
    assert_eq!(breaker.failures, 3);
    assert!(
        breaker.destination.starts_with("http://127.0.0.1:"),
        "{breaker:?}"
    );
    let metrics = metrics_with(
        &base,
        "herald_destination_breaker_open{route=\"hooks\"} 1",
        Duration::from_secs(5),
    )
    .await;
    assert!(
        metrics.contains("herald_destination_breaker_open{route=\"hooks\"} 1"),
        "{metrics}"
    );
    assert!(!metrics.contains("127.0.0.1"), "no URL in metric labels");

    // While it is open no event spent an attempt it did not make. Attempts admitted
    // before the opening may still be finishing: wait until none is in flight.
    wait_for(
        "the attempts in flight to settle",
        Duration::from_secs(10),
        async || all_in(&store, &events, DeliveryStatus::Pending).await,
    )
    .await;
    let mut attempts = 0;
    let mut untouched = 0;
    let observed_at = wall_ms();
    for id in &events {
        let event = store.get_event(id).await.unwrap().unwrap();
        assert_eq!(event.status, DeliveryStatus::Pending, "{id}");
        // Pushed to the probe time by the opening (or, committed while it was
        // already open, left out of every claim until then).
        assert!(
            event.next_attempt_at >= breaker.probe_at.unwrap()
                || (event.created_at >= breaker.opened_at.unwrap() && event.attempts == 0),
            "waits for the probe: {event:?} {breaker:?}"
        );
        attempts += event.attempts;
        if event.attempts == 0 {
            untouched += 1;
        }
    }
    assert_eq!(
        attempts as usize,
        receiver.requests().len(),
        "every attempt counted was a request made"
    );
    assert!(
        untouched >= 5,
        "with a cap of 2 most events were never attempted: {untouched}"
    );
    assert!(
        wall_ms() < breaker.probe_at.unwrap(),
        "the checks above ran inside the open window (started {} ms after it opened)",
        observed_at - breaker.opened_at.unwrap()
    );

    // The receiver heals; the half-open probe closes the breaker and everything goes.
    receiver.set_status(200);
    wait_for(
        "every event delivered",
        Duration::from_secs(30) + Duration::from_millis(BREAKER_OPEN_MS),
        async || all_in(&store, &events, DeliveryStatus::Completed).await,
    )
    .await;
    // No attempt at all started after the opening until the probe was due (one let
    // through just before it may share its millisecond).
    let (opened_at, probe_at) = (breaker.opened_at.unwrap(), breaker.probe_at.unwrap());
    let mut started_while_open = Vec::new();
    for id in &events {
        for attempt in store.attempts(id).await.unwrap() {
            if (opened_at + 1..probe_at).contains(&attempt.started_at) {
                started_while_open.push((id.clone(), attempt.started_at));
            }
        }
    }
    assert!(
        started_while_open.is_empty(),
        "attempts started while open (window {opened_at}..{probe_at}): {started_while_open:?}"
    );
    // Half-open lets one probe through, and the rest only once it succeeded:
    // releasing everything at `probe_at` would start others beside it.
    let mut after_open = Vec::new();
    for id in &events {
        for attempt in store.attempts(id).await.unwrap() {
            if attempt.started_at >= probe_at {
                after_open.push((attempt.started_at, attempt.finished_at, id.clone()));
            }
        }
    }
    after_open.sort();
    let (_, probe_finished, probe) = after_open.first().cloned().expect("a probe");
    let beside_the_probe: Vec<_> = after_open[1..]
        .iter()
        .filter(|(started, _, _)| *started < probe_finished)
        .collect();
    assert!(
        beside_the_probe.is_empty(),
        "attempts started while the probe ({probe}, done at {probe_finished}) was out: {beside_the_probe:?}"
    );
    assert!(after_open.len() > 1, "the rest went after the probe");
    let breaker = store.breakers().await.unwrap().remove(0);
    assert_eq!(breaker.state, "closed");
    for id in &events {
        let event = store.get_event(id).await.unwrap().unwrap();
        assert!(event.attempts <= 3, "{id}: {}", event.attempts);
    }
    let metrics = metrics_with(
        &base,
        "herald_destination_breaker_open{route=\"hooks\"} 0",
        Duration::from_secs(5),
    )
    .await;
    assert!(
        metrics.contains("herald_destination_breaker_open{route=\"hooks\"} 0"),
        "{metrics}"
    );
    store.close().await;
    server.stop().await;
    receiver.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operators_close_a_breaker_by_hand_audited_and_readers_cannot() {
    let server = TestServer::start_with(|args| {
        args.maintenance_interval_ms = Some(200);
    })
    .await;
    let base = format!("http://{}", server.addr);
    let store = server.db.store().await;
    let destination = "https://hooks.example.com";
    store
        .open_breaker(destination, "partner", 5, 600_000)
        .await
        .unwrap();
    let reader = server.token(Role::Reader).await;
    let operator = server.token(Role::Operator).await;
    let client = reqwest::Client::new();

    let listed: Value = json_of(
        client
            .get(server.url("/admin/api/destination-breakers"))
            .bearer_auth(&reader),
    )
    .await;
    assert_eq!(listed[0]["route"], "partner", "{listed}");
    assert_eq!(listed[0]["state"], "open", "{listed}");
    let metrics = metrics_with(
        &base,
        "herald_destination_breaker_open{route=\"partner\"} 1",
        Duration::from_secs(5),
    )
    .await;
    assert!(
        metrics.contains("herald_destination_breaker_open{route=\"partner\"} 1"),
        "{metrics}"
    );

    let close = server.url("/admin/api/destination-breakers/close");
    let refused = client
        .post(&close)
        .bearer_auth(&reader)
        .json(&json!({"destination": destination}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(store.breakers().await.unwrap()[0].state, "open");
    // The console's server function refuses a reader's forged close the same way.
    let forged = server
        .session(Role::Reader)
        .await
        .post(server.url("/console-api/close-breaker"))
        .form(&[("destination", destination)])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(store.breakers().await.unwrap()[0].state, "open");
    let unknown = client
        .post(&close)
        .bearer_auth(&operator)
        .json(&json!({"destination": "https://nobody.example.com"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let bad = client
        .post(&close)
        .bearer_auth(&operator)
        .json(&json!({"origin": destination}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);

    let closed = client
        .post(&close)
        .bearer_auth(&operator)
        .json(&json!({"destination": destination}))
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), StatusCode::OK);
    let closed: Value = closed.json().await.unwrap();
    assert_eq!(closed["from_state"], "open");
    assert_eq!(store.breakers().await.unwrap()[0].state, "closed");
    let again = client
        .post(&close)
        .bearer_auth(&operator)
        .json(&json!({"destination": destination}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT);

    let audit = store.audit(None, 10).await.unwrap();
    let entry = audit
        .iter()
        .find(|a| a.action == "close_breaker")
        .expect("the close is audited");
    assert!(entry.event_id.contains("partner"), "{entry:?}");
    assert_eq!(entry.from_status, "open");
    let metrics = metrics_with(
        &base,
        "herald_destination_breaker_open{route=\"partner\"} 0",
        Duration::from_secs(5),
    )
    .await;
    assert!(
        metrics.contains("herald_destination_breaker_open{route=\"partner\"} 0"),
        "{metrics}"
    );
    store.close().await;
    server.stop().await;
}

/// Each failed half-open probe doubles the wait before the next one, up to
/// `breaker_max_open_ms` — whatever the retries' own `max_backoff_ms` (here far
/// shorter, as in these tests' servers) (issue 19).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_failed_probe_doubles_the_wait_up_to_its_cap() {
    let receiver = Receiver::start().await;
    receiver.set_status(503);
    let (server, _routes) = hooks_server(&receiver, |args| {
        args.initial_backoff_ms = Some(50);
        args.max_backoff_ms = Some(100);
        args.maintenance_interval_ms = Some(100);
        args.breaker_failures = Some(1);
        // Windows of a second or more: a loaded machine's poll below still sees
        // each opening.
        args.breaker_open_ms = Some(1_000);
        args.breaker_max_open_ms = Some(4_000);
    })
    .await;
    let operator = server.token(Role::Operator).await;
    runs_to(&server, &operator, "hooks", 3).await;
    let store = server.db.store().await;
    // Every opening of the breaker (the first, then one per failed probe) as the
    // shared table holds it: when it opened and how long it waits.
    let mut openings: Vec<(i64, i64)> = Vec::new();
    wait_for("five openings", Duration::from_secs(60), async || {
        if let Some(b) = store.breakers().await.unwrap().first() {
            if let (Some(opened_at), Some(probe_at)) = (b.opened_at, b.probe_at) {
                if b.state == "open" && openings.last().map(|o| o.0) != Some(opened_at) {
                    assert_eq!(probe_at - opened_at, b.open_ms, "{b:?}");
                    openings.push((opened_at, b.open_ms));
                }
            }
        }
        openings.len() >= 5
    })
    .await;
    let waits: Vec<i64> = openings.iter().map(|o| o.1).collect();
    assert_eq!(
        waits,
        vec![1_000, 2_000, 4_000, 4_000, 4_000],
        "{openings:?}"
    );
    // And each probe came when its wait was over, not before.
    for pair in openings.windows(2) {
        assert!(pair[1].0 >= pair[0].0 + pair[0].1, "{openings:?}");
    }
    store.close().await;
    server.stop().await;
    receiver.stop();
}

/// One claim takes more events of a destination than its cap has room for (its
/// first: how fast it answers is not known yet, so it is not metered): the cap
/// admits two, and those that find no place within the wait are given back
/// unattempted — counted by reason in `herald_outbox_claims_handed_back_total`,
/// their attempts not spent: once the receiver answers, each event is delivered
/// with exactly one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_a_full_destination_cannot_take_in_time_are_handed_back_and_counted() {
    let receiver = Receiver::start().await;
    receiver.pause();
    // Every event left to a claim: leased at insert, only the two the cap has
    // room for would be taken, and the other four would wait, unclaimed.
    let (server, _routes) = hooks_server(&receiver, |args| {
        args.lease_at_insert = Some(false);
    })
    .await;
    let base = format!("http://{}", server.addr);
    let operator = server.token(Role::Operator).await;
    let metric = "herald_outbox_claims_handed_back_total{kind=\"delivery\",reason=\"no_place\"}";
    let handed_back = async || testkit::metric_value(&base, metric).await.unwrap_or(0.0);

    // Six in one commit: one claim takes them together.
    let runs = runs_routed(&server, &operator, "hooks", 6).await;
    let events = finish_in_one_commit(&server, &operator, "hooks", &runs).await;
    let store = server.db.store().await;
    // Two are held at the receiver's gate; the other four find no place.
    wait_for(
        "four claimed events to be handed back",
        Duration::from_secs(15),
        async || handed_back().await >= 4.0,
    )
    .await;
    assert!(receiver.max_in_flight() <= 2, "the cap held");
    let breaker_metric =
        "herald_outbox_claims_handed_back_total{kind=\"delivery\",reason=\"breaker\"}";
    assert_eq!(
        testkit::metric_value(&base, breaker_metric).await,
        Some(0.0)
    );

    // A hand-back spent no attempt.
    resume_and_deliver_each_with_one_attempt(&receiver, &store, &events).await;
}

/// Opens `receiver`'s gate and waits for every one of `events` to complete,
/// each with exactly one attempt, the cap of two held throughout.
async fn resume_and_deliver_each_with_one_attempt(
    receiver: &Receiver,
    store: &herald::store::SqlStore,
    events: &[String],
) {
    receiver.resume();
    wait_for(
        "every event to be delivered",
        Duration::from_secs(20),
        async || all_in(store, events, DeliveryStatus::Completed).await,
    )
    .await;
    for id in events {
        let event = store.get_event(id).await.unwrap().unwrap();
        assert_eq!(event.attempts, 1, "{id}: one attempt");
    }
    assert!(receiver.max_in_flight() <= 2, "the cap held");
}

/// The same commit with events leased at insert (the default): only as many as
/// the cap has room for are leased and sent; the rest stay `pending`, untouched,
/// for claims that leave the full destination out, so none is claimed only to
/// be handed back, and each is delivered with one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_leased_at_insert_take_only_the_places_their_destination_has() {
    let receiver = Receiver::start().await;
    receiver.pause();
    // No polling claims: one in flight as the commit lands chose the
    // destinations to leave out before the commit filled this one, so it may
    // take the four (and hand them back later). Claims still come when a
    // commit or a freed place wakes the worker.
    let (server, _routes) = hooks_server(&receiver, |args| {
        args.worker_poll_interval_ms = Some(600_000);
    })
    .await;
    let base = format!("http://{}", server.addr);
    let operator = server.token(Role::Operator).await;
    let runs = runs_routed(&server, &operator, "hooks", 6).await;
    let events = finish_in_one_commit(&server, &operator, "hooks", &runs).await;
    let store = server.db.store().await;
    wait_for(
        "two sends held at the receiver's gate",
        Duration::from_secs(15),
        async || receiver.held_at_gate().len() == 2,
    )
    .await;
    let leased = "herald_outbox_leased_at_insert_total{kind=\"delivery\"}";
    assert_eq!(testkit::metric_value(&base, leased).await, Some(2.0));
    let mut pending = 0;
    for id in &events {
        let event = store.get_event(id).await.unwrap().unwrap();
        if event.status == DeliveryStatus::Pending {
            assert_eq!(event.attempts, 0, "{id}: untouched");
            pending += 1;
        }
    }
    assert_eq!(pending, 4, "the four the cap had no room for wait pending");

    resume_and_deliver_each_with_one_attempt(&receiver, &store, &events).await;
    for reason in ["no_place", "breaker"] {
        let metric = format!(
            "herald_outbox_claims_handed_back_total{{kind=\"delivery\",reason=\"{reason}\"}}"
        );
        assert_eq!(
            testkit::metric_value(&base, &metric).await,
            Some(0.0),
            "{reason}"
        );
    }
}

/// A destination at its cap with a backlog is left out of every claim, and the
/// claims that leave it out do not walk its backlog each time: after one that
/// took every other due event, they look only at events due since (counted as
/// `walk="window"` in `herald_outbox_claims_leaving_out_total`), with a full walk
/// at most every `FULL_WALK_EVERY` (or `WALK_SHARE` times its own duration). An
/// event the windows cannot see (stamped long before them and visible only now,
/// as from a transaction that commits late) is still delivered: by a full walk.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_leaving_a_backlogged_destination_out_look_only_at_what_is_new() {
    let busy = Receiver::start().await;
    busy.pause();
    let hooks = Receiver::start().await;
    let routes = format!(
        r#"
[[routes]]
name = "busy"
channel = "webhook"
url = "{busy}"
max_in_flight = 1

[[routes]]
name = "hooks"
channel = "webhook"
url = "{hooks}"
"#,
        busy = busy.url_for("busy"),
        hooks = hooks.url_for("hooks")
    );
    let (server, _routes) = server_with_routes(routes, |_| {}).await;
    let base = format!("http://{}", server.addr);
    let operator = server.token(Role::Operator).await;
    let store = server.db.store().await;
    let walks = async |walk: &str| {
        let series = format!("herald_outbox_claims_leaving_out_total{{walk=\"{walk}\"}}");
        testkit::metric_value(&base, &series).await.unwrap_or(0.0)
    };

    // Arranged: `busy` at its cap (one delivery held at its gate) with a backlog.
    let blocker = finish_routed_run(&server, &operator, "busy", json!({})).await;
    wait_for(
        "the blocker held at the busy receiver",
        Duration::from_secs(15),
        async || busy.held_at_gate().len() == 1,
    )
    .await;
    let backlog = runs_to(&server, &operator, "busy", 20).await;
    assert!(all_in(&store, &backlog, DeliveryStatus::Pending).await);
    assert!(
        !backlog.contains(&format!("deliver_{blocker}_busy")),
        "the blocker is not in the backlog"
    );

    // Every commit to `hooks` wakes a claim that leaves `busy` out.
    let started = std::time::Instant::now();
    let full_before = walks("full").await;
    let window_before = walks("window").await;
    let delivered = runs_to(&server, &operator, "hooks", 20).await;
    wait_for(
        "the hooks deliveries",
        Duration::from_secs(20),
        async || all_in(&store, &delivered, DeliveryStatus::Completed).await,
    )
    .await;
    let elapsed = started.elapsed();
    let full = walks("full").await - full_before;
    let windowed = walks("window").await - window_before;
    assert!(windowed >= 10.0, "claims looked at a window: {windowed}");
    // Two claim loops leave destinations out (runs' callbacks and approvals'
    // notices share the store), each with its own frontier.
    let most = 2.0 * (2.0 + (elapsed.as_secs_f64() / FULL_WALK_EVERY.as_secs_f64()).floor());
    assert!(
        full <= most,
        "{full} full walks in {elapsed:?} (at most {most}), beside {windowed} windowed"
    );

    // One backlog event turned into a `hooks` one stamped a minute ago: no window
    // reaches it, and nothing tells the workers.
    let late = &backlog[0];
    let sql = store.engine().sql(
        "UPDATE outbox_events SET destination = ?, payload = REPLACE(payload, ?, ?), \
         next_attempt_at = next_attempt_at - 60000 WHERE event_id = ?",
    );
    let moved = sqlx::query(&sql)
        .bind(herald::routes::origin(&hooks.url()).unwrap())
        .bind(busy.url_for("busy"))
        .bind(hooks.url_for("hooks"))
        .bind(late)
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(moved.rows_affected(), 1);
    let full_before = walks("full").await;
    wait_for(
        "the late event delivered to hooks",
        FULL_WALK_EVERY * 4,
        async || hooks.arrivals().contains(late),
    )
    .await;
    assert!(walks("full").await > full_before, "found by a full walk");
    assert!(all_in(&store, &backlog[1..], DeliveryStatus::Pending).await);
    busy.resume();
}

/// Creates `count` runs routed to `route`; their ids.
async fn runs_routed(server: &TestServer, token: &str, route: &str, count: usize) -> Vec<String> {
    let client = reqwest::Client::new();
    let mut runs = Vec::new();
    for _ in 0..count {
        let run = json_of(
            client
                .post(server.url("/api/v1/runs"))
                .bearer_auth(token)
                .json(&json!({"type": "etl", "tenant": "acme", "routes": [route]})),
        )
        .await;
        runs.push(run["id"].as_str().unwrap().to_string());
    }
    runs
}

/// Finishes `runs` (routed to `route`) in one transitions request, one commit;
/// their events' ids.
async fn finish_in_one_commit(
    server: &TestServer,
    token: &str,
    route: &str,
    runs: &[String],
) -> Vec<String> {
    let transitions: Vec<Value> = runs
        .iter()
        .map(|id| json!({"run_id": id, "to": "succeeded"}))
        .collect();
    // Under an idempotency key a batch commits in one write unit.
    let done = reqwest::Client::new()
        .post(server.url("/api/v1/runs/transitions"))
        .bearer_auth(token)
        .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
        .json(&json!({ "transitions": transitions }))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), StatusCode::OK);
    runs.iter()
        .map(|id| format!("deliver_{id}_{route}"))
        .collect()
}

/// A destination known to be slow is metered: a claim takes of its events only
/// its free places and those its attempts in flight free in time, so none waits
/// out the cap's wait to be handed back. Thirty events due at once to a receiver
/// answering after 300 ms at a cap of 2 (unmetered, one claim would take all
/// thirty, send one and hand back most of the rest a second later).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_destination_is_claimed_no_more_than_it_can_take_in_time() {
    let receiver = Receiver::start().await;
    receiver.set_hold(Duration::from_millis(300));
    let (server, _routes) = hooks_server(&receiver, |_| {}).await;
    let base = format!("http://{}", server.addr);
    let operator = server.token(Role::Operator).await;
    let store = server.db.store().await;
    let handed_back = async || {
        let mut total = 0.0;
        for reason in ["no_place", "breaker"] {
            let series = format!(
                "herald_outbox_claims_handed_back_total{{kind=\"delivery\",reason=\"{reason}\"}}"
            );
            total += testkit::metric_value(&base, &series).await.unwrap_or(0.0);
        }
        total
    };

    // Its pace measured: one delivery answered after 300 ms.
    let first = runs_to(&server, &operator, "hooks", 1).await;
    wait_for("the first delivery", Duration::from_secs(15), async || {
        all_in(&store, &first, DeliveryStatus::Completed).await
    })
    .await;
    // Busy: one delivery held for 5 s (the destination is metered only while it
    // has attempts in flight), then the thirty in one commit.
    let runs = runs_routed(&server, &operator, "hooks", 30).await;
    receiver.set_hold(Duration::from_secs(5));
    let held = runs_to(&server, &operator, "hooks", 1).await;
    wait_for(
        "the held delivery to arrive",
        Duration::from_secs(15),
        async || receiver.arrivals().contains(&held[0]),
    )
    .await;
    receiver.set_hold(Duration::from_millis(300));
    let events = finish_in_one_commit(&server, &operator, "hooks", &runs).await;
    assert!(
        !all_in(&store, &held, DeliveryStatus::Completed).await,
        "the thirty were committed while the destination was busy"
    );

    wait_for(
        "every event to be delivered",
        Duration::from_secs(60),
        async || all_in(&store, &events, DeliveryStatus::Completed).await,
    )
    .await;
    assert_eq!(
        handed_back().await,
        0.0,
        "nothing was claimed only to be handed back"
    );
    for id in &events {
        let event = store.get_event(id).await.unwrap().unwrap();
        assert_eq!(event.attempts, 1, "{id}");
    }
    assert!(receiver.max_in_flight() <= 2, "the cap held");
    store.close().await;
    server.stop().await;
    receiver.stop();
}

async fn runs_to(server: &TestServer, token: &str, route: &str, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..count {
        let id = finish_routed_run(server, token, route, json!({"i": i})).await;
        ids.push(format!("deliver_{id}_{route}"));
    }
    ids
}
