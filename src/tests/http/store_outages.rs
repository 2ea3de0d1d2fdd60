//! One database out while the other keeps working (issue 20): with the approvals
//! database apart, an outage of either leaves the other's work flowing, the
//! console's pages show the reachable store's rows and name the missing one, and
//! `/readyz` names the store that is out (the jobs store out: 503; the approvals
//! store out: still ready, `degraded`).

use std::time::Duration;

use herald::store::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::run_approvals::{config_text, Producer, CALLBACK_SECRET, PROMPT_SECRET};
use testkit::{api_token, secret_ref, wait_for, PostgresOutage, Receiver, TestDb, TestServer};
use vocab::Role;

struct Scene {
    server: TestServer,
    approvals_db: TestDb,
    receiver: Receiver,
    producer: Producer,
    admin: String,
    _config: tempfile::NamedTempFile,
}

impl Scene {
    async fn start(jobs: Engine, approvals: Engine) -> Scene {
        let receiver = Receiver::start().await;
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            config.path(),
            config_text(&receiver, &secret_ref(PROMPT_SECRET)),
        )
        .unwrap();
        let approvals_db = TestDb::new(approvals).await;
        let (path, approvals_url) = (config.path().to_path_buf(), approvals_db.url.clone());
        let server = TestServer::start_on(TestDb::new(jobs).await, move |args| {
            args.config = Some(path);
            // Retried for as long as a test's outage lasts.
            args.max_attempts = Some(1_000);
            args.callback_secret_ref = Some(secret_ref(CALLBACK_SECRET));
            args.approvals_database_url = Some(approvals_url);
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

    async fn readyz(&self) -> (StatusCode, Value) {
        let resp = reqwest::get(self.server.url("/readyz")).await.unwrap();
        (resp.status(), resp.json().await.unwrap_or(Value::Null))
    }

    /// Waits until `/readyz` names `source`'s store as out.
    async fn wait_reported_out(&self, source: &str) -> (StatusCode, Value) {
        wait_for(
            &format!("/readyz to name the {source} store"),
            Duration::from_secs(20),
            async || {
                let (_, body) = self.readyz().await;
                body["unavailable"][0]["sources"] == json!([source])
            },
        )
        .await;
        self.readyz().await
    }

    async fn admin_get(&self, path: &str) -> (StatusCode, Value) {
        self.producer.call(&self.admin, path, None).await
    }

    async fn stop(self) {
        self.receiver.stop();
        self.server.stop().await;
        self.approvals_db.drop_db().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_keep_flowing_while_the_approvals_database_is_out() {
    let scene = Scene::start(Engine::Sqlite, Engine::Postgres).await;
    let outage = PostgresOutage::start(&scene.approvals_db.url).await;
    let (status, ready) = scene.wait_reported_out("approvals").await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert!(
        ready["unavailable"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("(the approvals store)"),
        "{ready}"
    );

    // A run finishes and its callback arrives.
    let run = scene
        .producer
        .running_run("etl", &scene.receiver.url_for("callbacks"), &[])
        .await;
    let (status, done) = scene
        .producer
        .transition(&run, json!({"to": "succeeded"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let callback = done["notifications"][0].as_str().unwrap().to_string();
    wait_for("the callback", Duration::from_secs(20), async || {
        scene.receiver.arrivals().contains(&callback)
    })
    .await;

    // Arrange: the callback's arrival precedes its settle's commit; wait for
    // the event to stand completed before reading the listing.
    wait_for(
        "the callback settled",
        Duration::from_secs(20),
        async || {
            let (_, page) = scene
                .admin_get("/admin/api/notification-outbox?status=completed")
                .await;
            page["events"]
                .as_array()
                .is_some_and(|events| events.iter().any(|e| e["event_id"] == callback.as_str()))
        },
    )
    .await;
    // The listing shows the jobs store's events and names the missing store.
    let (status, page) = scene
        .admin_get("/admin/api/notification-outbox?status=completed")
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["event_id"] == callback.as_str()));
    assert!(
        page["unavailable"][0]
            .as_str()
            .unwrap()
            .contains("the approvals store is unavailable"),
        "{page}"
    );
    let (status, audit) = scene.admin_get("/admin/api/audit").await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    assert!(
        audit["unavailable"][0]
            .as_str()
            .unwrap()
            .contains("approvals store"),
        "{audit}"
    );

    // Asking for an approval cannot check its definition: refused, nothing changed.
    let paused = scene
        .producer
        .running_run("payout", &scene.receiver.url_for("callbacks"), &[])
        .await;
    let (status, refused) = scene.producer.ask_approval(&paused, "payout").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("approvals store cannot be read"),
        "{refused}"
    );
    assert_eq!(scene.producer.run(&paused).await["status"], "running");

    outage.end().await;
    wait_for("/readyz ready again", Duration::from_secs(30), async || {
        scene.readyz().await.1["status"] == "ready"
    })
    .await;
    let (status, page) = scene
        .admin_get("/admin/api/notification-outbox?status=completed")
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.get("unavailable").is_none(), "{page}");
    scene.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approvals_keep_flowing_while_the_jobs_database_is_out() {
    let scene = Scene::start(Engine::Postgres, Engine::MySql).await;
    // The prompt's receiver refuses until the jobs database is out.
    scene.receiver.set_status(503);
    let run = scene
        .producer
        .running_run("payout", &scene.receiver.url_for("callbacks"), &[])
        .await;
    let (status, moved) = scene.producer.ask_approval(&run, "payout").await;
    assert_eq!(status, StatusCode::OK, "{moved}");
    let approval = moved["run"]["approval_id"].as_str().unwrap().to_string();
    let prompt = format!("approval_{approval}");
    let approvals = scene.approvals_db.store().await;
    let prompt_status = async || -> Option<String> {
        sqlx::query_scalar(
            &approvals
                .engine()
                .sql("SELECT status FROM outbox_events WHERE event_id = ?"),
        )
        .bind(&prompt)
        .fetch_optional(approvals.pool())
        .await
        .unwrap()
    };
    wait_for(
        "the prompt refused once",
        Duration::from_secs(20),
        async || scene.receiver.arrivals().contains(&prompt),
    )
    .await;

    let outage = PostgresOutage::start(&scene.server.db.url).await;
    let (status, ready) = scene.wait_reported_out("jobs").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{ready}");
    assert!(
        ready["reason"]
            .as_str()
            .unwrap()
            .contains("(the jobs store)"),
        "{ready}"
    );
    // With the jobs database out, the approvals database's workers still deliver.
    scene.receiver.set_status(200);
    wait_for(
        "the prompt delivered",
        Duration::from_secs(20),
        async || prompt_status().await.as_deref() == Some("completed"),
    )
    .await;
    assert_eq!(scene.readyz().await.0, StatusCode::SERVICE_UNAVAILABLE);
    outage.end().await;
    wait_for("/readyz ready again", Duration::from_secs(30), async || {
        scene.readyz().await.1["status"] == "ready"
    })
    .await;
    approvals.close().await;
    scene.stop().await;
}
