//! A run approval's hops through SIGKILLs (issue 20, DESIGN §9), with the jobs
//! store and the approvals database apart: real `herald serve` processes are
//! killed at each point between the hops — the approval request committed, the
//! approval opened, the decision committed, the continuation applied — and a new
//! process finishes the work. Each hop has exactly one effect (one approval, one
//! continuation, each run move once); webhooks may repeat, always with one id.
//!
//! Kill points come from the test-only pause hooks of the two hop handlers
//! (`approvals::run_requests::TEST_PAUSE_ENV`, `jobs::continuations::TEST_PAUSE_ENV`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use herald::store::{Engine, SqlStore};
use reqwest::StatusCode;
use serde_json::json;
use testkit::run_approvals::{config_text, Producer, CALLBACK_SECRET, PROMPT_SECRET};
use testkit::{api_token, secret_ref, wait_for, HeraldProcess, Receiver, TestDb};
use vocab::Role;

const REQUEST_PAUSE: &str = herald::approvals::run_requests::TEST_PAUSE_ENV;
const CONTINUATION_PAUSE: &str = herald::jobs::continuations::TEST_PAUSE_ENV;

struct Scene {
    jobs_db: TestDb,
    approvals_db: TestDb,
    jobs: SqlStore,
    approvals: SqlStore,
    receiver: Receiver,
    config: tempfile::NamedTempFile,
    operator: String,
    admin: String,
    markers: tempfile::TempDir,
}

impl Scene {
    async fn new(jobs: Engine, approvals: Engine) -> Scene {
        Self::with_settings(jobs, approvals, "").await
    }

    /// The scene with `extra` settings (TOML lines) for every process.
    async fn with_settings(jobs: Engine, approvals: Engine, extra: &str) -> Scene {
        herald::channels::install_crypto_provider();
        let (jobs_db, approvals_db) = (TestDb::new(jobs).await, TestDb::new(approvals).await);
        let receiver = Receiver::start().await;
        receiver.verify_with("prompts", PROMPT_SECRET);
        receiver.verify_with("callbacks", CALLBACK_SECRET);
        // Leases of 2 s: a killed claim is taken again within the test's time.
        let text = format!(
            "lease_secs = 2\n{extra}callback_secret_ref = \"{}\"\napprovals_database_url = \"{}\"\n{}",
            secret_ref(CALLBACK_SECRET),
            approvals_db.url,
            config_text(&receiver, &secret_ref(PROMPT_SECRET))
        );
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(config.path(), text).unwrap();
        Scene {
            jobs: jobs_db.store().await,
            approvals: approvals_db.store().await,
            operator: api_token(&jobs_db.url, Role::Operator).await,
            admin: api_token(&jobs_db.url, Role::Admin).await,
            jobs_db,
            approvals_db,
            receiver,
            config,
            markers: tempfile::tempdir().unwrap(),
        }
    }

    /// A `herald serve` over both databases, paused at `pause` (hook, stage) if
    /// given; returns it, its producer and the marker its pause writes.
    async fn spawn(&self, pause: Option<(&str, &str)>) -> (HeraldProcess, Producer, PathBuf) {
        let marker = self
            .markers
            .path()
            .join(format!("{}", uuid::Uuid::new_v4().simple()));
        let hook = pause.map(|(_, stage)| format!("{stage}:{}", marker.display()));
        let env: Vec<(&str, &str)> = match (pause, &hook) {
            (Some((var, _)), Some(hook)) => vec![(var, hook.as_str())],
            _ => Vec::new(),
        };
        let mut herald = HeraldProcess::spawn_with_env(
            &self.jobs_db.url,
            &["--config", self.config.path().to_str().unwrap()],
            &env,
        );
        let base = herald.ready().await;
        (herald, Producer::new(&base, &self.operator), marker)
    }

    /// A running run paused for the `payout` approval: (run, approval id, the
    /// pausing transition's sequence).
    async fn paused_run(&self, producer: &Producer) -> (String, String, i64) {
        let run = producer
            .running_run("payout", &self.receiver.url_for("callbacks"), &[])
            .await;
        let (status, moved) = producer.ask_approval(&run, "payout").await;
        assert_eq!(status, StatusCode::OK, "{moved}");
        let approval = moved["run"]["approval_id"].as_str().unwrap().to_string();
        (
            run,
            approval,
            moved["run"]["transition_seq"].as_i64().unwrap(),
        )
    }

