//! Several real `herald serve` nodes sharing one store, with real faults: a
//! SIGKILLed Herald node, a PostgreSQL database that stops accepting connections,
//! a node whose clock is ten minutes off, and a 3-node MariaDB Galera cluster
//! (`scripts/galera-cluster`) losing one database node, then a Herald node, then
//! its quorum.
//!
//! CI runs a short load; `HERALD_MULTI_NODE_FULL=1` runs the full size (10,000
//! transitions on PostgreSQL, about as many on Galera). Under `CI=true` the Galera test
//! fails when the cluster cannot start; elsewhere it skips with a message.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use herald::store::{Engine, SqlStore, StoreOptions};
use testkit::callback;
use testkit::cluster::{
    attempts_by_worker, count, drive, events, holder_is, overlapping_attempts, readiness,
    replay_targets, Acknowledged, Answer, Api, EventRow, Galera, Node, APPROVALS_CONFIG,
    CALLBACK_SECRET,
};
use testkit::{api_token, enqueue, lines_with, wait_for, Receiver, TestDb};
use vocab::Role;

fn full_size() -> bool {
    std::env::var("HERALD_MULTI_NODE_FULL").is_ok_and(|v| v == "1")
}

/// Each event's claims that never reached the attempt log: attempts whose result
/// was lost (the node died, or lost its database, after sending and before
/// settling). Only these may show up as duplicates at the receiver.
async fn lost_acks(pool: &sqlx::AnyPool) -> HashMap<String, i64> {
    use herald::store::row::{int, text};
    sqlx::query(
        "SELECT e.event_id AS event_id, e.attempts - COUNT(a.attempt) AS lost \
         FROM outbox_events e LEFT JOIN outbox_attempts a ON a.event_id = e.event_id \
         GROUP BY e.event_id, e.attempts HAVING e.attempts > COUNT(a.attempt)",
    )
    .fetch_all(pool)
    .await
    .expect("read the attempt log")
    .iter()
    .map(|r| (text(r, "event_id").unwrap(), int(r, "lost").unwrap()))
    .collect()
}

/// What every multi-node scene must end with: each acknowledged run's callback
/// completed and received, no event held by two nodes at once, and every duplicate
/// at the receiver explained by a lost acknowledgement. Returns the duplicates.
async fn check_delivered(
    pool: &sqlx::AnyPool,
    acked: &Acknowledged,
    receiver: &Receiver,
) -> Vec<(String, usize)> {
    let rows = events(pool).await;
    let unsettled: Vec<&EventRow> = rows.iter().filter(|r| r.status != "completed").collect();
    assert!(unsettled.is_empty(), "events not completed: {unsettled:?}");
    let callbacks: HashMap<&str, &str> = rows
        .iter()
        .filter(|r| r.kind == "callback")
        .map(|r| (r.parent_id.as_str(), r.event_id.as_str()))
        .collect();
    let seen = receiver.arrivals_per_event();
    let forged: Vec<String> = receiver
        .requests()
        .into_iter()
        .filter(|a| a.verified != Some(true))
        .map(|a| a.event_id)
        .collect();
    assert!(
        forged.is_empty(),
        "not verified with the nodes' secret: {forged:?}"
    );
    for run in &acked.runs {
        let event = callbacks
            .get(run.as_str())
            .unwrap_or_else(|| panic!("acknowledged run {run} has no callback event"));
        assert!(seen.contains_key(*event), "{event} was never delivered");
    }
    for row in rows.iter().filter(|r| r.kind == "callback") {
        assert!(
            seen.contains_key(&row.event_id),
            "{} never arrived",
            row.event_id
        );
    }
    let overlaps = overlapping_attempts(pool).await;
    assert!(
        overlaps.is_empty(),
        "held by two nodes at once: {overlaps:?}"
    );
    let lost = lost_acks(pool).await;
    let duplicates: Vec<(String, usize)> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, n)| (id.clone(), *n))
        .collect();
    for (id, n) in &duplicates {
        let lost = lost.get(id).copied().unwrap_or(0);
        assert!(
            (*n as i64) <= 1 + lost,
            "{id} arrived {n} times but only {lost} of its attempts lost their result"
        );
    }
    duplicates
}

