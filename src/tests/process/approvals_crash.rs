//! Seed 000's crash properties with real processes: `herald serve` commits a
//! recall, is SIGKILLed at each point of the replay, and a new process finishes
//! it. In every case the target field ends with the value written exactly once
//! and the replay event ends completed.
//!
//! Kill points come from the test-only `HERALD_TEST_PAUSE_REPLAY=<stage>:<marker>`
//! hook (`approvals::replay::TEST_PAUSE_ENV`), which makes the replay handler write
//! the marker and sleep at that stage.

use std::path::Path;
use std::time::Duration;

use herald::store::ports::OutboxStore;
use herald::store::ports::RecordRepository;
use herald::store::{Engine, SqlStore};
use serde_json::{json, Value};
use testkit::{api_token, wait_for, HeraldProcess, TestDb};
use vocab::{DeliveryStatus, Role};

/// The approvals configuration the cluster tests use, with fast polls and
/// backoffs so a crashed replay is picked up within the test's time.
fn approvals_config() -> String {
    format!(
        "worker_poll_interval_ms = 50\n\
         maintenance_interval_ms = 200\n\
         replay_initial_backoff_ms = 100\n\
         replay_max_backoff_ms = 200\n\
         {}",
        testkit::cluster::APPROVALS_CONFIG
    )
}

struct Scene {
    db: TestDb,
    store: SqlStore,
    config: tempfile::NamedTempFile,
    token: String,
    client: reqwest::Client,
}

impl Scene {
    async fn new() -> Scene {
        herald::channels::install_crypto_provider();
        let db = TestDb::new(Engine::Sqlite).await;
        let store = db.store().await;
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(config.path(), approvals_config()).unwrap();
        let token = api_token(&db.url, Role::Operator).await;
        Scene {
            db,
            store,
            config,
            token,
            client: reqwest::Client::new(),
        }
    }

    /// Starts `herald serve`; returns it and its base URL once it answers.
    async fn spawn(&self, replay_poll_ms: &str, env: &[(&str, &str)]) -> (HeraldProcess, String) {
        let mut herald = HeraldProcess::spawn_with_env(
            &self.db.url,
            &[
                "--config",
                self.config.path().to_str().unwrap(),
                "--replay-poll-interval-ms",
                replay_poll_ms,
                "--replay-lease-secs",
                "2",
            ],
            env,
        );
        let base = herald.ready().await;
        (herald, base)
    }

    async fn post(&self, base: &str, path: &str, body: Value) -> Value {
        let resp = self
            .client
            .post(format!("{base}{path}"))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        resp.json().await.unwrap()
    }

    /// Records, a submitted approval and its recall, committed by `base`'s process.
    /// Returns (account id, replay event id).
    async fn recall_through(&self, base: &str) -> (String, String) {
        let account = self
            .post(
                base,
                "/api/v1/records/Account",
                json!({"fields": {"Status": "Customer"}}),
            )
            .await["id"]
            .as_str()
            .unwrap()
            .to_string();
        let deal = self
            .post(
                base,
                "/api/v1/records/Opportunity",
                json!({"fields": {"AccountId": account}}),
            )
            .await["id"]
            .as_str()
            .unwrap()
            .to_string();
        let approval = self
            .post(
                base,
                "/api/v1/approvals",
                json!({"definition_id": "deal", "record_id": deal}),
            )
            .await;
        let id = approval["id"].as_str().unwrap();
        let recalled = self
            .post(base, &format!("/api/v1/approvals/{id}/recall"), json!({}))
            .await;
        let replay = format!("recall_{id}_{}", recalled["transition_seq"]);
        (account, replay)
    }

    async fn event_status(&self, event_id: &str) -> DeliveryStatus {
        self.store
            .get_event(event_id)
            .await
            .unwrap()
            .unwrap()
            .status
    }

    async fn target(&self, account: &str) -> (Value, i64) {
        let record = self.store.get_record(account).await.unwrap().unwrap();
        (
            record.fields.get("Status").cloned().unwrap_or(Value::Null),
            record.version,
        )
    }

