//! Run approvals end to end over HTTP (issue 20, DESIGN §9), with the approvals
//! database apart from the jobs store: a run's move to `awaiting_approval` opens
//! its approval in the other database and prompts the approver (signed, verified
//! by the Standard Webhooks reference library); the decision continues the run in
//! the jobs store and tells the producer; the run's final result then has its own
//! callback identity. Each hop crosses databases as a durable event, never as a
//! cross-database transaction.

use std::time::Duration;

use herald::store::{Engine, SqlStore};
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::run_approvals::{config_text, Producer, CALLBACK_SECRET, PROMPT_SECRET};
use testkit::{api_token, api_token_named, secret_ref, wait_for, Receiver, TestDb, TestServer};
use vocab::Role;

struct Scene {
    server: TestServer,
    approvals_db: Option<TestDb>,
    receiver: Receiver,
    producer: Producer,
    admin: String,
    _config: tempfile::NamedTempFile,
}

impl Scene {
    /// A server on `jobs`, its approvals database on `approvals` (none: the same).
    async fn start(jobs: Engine, approvals: Option<Engine>) -> Scene {
        let receiver = Receiver::start().await;
        receiver.verify_with("prompts", PROMPT_SECRET);
        receiver.verify_with("callbacks", CALLBACK_SECRET);
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            config.path(),
            config_text(&receiver, &secret_ref(PROMPT_SECRET)),
        )
        .unwrap();
        let approvals_db = match approvals {
            Some(engine) => Some(TestDb::new(engine).await),
            None => None,
        };
        let approvals_url = approvals_db.as_ref().map(|db| db.url.clone());
        let path = config.path().to_path_buf();
        let server = TestServer::start_on(TestDb::new(jobs).await, move |args| {
            args.config = Some(path);
            args.callback_secret_ref = Some(secret_ref(CALLBACK_SECRET));
            args.approvals_database_url = approvals_url;
        })
        .await;
        let producer = Producer::new(
            &server.url(""),
            &api_token(&server.db.url, Role::Operator).await,
        );
        let admin = api_token(&server.db.url, Role::Admin).await;
        Scene {
            server,
            approvals_db,
            receiver,
            producer,
            admin,
            _config: config,
        }
    }

    fn callback_url(&self) -> String {
        self.receiver.url_for("callbacks")
    }

    /// The one arrival of `event_id` (waited for), checked as signed and verified.
    async fn arrival(&self, event_id: &str) -> Value {
        wait_for(event_id, Duration::from_secs(20), async || {
            self.receiver.arrivals().iter().any(|id| id == event_id)
        })
        .await;
        let arrivals: Vec<_> = self
            .receiver
            .requests()
            .into_iter()
            .filter(|a| a.event_id == event_id)
            .collect();
        assert_eq!(arrivals.len(), 1, "{event_id} arrived more than once");
        assert_eq!(
            arrivals[0].verified,
            Some(true),
            "{event_id} did not verify"
        );
        arrivals[0].body.clone()
    }

    async fn approvals_store(&self) -> SqlStore {
        match &self.approvals_db {
            Some(db) => db.store().await,
            None => self.server.db.store().await,
        }
    }

    /// Runs `awaiting_approval` on `payout` and returns (run id, approval id),
    /// with the prompt received and verified.
    async fn awaiting(&self, routes: &[&str]) -> (String, String) {
        let run = self
            .producer
            .running_run("payout", &self.callback_url(), routes)
            .await;
        let (status, moved) = self.producer.ask_approval(&run, "payout").await;
        assert_eq!(status, StatusCode::OK, "{moved}");
        let approval = moved["run"]["approval_id"].as_str().unwrap().to_string();
        assert_eq!(
            approval,
            format!("run-{run}-{}", moved["run"]["transition_seq"]),
            "the approval id is the run's and its transition's"
        );
        assert_eq!(moved["run"]["status"], "awaiting_approval");
        assert_eq!(
            moved["notifications"],
            json!([format!("approval_request_{approval}")])
        );
        let prompt = self.arrival(&format!("approval_{approval}")).await;
        assert_eq!(prompt["event"], "approval.requested");
        assert_eq!(prompt["target"], "run");
        assert_eq!(prompt["run_id"], run.as_str());
        assert_eq!(prompt["step"], "Finance");
        (run, approval)
    }

    async fn stop(self) {
        self.receiver.stop();
        self.server.stop().await;
        if let Some(db) = self.approvals_db {
            db.drop_db().await;
        }
    }
}