/// Events a dead node (process `pid`) held under a lease when it died.
fn held_by(rows: &[EventRow], pid: u32) -> HashSet<String> {
    rows.iter()
        .filter(|r| {
            r.status == "processing" && r.lease_holder.as_deref().is_some_and(|h| holder_is(h, pid))
        })
        .map(|r| r.event_id.clone())
        .collect()
}

/// A send timeout longer than all the bounded waits that run while a scene below
/// keeps the receiver's gate closed: held sends stay in flight instead of timing
/// out and going again.
const PATIENT_SENDS: (&str, &str) = ("HERALD_HTTP_TIMEOUT_MS", "300000");

/// SIGKILLs `node` once it provably holds work: with `receiver` paused, waits
/// (bounded) until a send leased to the node is held unanswered at the gate, kills
/// it, and resumes the receiver. Returns the events the node held when it died (no
/// one takes those over before their leases end).
async fn kill_holding_a_send(
    node: Node,
    receiver: &Receiver,
    pool: &sqlx::AnyPool,
) -> HashSet<String> {
    wait_for(
        "the node to have a send held at the receiver",
        Duration::from_secs(30),
        async || {
            let in_flight = receiver.held_at_gate();
            held_by(&events(pool).await, node.pid)
                .iter()
                .any(|id| in_flight.contains(id))
        },
    )
    .await;
    let pid = node.pid;
    node.process.kill();
    let held = held_by(&events(pool).await, pid);
    receiver.resume();
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_on_one_postgres_deliver_every_event_through_a_node_sigkill() {
    let runs = if full_size() { 5_000 } else { 1_000 };
    let db = TestDb::new(Engine::Postgres).await;
    let store = db.store().await;
    let token = api_token(&db.url, Role::Operator).await;
    let receiver = Receiver::start().await;
    receiver.verify_with("hook", CALLBACK_SECRET);
    // Each delivery takes a moment, so a killed node dies with sends in flight.
    receiver.set_hold(Duration::from_millis(40));
    // Claims of 16 (the destination's in-flight cap), so every node has a share of
    // the one destination's work.
    let settings = [("HERALD_WORKER_BATCH_SIZE", "16"), PATIENT_SENDS];
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Node::start(&db.url, None, "3", &settings).await);
    }
    let api = Api::new(nodes.iter().map(|n| n.base.clone()).collect(), token);
    let started = Instant::now();
    let load = tokio::spawn(drive(api, runs, 0, 24, receiver.url()));

    wait_for(
        "a third of the callbacks",
        Duration::from_secs(180),
        async || receiver.arrivals().len() >= runs / 3,
    )
    .await;
    // Arrange the kill to land with the victim holding work: the receiver holds
    // every request at its gate, so a send the victim has in flight stays in
    // flight (claimed, unsettled) until the kill.
    receiver.pause();
    let held = kill_holding_a_send(nodes.remove(1), &receiver, store.pool()).await;
    assert!(
        !held.is_empty(),
        "the kill landed with the node holding work"
    );

    let acked = load.await.unwrap();
    assert!(acked.abandoned.is_empty(), "{:?}", acked.abandoned);
    assert_eq!(acked.runs.len(), runs, "every lifecycle acknowledged");
    wait_for(
        "every event completed",
        Duration::from_secs(180),
        async || {
            count(
                store.pool(),
                "SELECT COUNT(*) AS n FROM outbox_events WHERE status <> 'completed'",
            )
            .await
                == 0
        },
    )
    .await;
    let elapsed = started.elapsed();
    let duplicates = check_delivered(store.pool(), &acked, &receiver).await;
    for (id, _) in &duplicates {
        assert!(
            held.contains(id),
            "{id} was duplicated without the killed node holding it"
        );
    }
    let by_worker = attempts_by_worker(store.pool()).await;
    assert!(
        nodes
            .iter()
            .all(|n| by_worker.iter().any(|(w, c)| n.holds(w) && *c > 0)),
        "both survivors delivered: {by_worker:?}"
    );
    eprintln!(
        "3 nodes on PostgreSQL: {} transitions, {} callbacks in {elapsed:?}; the killed node held {} events, {} arrived twice",
        runs * 2,
        acked.runs.len(),
        held.len(),
        duplicates.len()
    );
    drop(nodes);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