    /// Starts a fresh process and waits for the replay to be completed; then checks
    /// the target holds the value, written exactly once.
    async fn recover_and_check(&self, account: &str, event_id: &str) {
        let (herald, _base) = self.spawn("50", &[]).await;
        wait_for(
            "the replay to complete after the restart",
            Duration::from_secs(30),
            async || self.event_status(event_id).await == DeliveryStatus::Completed,
        )
        .await;
        // Give a duplicate replay the chance to show itself.
        tokio::time::sleep(Duration::from_millis(500)).await;
        drop(herald);
        let (value, version) = self.target(account).await;
        assert_eq!(value, "Prospect");
        assert_eq!(version, 2, "the target was written exactly once");
        assert_eq!(self.event_status(event_id).await, DeliveryStatus::Completed);
    }

    async fn finish(self) {
        self.store.close().await;
        self.db.drop_db().await;
    }
}

async fn wait_marker(marker: &Path) {
    wait_for(
        "the replay to reach the pause",
        Duration::from_secs(30),
        async || marker.exists(),
    )
    .await;
}

/// Kills a process paused at `stage`, returns what the store showed at the kill.
async fn kill_at(scene: &Scene, stage: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("paused");
    let hook = format!("{stage}:{}", marker.display());
    let (herald, base) = scene
        .spawn("50", &[(herald::approvals::replay::TEST_PAUSE_ENV, &hook)])
        .await;
    let (account, event_id) = scene.recall_through(&base).await;
    wait_marker(&marker).await;
    herald.kill();
    (account, event_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_after_the_recall_commit_and_before_a_claim_leaves_the_row_pending() {
    let scene = Scene::new().await;
    // The replay worker polled once at start-up and sleeps far longer than the test.
    let (herald, base) = scene.spawn("600000", &[]).await;
    let (account, event_id) = scene.recall_through(&base).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    herald.kill();
    let event = scene.store.get_event(&event_id).await.unwrap().unwrap();
    assert_eq!(event.status, DeliveryStatus::Pending);
    assert_eq!(event.attempts, 0, "never claimed");
    assert_eq!(scene.target(&account).await, (json!("Customer"), 1));
    scene.recover_and_check(&account, &event_id).await;
    scene.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_after_the_claim_is_reclaimed_after_lease_expiry() {
    let scene = Scene::new().await;
    let (account, event_id) = kill_at(&scene, "claimed").await;
    let event = scene.store.get_event(&event_id).await.unwrap().unwrap();
    assert_eq!(event.status, DeliveryStatus::Processing);
    assert_eq!(scene.target(&account).await, (json!("Customer"), 1));
    scene.recover_and_check(&account, &event_id).await;
    let event = scene.store.get_event(&event_id).await.unwrap().unwrap();
    assert_eq!(event.attempts, 2, "one killed attempt, one that completed");
    scene.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_in_the_middle_of_the_target_update_rolls_it_back_and_reclaims() {
    let scene = Scene::new().await;
    let (account, event_id) = kill_at(&scene, "mid_update").await;
    let event = scene.store.get_event(&event_id).await.unwrap().unwrap();
    assert_eq!(event.status, DeliveryStatus::Processing);
    assert_eq!(
        scene.target(&account).await,
        (json!("Customer"), 1),
        "the uncommitted update died with the process"
    );
    scene.recover_and_check(&account, &event_id).await;
    scene.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_after_the_completion_commit_keeps_both_effects() {
    let scene = Scene::new().await;
    let (account, event_id) = kill_at(&scene, "committed").await;
    let event = scene.store.get_event(&event_id).await.unwrap().unwrap();
    assert_eq!(event.status, DeliveryStatus::Completed);
    assert_eq!(scene.target(&account).await, (json!("Prospect"), 2));
    scene.recover_and_check(&account, &event_id).await;
    let event = scene.store.get_event(&event_id).await.unwrap().unwrap();
    assert_eq!(event.attempts, 1, "never replayed again");
    scene.finish().await;
}