    /// Waits for `approval`'s prompt at the receiver, then approves it as the
    /// admin; returns the prompt's event id.
    async fn approve_once_prompted(&self, producer: &Producer, approval: &str) -> String {
        let prompt = format!("approval_{approval}");
        wait_for("the prompt", Duration::from_secs(30), async || {
            self.receiver.arrivals().contains(&prompt)
        })
        .await;
        let (status, decided) = producer.decide(&self.admin, approval, "approve").await;
        assert_eq!(status, StatusCode::OK, "{decided}");
        prompt
    }

    async fn count(&self, store: &SqlStore, sql: &str, bind: &str) -> i64 {
        sqlx::query_scalar(&store.engine().sql(sql))
            .bind(bind)
            .fetch_one(store.pool())
            .await
            .unwrap()
    }

    /// (status, transition_seq, approval_id) of `run` in the jobs store.
    async fn run(&self, run: &str) -> (String, i64, Option<String>) {
        let sql = self
            .jobs
            .engine()
            .sql("SELECT status, transition_seq, approval_id FROM runs WHERE id = ?");
        sqlx::query_as(&sql)
            .bind(run)
            .fetch_one(self.jobs.pool())
            .await
            .unwrap()
    }

    async fn event_status(&self, store: &SqlStore, event_id: &str) -> Option<String> {
        let sql = store
            .engine()
            .sql("SELECT status FROM outbox_events WHERE event_id = ?");
        sqlx::query_scalar(&sql)
            .bind(event_id)
            .fetch_optional(store.pool())
            .await
            .unwrap()
    }

    async fn finish(self) {
        self.receiver.stop();
        self.jobs.close().await;
        self.approvals.close().await;
        self.jobs_db.drop_db().await;
        self.approvals_db.drop_db().await;
    }
}