/// Whether `/readyz` answers 503 because the workers found the store out (not just
/// because its own query failed first).
async fn reports_outage(base: &str) -> bool {
    let (status, body) = readiness(base).await;
    status == 503
        && body["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("store unavailable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_outage_is_backed_off_logged_once_and_reported_until_it_ends() {
    let db = TestDb::new(Engine::Postgres).await;
    let store = db.store().await;
    let token = api_token(&db.url, Role::Operator).await;
    let receiver = Receiver::start().await;
    // The node reaches PostgreSQL through a proxy that counts its connection
    // attempts: what backing off means, whatever the log says.
    let postgres = url::Url::parse(&db.url).unwrap();
    let upstream = tokio::net::lookup_host((
        postgres.host_str().unwrap(),
        postgres.port().unwrap_or(5432),
    ))
    .await
    .unwrap()
    .next()
    .unwrap();
    let proxy = testkit::tcp_proxy::CountingProxy::start(upstream).await;
    let node = Node::start(&proxy.url_through(&db.url), None, "3", &[]).await;
    let ready = readiness(&node.base).await;
    assert_eq!(ready.0, 200, "{ready:?}");

    // Callbacks that come due while the database is out: enqueued just before it
    // goes, due a few seconds later.
    let owed: Vec<_> = (0..20)
        .map(|i| {
            let mut event = callback(&format!("outage-{i:02}"), &receiver.url());
            event.delay_ms = 4_000;
            event
        })
        .collect();
    enqueue(&store, &owed).await;
    let postgres_outage = testkit::PostgresOutage::start(&db.url).await;
    assert_eq!(receiver.count(), 0, "none came due before the outage");
    let outage = Instant::now();
    let warns_before = lines_with(&node.process.log, "WARN").len();
    let connections_before = proxy.connections();

    wait_for(
        "/readyz to report the store outage",
        Duration::from_secs(15),
        async || reports_outage(&node.base).await,
    )
    .await;
    let (_, body) = readiness(&node.base).await;
    assert!(
        body["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("store unavailable"),
        "{body}"
    );
    assert!(
        ["refusing", "unreachable"].contains(&body["store"].as_str().unwrap_or_default()),
        "{body}"
    );
    let metrics = testkit::cluster::metrics_of(&node.base).await;
    assert!(
        metrics.contains(r#"herald_outbox_available{source="jobs"} 0"#),
        "{metrics}"
    );
    let refused = reqwest::Client::new()
        .post(format!("{}/api/v1/runs", node.base))
        .bearer_auth(&token)
        .json(&serde_json::json!({"type": "etl", "tenant": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    let message = refused.text().await.unwrap();
    assert!(message.contains("the store is unavailable"), "{message}");

    // A few seconds of outage: the workers retry with backoff, and say so once.
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(outage.elapsed())).await;
    // Every loop on the store (workers, maintenance and its tidying, the breaker
    // sync) backs off from 100 ms towards 5 s: about seven attempts each in 6 s,
    // some 45 in all (measured 43). One loop retrying every 50 ms would make 120
    // alone; before the breaker sync and the tidying backed off, 74 were made.
    let attempts = proxy.connections() - connections_before;
    eprintln!("{attempts} connection attempts in 6 s of outage");
    assert!(
        attempts <= 60,
        "{attempts} connection attempts in 6 s of outage: not backed off"
    );
    let unavailable = lines_with(&node.process.log, "store unavailable");
    assert_eq!(unavailable.len(), 1, "{unavailable:?}");
    assert!(
        unavailable[0].contains("WARN") && unavailable[0].contains("class"),
        "{unavailable:?}"
    );
    let warns = lines_with(&node.process.log, "WARN");
    assert!(
        warns.len() - warns_before <= 6,
        "{} WARN lines in 6 s of outage: {:?}",
        warns.len() - warns_before,
        &warns[warns_before..]
    );

    postgres_outage.end().await;
    wait_for(
        "/readyz to say ready again",
        Duration::from_secs(20),
        async || readiness(&node.base).await.0 == 200,
    )
    .await;
    let back = lines_with(&node.process.log, "store back");
    assert_eq!(back.len(), 1, "{back:?}");
    assert!(
        back[0].contains("INFO") && back[0].contains("out_for_ms"),
        "{back:?}"
    );
    let store = db.store().await;
    wait_for(
        "every owed callback delivered",
        Duration::from_secs(30),
        async || testkit::all_completed(&store, "crash-test").await,
    )
    .await;
    let seen = receiver.arrivals_per_event();
    for event in &owed {
        assert_eq!(seen.get(&event.event_id), Some(&1), "{}", event.event_id);
    }
    let metrics = testkit::cluster::metrics_of(&node.base).await;
    assert!(
        metrics.contains(r#"herald_outbox_available{source="jobs"} 1"#),
        "{metrics}"
    );
    drop(node);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

/// One node holds every event under a live lease (its handlers outlast the lease;
/// its heartbeat renews it); a second node, its clock `skew_ms` off, joins and
/// must not take any of them. Then both share new work, each exactly once.
async fn a_skewed_node_never_steals_a_live_lease(skew_ms: i64) {
    let db = TestDb::new(Engine::Postgres).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    // The honest node's 8 sends stay in flight (leases live, renewed by its
    // heartbeat) for as long as the skewed node is given to steal them.
    receiver.pause();
    let held: Vec<_> = (0..8)
        .map(|i| callback(&format!("held-{i}"), &receiver.url()))
        .collect();
    enqueue(&store, &held).await;
    // Claims of 16 (the destination's in-flight cap): a node at the cap leaves the
    // destination's other events to the other node, so both share the work below
    // (one default-sized claim could take all 200 at once).
    let small_claims = ("HERALD_WORKER_BATCH_SIZE", "16");
    // Eight places: while its 8 sends are held it claims nothing else, so the
    // canaries below can only go to the skewed node.
    let honest = Node::start(
        &db.url,
        None,
        "2",
        &[
            small_claims,
            PATIENT_SENDS,
            ("HERALD_WORKER_CONCURRENCY", "8"),
        ],
    )
    .await;
    wait_for(
        "the honest node to be sending all 8",
        Duration::from_secs(30),
        async || receiver.held_at_gate().len() >= 8,
    )
    .await;
    let skew = skew_ms.to_string();
    let skewed = Node::start(
        &db.url,
        None,
        "2",
        &[
            small_claims,
            PATIENT_SENDS,
            (herald::clock::TEST_SKEW_ENV, &skew),
        ],
    )
    .await;
    // Proof that the skewed node has been claiming while the 8 leases were live:
    // it delivers these (each claim it makes would also take an expired-looking
    // lease, were its clock trusted).
    let canary_receiver = Receiver::start().await;
    let canaries: Vec<_> = (0..32)
        .map(|i| callback(&format!("canary-{i:02}"), &canary_receiver.url()))
        .collect();
    enqueue(&store, &canaries).await;
    wait_for(
        "the skewed node to claim and deliver canaries",
        Duration::from_secs(60),
        async || {
            attempts_by_worker(store.pool())
                .await
                .iter()
                .any(|(w, n)| skewed.holds(w) && *n > 0)
        },
    )
    .await;
    // Each of the 8 sent once, and still held: no lease was taken over meanwhile.
    let sent = receiver.arrivals_per_event();
    assert!(
        sent.len() == 8 && sent.values().all(|n| *n == 1),
        "a live lease was stolen: {sent:?}"
    );
    assert_eq!(receiver.held_at_gate().len(), 8, "the 8 still held");
    receiver.resume();
    wait_for(
        "the held events to complete",
        Duration::from_secs(30),
        async || testkit::all_completed(&store, "crash-test").await,
    )
    .await;
    let seen = receiver.arrivals_per_event();
    assert_eq!(seen.len(), 8);
    assert!(
        seen.values().all(|n| *n == 1),
        "a live lease was stolen: {seen:?}"
    );

    // Shared work: both nodes claim, every event once.
    receiver.set_hold(Duration::from_millis(10));
    let shared: Vec<_> = (0..200)
        .map(|i| callback(&format!("shared-{i:03}"), &receiver.url()))
        .collect();
    enqueue(&store, &shared).await;
    wait_for(
        "the shared events to complete",
        Duration::from_secs(60),
        async || testkit::all_completed(&store, "crash-test").await,
    )
    .await;
    let seen = receiver.arrivals_per_event();
    assert_eq!(seen.len(), 208);
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    let by_worker = attempts_by_worker(store.pool()).await;
    let skewed_attempts: i64 = by_worker
        .iter()
        .filter(|(w, _)| skewed.holds(w))
        .map(|(_, n)| n)
        .sum();
    assert!(
        skewed_attempts > 0,
        "the skewed node did work: {by_worker:?}"
    );
    assert!(by_worker.iter().any(|(w, _)| honest.holds(w)));
    // The skew really was in effect: the skewed node's attempt log is off by it.
    let pid = skewed.pid;
    let offset = count(
        store.pool(),
        &format!(
            "SELECT CAST(AVG(started_at) - {} AS BIGINT) AS n FROM outbox_attempts WHERE worker LIKE '%:{pid}:%'",
            herald::clock::local_now_ms()
        ),
    )
    .await;
    assert!(
        (offset - skew_ms).abs() < 60_000,
        "attempts stamped {offset} ms from now, expected about {skew_ms}"
    );
    drop((honest, skewed));
    receiver.stop();
    canary_receiver.stop();
    store.close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_ten_minutes_fast_never_steals_a_live_lease() {
    a_skewed_node_never_steals_a_live_lease(600_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_ten_minutes_slow_never_steals_a_live_lease() {
    a_skewed_node_never_steals_a_live_lease(-600_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_on_galera_survive_a_database_kill_a_node_kill_and_a_quorum_loss() {
    let Some(galera) = Galera::ensure() else {
        return;
    };
    herald::channels::install_crypto_provider();
    let (runs, recalls) = if full_size() { (4_900, 100) } else { (120, 12) };
    let name = galera.create_database().await;
    let urls: Vec<String> = (1..=3).map(|n| Galera::url(n, &name)).collect();
    // Migrations run once, before the nodes start (MariaDB's migration lock is not
    // replicated, so nodes on different Galera nodes must not migrate at once).
    let store = SqlStore::open(&StoreOptions {
        url: urls[0].clone(),
        max_connections: 4,
    })
    .await
    .expect("migrate on Galera node 1");
    let token = api_token(&urls[0], Role::Operator).await;
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), APPROVALS_CONFIG).unwrap();
    let receiver = Receiver::start().await;
    receiver.verify_with("hook", CALLBACK_SECRET);
    receiver.set_hold(Duration::from_millis(40));
    let settings = [PATIENT_SENDS];
    let mut nodes = Vec::new();
    for url in &urls {
        nodes.push(Some(
            Node::start(url, Some(config.path()), "3", &settings).await,
        ));
    }
    let bases: Vec<String> = nodes.iter().flatten().map(|n| n.base.clone()).collect();
    let api = Api::new(bases.clone(), token.clone());
    // Every session on a Galera node reads causally (Engine::synchronous_cluster_setup).
    assert_eq!(
        count(
            store.pool(),
            "SELECT CAST(@@SESSION.wsrep_sync_wait AS SIGNED) AS n"
        )
        .await,
        1,
        "Herald's sessions on Galera wait for causality"
    );
    // A run created through one node is there for the very next request on
    // another, as a producer behind a load balancer expects: eight producers at
    // once, so the nodes are busy applying each other's writes.
    let producers: Vec<_> = (0..8)
        .map(|p| {
            let (api, url) = (api.clone(), receiver.url());
            tokio::spawn(async move {
                for i in (p * 15)..(p * 15 + 15) {
                    let created = api
                        .post(
                            i,
                            "/api/v1/runs",
                            &serde_json::json!({"type": "load", "tenant": "nodes", "callback_url": url}),
                        )
                        .await;
                    let Answer::Ok(run) = created else {
                        panic!("create {i}: {created:?}");
                    };
                    let moved = api
                        .post(
                            i + 1,
                            &format!("/api/v1/runs/{}/transitions", run["id"].as_str().unwrap()),
                            &serde_json::json!({"to": "running"}),
                        )
                        .await;
                    assert!(
                        matches!(moved, Answer::Ok(_)),
                        "a run created on node {} was not found on node {}: {moved:?}",
                        i % 3 + 1,
                        (i + 1) % 3 + 1
                    );
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.expect("a producer failed");
    }
    let load = tokio::spawn(drive(api.clone(), runs, recalls, 12, receiver.url()));

    // Database node 3 dies mid-run; Herald node 3 loses its store.
    wait_for(
        "a quarter of the callbacks",
        Duration::from_secs(180),
        async || receiver.arrivals().len() >= runs / 4,
    )
    .await;
    // From here sends are held at the receiver's gate (the load goes on), so Herald
    // node 2 is still holding one in flight when it is killed, however fast the
    // load went.
    receiver.pause();
    galera.kill(3);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Then Herald node 2 dies.
    kill_holding_a_send(nodes[1].take().unwrap(), &receiver, store.pool()).await;

    let acked = load.await.unwrap();
    // A request cut off by a kill may have committed; its retry elsewhere is then
    // refused as a repeat (409). Nothing else may fail.
    assert!(
        acked
            .abandoned
            .iter()
            .all(|why| why.contains("refused 409")),
        "{:?}",
        acked.abandoned
    );
    assert!(acked.runs.len() + acked.replays.len() + acked.abandoned.len() == runs + recalls);
    galera.restart(3);
    let pool = store.pool();
    wait_for(
        "every event completed",
        Duration::from_secs(180),
        async || {
            count(
                pool,
                "SELECT COUNT(*) AS n FROM outbox_events WHERE status <> 'completed'",
            )
            .await
                == 0
        },
    )
    .await;
    let duplicates = check_delivered(pool, &acked, &receiver).await;
    let rows = events(pool).await;
    let replays: Vec<EventRow> = rows
        .iter()
        .filter(|r| r.kind == "field_update")
        .cloned()
        .collect();
    for id in &acked.replays {
        assert!(
            replays.iter().any(|r| &r.event_id == id),
            "acknowledged recall {id} owes no replay"
        );
    }
    for (record, status, version) in replay_targets(&store, &replays).await {
        assert_eq!(status, "Prospect", "{record}");
        assert_eq!(version, 2, "{record} was written exactly once");
    }
    eprintln!(
        "3 nodes on Galera: {} runs, {} replays acknowledged; {} duplicates, all from lost acknowledgements",
        acked.runs.len(),
        acked.replays.len(),
        duplicates.len()
    );

    // Quorum loss: two database nodes down. Herald node 1 (on database node 1,
    // now outside any primary component) refuses work, clearly, and says so once.
    let survivor = nodes[0].as_ref().unwrap();
    let log = survivor.process.log.clone();
    let unavailable_before = lines_with(&log, "store unavailable").len();
    let back_before = lines_with(&log, "store back").len();
    let warns_before = lines_with(&log, "WARN").len();
    galera.kill(2);
    galera.kill(3);
    // The node first fails its causal reads with a lock wait (1205), then knows
    // it is outside the primary component (1047): the request below is made
    // once /readyz says so, or it could meet the first.
    wait_for(
        "/readyz to report the quorum loss",
        Duration::from_secs(30),
        async || {
            reports_outage(&survivor.base).await
                && readiness(&survivor.base).await.1["store"] == "no_quorum"
        },
    )
    .await;
    let quorum_lost = Instant::now();
    let refused = reqwest::Client::new()
        .post(format!("{}/api/v1/runs", survivor.base))
        .bearer_auth(&token)
        .json(&serde_json::json!({"type": "etl", "tenant": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    let message = refused.text().await.unwrap();
    assert!(message.contains("1047"), "{message}");
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(quorum_lost.elapsed())).await;
    let (_, body) = readiness(&survivor.base).await;
    assert_eq!(body["store"], "no_quorum", "{body}");
    assert_eq!(
        lines_with(&log, "store unavailable").len() - unavailable_before,
        1,
        "one line for the whole outage"
    );
    let warns = lines_with(&log, "WARN");
    assert!(
        warns.len() - warns_before <= 8,
        "{:?}",
        &warns[warns_before..]
    );
    assert!(testkit::cluster::metrics_of(&survivor.base)
        .await
        .contains(r#"herald_outbox_available{source="jobs"} 0"#));

    galera.bootstrap(1);
    galera.restart(2);
    galera.restart(3);
    wait_for(
        "/readyz to say ready again",
        Duration::from_secs(30),
        async || readiness(&survivor.base).await.0 == 200,
    )
    .await;
    assert!(
        lines_with(&log, "store back").len() > back_before,
        "store back is logged"
    );
    // It resumes: new work through the surviving Herald nodes is delivered.
    let after = drive(api, 20, 0, 4, receiver.url()).await;
    assert!(after.abandoned.is_empty(), "{:?}", after.abandoned);
    wait_for(
        "the new events completed",
        Duration::from_secs(60),
        async || {
            count(
                pool,
                "SELECT COUNT(*) AS n FROM outbox_events WHERE status <> 'completed'",
            )
            .await
                == 0
        },
    )
    .await;
    check_delivered(pool, &after, &receiver).await;

    drop(nodes);
    galera.heal();
    receiver.stop();
    store.close().await;
    galera.drop_database(&name).await;
}

/// A node on PostgreSQL is woken by another node's commit (its NOTIFY), not by
/// its poll: with a poll of a minute, an event committed without the notice waits,
/// and one committed with it goes at once, taking the waiting one along.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_is_woken_by_another_node_s_commit_not_by_its_poll() {
    let db = TestDb::new(Engine::Postgres).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    // Work waiting at start-up: its delivery shows the node's first pass is done.
    enqueue(&store, &[callback("warm-up", &receiver.url())]).await;
    let node = Node::start(
        &db.url,
        None,
        "3",
        &[("HERALD_WORKER_POLL_INTERVAL_MS", "60000")],
    )
    .await;
    wait_for("the start-up pass", Duration::from_secs(30), async || {
        receiver.arrivals().len() == 1
    })
    .await;
    // (The pass that found work looks again at once and finds none: then it idles
    // until woken or a minute passes.)
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Committed as another node's producer would, without its notice: it waits.
    enqueue(&store, &[callback("unannounced", &receiver.url())]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        receiver.arrivals(),
        vec!["warm-up".to_string()],
        "the precondition: no poll came within 3 s"
    );

    // The next commit is followed by the peer notice, as every node sends it.
    enqueue(&store, &[callback("announced", &receiver.url())]).await;
    assert!(
        herald::store::ports::OutboxStore::notify_peers(&store)
            .await
            .unwrap(),
        "PostgreSQL has a notice"
    );
    // Within 20 s, a third of its poll: only the notice can have woken it.
    wait_for("both delivered", Duration::from_secs(20), async || {
        receiver.arrivals().len() == 3
    })
    .await;
    drop(node);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}