async fn count(store: &SqlStore, sql: &str, bind: &str) -> i64 {
    sqlx::query_scalar(&store.engine().sql(sql))
        .bind(bind)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_jobs_and_postgres_approvals_approve_then_finish() {
    approve_then_finish(Engine::Sqlite, Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_jobs_and_mariadb_approvals_approve_then_finish() {
    approve_then_finish(Engine::Postgres, Engine::MySql).await;
}

/// Approve: the prompt arrives, the producer cannot move the paused run, the
/// approver's decision continues it (`run.approved`, signed), and the final
/// result's callback has the post-approval identity.
async fn approve_then_finish(jobs: Engine, approvals: Engine) {
    let scene = Scene::start(jobs, Some(approvals)).await;
    let (run, approval) = scene.awaiting(&[]).await;

    let (status, refused) = scene
        .producer
        .transition(&run, json!({"to": "succeeded"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains(&approval), "{message}");

    // The approval lives in the approvals database, pending at its one step.
    let (status, detail) = scene.producer.approval(&scene.admin, &approval).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["status"], "pending");
    assert_eq!(detail["record_id"], run.as_str());
    let approvals_store = scene.approvals_store().await;
    let sql = "SELECT COUNT(*) FROM approval_instances WHERE id = ?";
    assert_eq!(count(&approvals_store, sql, &approval).await, 1);
    assert_eq!(
        count(&scene.server.db.store().await, sql, &approval).await,
        0
    );

    // Only the step's approver decides.
    let (status, refused) = scene
        .producer
        .decide(&scene.producer.token, &approval, "approve")
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("decided by role admin"),
        "{refused}"
    );
    let (status, decided) = scene
        .producer
        .decide(&scene.admin, &approval, "approve")
        .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["status"], "approved");
    assert_eq!(
        decided["committed_events"],
        json!([format!("continuation_{approval}")])
    );

    wait_for("the run continued", Duration::from_secs(20), async || {
        scene.producer.run(&run).await["status"] == "running"
    })
    .await;
    let continued = scene.producer.run(&run).await;
    assert!(continued.get("approval_id").is_none(), "{continued}");
    let seq = continued["transition_seq"].as_i64().unwrap();
    let approved = scene
        .arrival(&format!("callback_{run}_approved_{seq}"))
        .await;
    assert_eq!(approved["event"], "run.approved");
    assert_eq!(approved["approval_id"], approval.as_str());
    assert_eq!(approved["decided_by"], "token:admin");

    let (status, finished) = scene
        .producer
        .transition(&run, json!({"to": "succeeded", "result": {"paid": 3}}))
        .await;
    assert_eq!(status, StatusCode::OK, "{finished}");
    let final_seq = finished["run"]["transition_seq"].as_i64().unwrap();
    assert!(final_seq > seq);
    let terminal = scene
        .arrival(&format!("callback_{run}_succeeded_{final_seq}"))
        .await;
    assert_eq!(terminal["event"], "run.finished");
    assert_eq!(terminal["result"], json!({"paid": 3}));

    // Each hop's event completed once, in its own store.
    let jobs_store = scene.server.db.store().await;
    let completed =
        "SELECT COUNT(*) FROM outbox_events WHERE event_id = ? AND status = 'completed'";
    wait_for(
        "the hops acknowledged",
        Duration::from_secs(20),
        async || {
            count(
                &jobs_store,
                completed,
                &format!("approval_request_{approval}"),
            )
            .await
                == 1
                && count(
                    &approvals_store,
                    completed,
                    &format!("continuation_{approval}"),
                )
                .await
                    == 1
        },
    )
    .await;
    scene.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_jobs_and_postgres_approvals_reject_and_recall() {
    reject_and_recall(Engine::Sqlite, Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_jobs_and_mariadb_approvals_reject_and_recall() {
    reject_and_recall(Engine::Postgres, Engine::MySql).await;
}

/// Reject cancels the run with every terminal notification it owes (callback and
/// route); a recall by the producer moves its run back to `running`, and one by
/// another producer is refused.
async fn reject_and_recall(jobs: Engine, approvals: Engine) {
    let scene = Scene::start(jobs, Some(approvals)).await;
    let (run, approval) = scene.awaiting(&["results"]).await;
    let (status, rejected) = scene
        .producer
        .decide(&scene.admin, &approval, "reject")
        .await;
    assert_eq!(status, StatusCode::OK, "{rejected}");
    wait_for("the run cancelled", Duration::from_secs(20), async || {
        scene.producer.run(&run).await["status"] == "cancelled"
    })
    .await;
    let seq = scene.producer.run(&run).await["transition_seq"].clone();
    let terminal = scene
        .arrival(&format!("callback_{run}_cancelled_{seq}"))
        .await;
    assert_eq!(terminal["status"], "cancelled");
    wait_for("the route delivery", Duration::from_secs(20), async || {
        scene
            .receiver
            .requests()
            .iter()
            .any(|a| a.event_id == format!("deliver_{run}_results") && a.path == "/results")
    })
    .await;
    // A decided approval takes no second decision.
    let (status, again) = scene
        .producer
        .decide(&scene.admin, &approval, "approve")
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");

    let (run, approval) = scene.awaiting(&[]).await;
    let other = Producer::new(
        &scene.server.url(""),
        &api_token_named(&scene.server.db.url, "another-producer", Role::Operator).await,
    );
    let (status, refused) = other.decide(&other.token, &approval, "recall").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let (status, recalled) = scene
        .producer
        .decide(&scene.producer.token, &approval, "recall")
        .await;
    assert_eq!(status, StatusCode::OK, "{recalled}");
    assert_eq!(recalled["status"], "removed");
    wait_for(
        "the run back to running",
        Duration::from_secs(20),
        async || scene.producer.run(&run).await["status"] == "running",
    )
    .await;
    let seq = scene.producer.run(&run).await["transition_seq"].clone();
    let told = scene
        .arrival(&format!("callback_{run}_approval_recalled_{seq}"))
        .await;
    assert_eq!(told["event"], "run.approval_recalled");
    // Back to running, the producer moves it again.
    let (status, done) = scene
        .producer
        .transition(&run, json!({"to": "succeeded"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    scene.stop().await;
}

/// Bad input is answered with a message that names what is wrong, and changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_run_approval_requests_are_refused_with_messages() {
    let scene = Scene::start(Engine::Sqlite, None).await;
    let producer = &scene.producer;
    let run = producer
        .running_run("payout", &scene.callback_url(), &[])
        .await;

    let cases = [
        (
            json!({"to": "awaiting_approval", "approval": {"definition_id": "deal"}}),
            StatusCode::BAD_REQUEST,
            "approves Opportunity records, not runs",
        ),
        (
            json!({"to": "awaiting_approval", "approval": {"definition_id": "nope"}}),
            StatusCode::BAD_REQUEST,
            "no approval definition is named",
        ),
        (
            json!({"to": "succeeded", "approval": {"definition_id": "payout"}}),
            StatusCode::BAD_REQUEST,
            "only a move to awaiting_approval asks for an approval",
        ),
        (
            json!({"to": "awaiting_approval", "approval": {"definition": "payout"}}),
            StatusCode::BAD_REQUEST,
            "unknown field `definition`, expected `definition_id`",
        ),
    ];
    for (body, want, says) in cases {
        let (status, answer) = producer.transition(&run, body.clone()).await;
        assert_eq!(status, want, "{body}: {answer}");
        let text = answer.to_string();
        assert!(text.contains(says), "{body}: {answer}");
    }
    assert_eq!(producer.run(&run).await["status"], "running");

    // A run of a type the definition does not approve.
    let etl = producer
        .running_run("etl", &scene.callback_url(), &[])
        .await;
    let (status, answer) = producer.ask_approval(&etl, "payout").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("runs of type payout, not etl"),
        "{answer}"
    );

    // A run that is not running.
    let (status, queued) = producer
        .call(
            &producer.token,
            "/api/v1/runs",
            Some(json!({"type": "payout", "tenant": "acme"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, answer) = producer
        .ask_approval(queued["id"].as_str().unwrap(), "payout")
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("only a running run can ask for approval"),
        "{answer}"
    );

    // A run definition submitted for a record; a run definition with a field update.
    let (status, answer) = producer
        .call(
            &producer.token,
            "/api/v1/approvals",
            Some(json!({"definition_id": "payout", "record_id": "r1"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("approves runs, not records"),
        "{answer}"
    );
    let (status, answer) = producer
        .call(
            &scene.admin,
            "/api/v1/approval-definitions",
            Some(json!({"id": "bad", "target": "run", "steps": [{"name": "s", "approver": {"role": "admin"}}],
                "actions": {"approve": [{"type": "FieldUpdate", "id": "f", "field_path": "Status", "value": 1}]}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["field"], "actions", "{answer}");

    // Asking twice is a repeat: the same approval, nothing more owed.
    let (status, first) = producer.ask_approval(&run, "payout").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, again) = producer.ask_approval(&run, "payout").await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["replayed"], true);
    assert_eq!(again["run"]["approval_id"], first["run"]["approval_id"]);
    assert_eq!(again["notifications"], json!([]));
    scene.stop().await;
}