async fn reached(marker: &std::path::Path, what: &str) {
    wait_for(what, Duration::from_secs(30), async || marker.exists()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_jobs_and_postgres_approvals_survive_a_sigkill_between_every_hop() {
    every_hop_survives_a_sigkill(Engine::Sqlite, Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_jobs_and_mariadb_approvals_survive_a_sigkill_between_every_hop() {
    every_hop_survives_a_sigkill(Engine::Postgres, Engine::MySql).await;
}

async fn every_hop_survives_a_sigkill(jobs: Engine, approvals: Engine) {
    let scene = Scene::new(jobs, approvals).await;
    let one_approval = "SELECT COUNT(*) FROM approval_instances WHERE id = ?";

    // 1. The approval request committed; killed before the approval opens.
    let (herald, producer, marker) = scene.spawn(Some((REQUEST_PAUSE, "opening"))).await;
    let (run, approval, paused_seq) = scene.paused_run(&producer).await;
    reached(&marker, "the request's handler to claim it").await;
    herald.kill();
    assert_eq!(
        scene.run(&run).await,
        (
            "awaiting_approval".into(),
            paused_seq,
            Some(approval.clone())
        )
    );
    assert_eq!(
        scene.count(&scene.approvals, one_approval, &approval).await,
        0
    );

    // 2. The approval opened in the approvals database; killed before the
    //    request is acknowledged.
    let (herald, _, marker) = scene.spawn(Some((REQUEST_PAUSE, "opened"))).await;
    reached(&marker, "the approval to open").await;
    herald.kill();
    assert_eq!(
        scene.count(&scene.approvals, one_approval, &approval).await,
        1
    );
    let request = format!("approval_request_{approval}");
    assert_eq!(
        scene.event_status(&scene.jobs, &request).await.as_deref(),
        Some("processing"),
        "the request's acknowledgement died with the process"
    );

    // 3. The redelivered request finds the approval open and opens nothing; the
    //    decision commits; killed before the continuation moves the run.
    let (herald, producer, marker) = scene.spawn(Some((CONTINUATION_PAUSE, "continuing"))).await;
    wait_for(
        "the request acknowledged",
        Duration::from_secs(30),
        async || scene.event_status(&scene.jobs, &request).await.as_deref() == Some("completed"),
    )
    .await;
    let prompt = scene.approve_once_prompted(&producer, &approval).await;
    reached(&marker, "the continuation's handler to claim it").await;
    herald.kill();
    assert_eq!(scene.run(&run).await.0, "awaiting_approval");

    // 4. The continuation moved the run; killed before it is acknowledged.
    let (herald, _, marker) = scene.spawn(Some((CONTINUATION_PAUSE, "continued"))).await;
    reached(&marker, "the run to continue").await;
    herald.kill();
    assert_eq!(
        scene.run(&run).await,
        ("running".into(), paused_seq + 1, None)
    );

    // 5. A clean process: the redelivered continuation moves nothing again; the
    //    producer hears of the approval and finishes the run.
    let (herald, producer, _) = scene.spawn(None).await;
    let continuation = format!("continuation_{approval}");
    wait_for(
        "the continuation acknowledged",
        Duration::from_secs(30),
        async || {
            scene
                .event_status(&scene.approvals, &continuation)
                .await
                .as_deref()
                == Some("completed")
        },
    )
    .await;
    let approved = format!("callback_{run}_approved_{}", paused_seq + 1);
    wait_for("run.approved", Duration::from_secs(30), async || {
        scene.receiver.arrivals().contains(&approved)
    })
    .await;
    let (status, done) = producer
        .transition(&run, json!({"to": "succeeded", "result": {"ok": true}}))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let terminal = format!("callback_{run}_succeeded_{}", paused_seq + 2);
    wait_for(
        "the terminal callback",
        Duration::from_secs(30),
        async || scene.receiver.arrivals().contains(&terminal),
    )
    .await;
    herald.sigterm();

    // Each hop had one effect: one approval (one node, one work item), one
    // prompt, one decision, one continuation, one move of the run per hop.
    assert_eq!(
        scene.run(&run).await,
        ("succeeded".into(), paused_seq + 2, None)
    );
    for (table, column) in [
        ("approval_instances", "id"),
        ("approval_nodes", "instance_id"),
        ("approval_work_items", "instance_id"),
    ] {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE {column} = ?");
        assert_eq!(
            scene.count(&scene.approvals, &sql, &approval).await,
            1,
            "{table}"
        );
    }
    let by_parent = "SELECT COUNT(*) FROM outbox_events WHERE parent_id = ?";
    // The prompt and the continuation.
    assert_eq!(scene.count(&scene.approvals, by_parent, &approval).await, 2);
    // The request, run.approved and the terminal callback.
    assert_eq!(scene.count(&scene.jobs, by_parent, &run).await, 3);
    let arrived: HashSet<String> = scene.receiver.arrivals().into_iter().collect();
    assert_eq!(
        arrived,
        HashSet::from([prompt, approved, terminal]),
        "webhooks repeat only with their own ids"
    );
    assert!(
        scene
            .receiver
            .requests()
            .iter()
            .all(|a| a.verified == Some(true)),
        "every webhook verified"
    );
    scene.finish().await;
}

/// A jobs store that is out for longer than a continuation's attempts would
/// last: the hop waits the outage out (spending no attempt) instead of failing
/// and leaving the run awaiting an approval that was already decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_continuation_waits_out_a_jobs_store_outage_longer_than_its_attempts() {
    // Two attempts 100 ms apart (the scene's backoff): without waiting, the hop
    // would fail within a second.
    let scene = Scene::with_settings(Engine::Postgres, Engine::Sqlite, "max_attempts = 2\n").await;
    // One process holds the decided continuation (paused), a second one stands by.
    let (paused, producer, marker) = scene.spawn(Some((CONTINUATION_PAUSE, "continuing"))).await;
    let (run, approval, paused_seq) = scene.paused_run(&producer).await;
    scene.approve_once_prompted(&producer, &approval).await;
    reached(&marker, "the continuation's handler to claim it").await;
    let (standby, _, _) = scene.spawn(None).await;

    // The jobs store goes out; the paused claim dies, and the standby takes the
    // continuation once its lease expires.
    let outage = testkit::PostgresOutage::start(&scene.jobs_db.url).await;
    paused.kill();
    let continuation = format!("continuation_{approval}");
    let tried = async || -> Option<(String, String)> {
        let sql = "SELECT status, last_error FROM outbox_events WHERE event_id = ?";
        sqlx::query_as::<_, (String, Option<String>)>(sql)
            .bind(&continuation)
            .fetch_one(scene.approvals.pool())
            .await
            .ok()
            .and_then(|(status, error)| Some((status, error?)))
    };
    wait_for(
        "the standby to try the continuation against the jobs store",
        Duration::from_secs(30),
        async || tried().await.is_some_and(|(_, e)| e.contains("jobs store")),
    )
    .await;
    // Far past two attempts' worth of backoff, it still waits.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, _) = tried().await.unwrap();
    assert_ne!(status, "failed", "the hop must not fail during the outage");

    outage.end().await;
    let approved = format!("callback_{run}_approved_{}", paused_seq + 1);
    wait_for(
        "run.approved once the jobs store is back",
        Duration::from_secs(30),
        async || scene.receiver.arrivals().contains(&approved),
    )
    .await;
    standby.sigterm();
    let jobs = scene.jobs_db.store().await;
    let sql = "SELECT status FROM runs WHERE id = $1";
    let status: String = sqlx::query_scalar(sql)
        .bind(&run)
        .fetch_one(jobs.pool())
        .await
        .unwrap();
    assert_eq!(status, "running");
    jobs.close().await;
    scene.finish().await;
}
