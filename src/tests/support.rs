//! Test fixtures: a fresh real database per test, and a real server on loopback.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use app::dto::DeliveryStatus;
use herald::config::{Settings, SettingsArgs};
use herald::outbox::model::NewEvent;
use herald::outbox::model::{ClaimedEvent, Settle, Settlement};
use herald::store::ports::{ClaimRequest, OutboxStore};
use herald::store::{Engine, SqlStore, StoreOptions};
use sqlx::{AnyConnection, Connection, Executor};

/// A fresh database on one engine, dropped by [`TestDb::drop_db`].
pub struct TestDb {
    pub engine: Engine,
    pub url: String,
    admin_url: Option<String>,
    name: String,
    _dir: Option<tempfile::TempDir>,
}

fn admin_url(engine: Engine) -> String {
    match engine {
        Engine::Postgres => std::env::var("HERALD_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        Engine::MySql => std::env::var("HERALD_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/mysql".into()),
        Engine::Sqlite => unreachable!("SQLite needs no server"),
    }
}

impl TestDb {
    pub async fn new(engine: Engine) -> TestDb {
        sqlx::any::install_default_drivers();
        let name = format!("herald_t_{}", uuid::Uuid::new_v4().simple());
        if engine == Engine::Sqlite {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite://{}/herald.db", dir.path().display());
            return TestDb {
                engine,
                url,
                admin_url: None,
                name,
                _dir: Some(dir),
            };
        }
        let admin = admin_url(engine);
        let mut conn = AnyConnection::connect(&admin).await.unwrap_or_else(|e| {
            panic!(
                "cannot reach the test {} server at {admin}: {e}",
                engine.name()
            )
        });
        conn.execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create test database");
        conn.close().await.ok();
        let mut url = url::Url::parse(&admin).expect("admin url");
        url.set_path(&format!("/{name}"));
        TestDb {
            engine,
            url: url.to_string(),
            admin_url: Some(admin),
            name,
            _dir: None,
        }
    }

    /// The ephemeral `memory://` store: nothing to create or drop.
    pub fn memory() -> TestDb {
        TestDb {
            engine: Engine::Sqlite,
            url: "memory://".into(),
            admin_url: None,
            name: String::new(),
            _dir: None,
        }
    }

    pub async fn store(&self) -> SqlStore {
        SqlStore::open(&StoreOptions {
            url: self.url.clone(),
            max_connections: 8,
        })
        .await
        .expect("open store")
    }

    pub async fn drop_db(self) {
        if let Some(admin) = &self.admin_url {
            if let Ok(mut conn) = AnyConnection::connect(admin).await {
                let sql = match self.engine {
                    Engine::Postgres => {
                        format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)
                    }
                    _ => format!("DROP DATABASE IF EXISTS {}", self.name),
                };
                let _ = conn.execute(sql.as_str()).await;
                let _ = conn.close().await;
            }
        }
    }
}

/// Generates one `#[tokio::test]` per engine for each contract function.
#[macro_export]
macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
               async fn $name() {
                   let db = $crate::support::TestDb::new(herald::store::Engine::Sqlite).await;
                   super::$name(&db).await;
                   db.drop_db().await;
               } )*
        }
        mod postgres {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
               async fn $name() {
                   let db = $crate::support::TestDb::new(herald::store::Engine::Postgres).await;
                   super::$name(&db).await;
                   db.drop_db().await;
               } )*
        }
        mod mysql {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
               async fn $name() {
                   let db = $crate::support::TestDb::new(herald::store::Engine::MySql).await;
                   super::$name(&db).await;
                   db.drop_db().await;
               } )*
        }
    };
}

/// A real Herald server on a loopback port, backed by a fresh SQLite file.
pub struct TestServer {
    pub addr: SocketAddr,
    pub db: TestDb,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

pub const ADMIN_PASSWORD: &str = "admin-password-for-tests";

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut SettingsArgs)) -> TestServer {
        Self::start_on(TestDb::new(Engine::Sqlite).await, tweak).await
    }

    /// Starts a server on an existing database (for restart tests).
    pub async fn start_on(db: TestDb, tweak: impl FnOnce(&mut SettingsArgs)) -> TestServer {
        herald::channels::install_crypto_provider();
        let mut args = SettingsArgs {
            database_url: Some(db.url.clone()),
            listen: Some("127.0.0.1:0".parse().unwrap()),
            site_root: Some(std::env::temp_dir()),
            ..Default::default()
        };
        tweak(&mut args);
        let settings = Settings::resolve(&args).expect("settings");
        // The first admin's password comes from the environment on first start.
        std::env::set_var(herald::server::ADMIN_PASSWORD_ENV, ADMIN_PASSWORD);
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .expect("bind");
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(herald::server::run(listener, settings, async move {
            let _ = rx.await;
        }));
        let server = TestServer {
            addr,
            db,
            shutdown: Some(tx),
            task,
        };
        server.wait_ready().await;
        server
    }

    /// A new API token of `role` in this server's store.
    pub async fn token(&self, role: app::dto::Role) -> String {
        api_token(&self.db.url, role).await
    }

    /// Adds a user of `role` to this server's store.
    pub async fn add_user(&self, name: &str, password: &str, role: app::dto::Role) {
        let settings = Settings::resolve(&SettingsArgs {
            database_url: Some(self.db.url.clone()),
            ..Default::default()
        })
        .unwrap();
        let store = herald::server::open_store(&settings).await.unwrap();
        herald::server::account_service(&store, &settings)
            .add_user(None, name, password, role)
            .await
            .unwrap();
        store.close().await;
    }

    /// A signed-in browser-like client of a new user with `role`.
    pub async fn session(&self, role: app::dto::Role) -> reqwest::Client {
        let name = format!("{}-{}", role.as_str(), uuid::Uuid::new_v4().simple());
        self.add_user(&name, "a-long-password-1", role).await;
        let browser = self.browser();
        let resp = browser
            .post(self.url("/auth/login"))
            .form(&[
                ("username", name.as_str()),
                ("password", "a-long-password-1"),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), reqwest::StatusCode::SEE_OTHER);
        browser
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    async fn wait_ready(&self) {
        wait_ready(&reqwest::Client::new(), &self.url("")).await;
    }

    /// A client that keeps cookies and sends this server's Origin, as a browser does.
    pub fn browser(&self) -> reqwest::Client {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::ORIGIN,
            format!("http://{}", self.addr).parse().unwrap(),
        );
        reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .default_headers(headers)
            .build()
            .unwrap()
    }

    /// Stops the server gracefully and hands back its database.
    pub async fn stop_keep_db(mut self) -> TestDb {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
        self.db
    }

    pub async fn stop(self) {
        self.stop_keep_db().await.drop_db().await;
    }
}

/// One request a [`Receiver`] got.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub path: String,
    pub event_id: String,
    pub body: serde_json::Value,
    /// Whether a Standard Webhooks verifier accepted it (None: no secret to check with).
    pub verified: Option<bool>,
    /// When it arrived.
    pub at: std::time::Instant,
}

/// A real HTTP receiver on loopback that records every request it is sent, answers
/// from a script (then a default status), and verifies Standard Webhooks signatures
/// with the reference library.
pub struct Receiver {
    pub addr: SocketAddr,
    state: std::sync::Arc<ReceiverState>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
pub struct ReceiverState {
    arrivals: std::sync::Mutex<Vec<Arrival>>,
    answered: std::sync::Mutex<Vec<String>>,
    hold: std::sync::Mutex<std::time::Duration>,
    status: std::sync::atomic::AtomicU16,
    /// Answers to give first: (status, Retry-After).
    script: std::sync::Mutex<std::collections::VecDeque<(u16, Option<String>)>>,
    secrets: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        use axum::routing::post;
        let state = std::sync::Arc::new(ReceiverState::default());
        state.status.store(200, std::sync::atomic::Ordering::SeqCst);
        let shared = state.clone();
        let app = axum::Router::new().route(
            "/{*path}",
            post(
                move |uri: axum::http::Uri,
                      headers: axum::http::HeaderMap,
                      body: axum::body::Bytes| {
                    let state = shared.clone();
                    async move { state.receive(uri.path().to_string(), headers, body).await }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, state, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn url_for(&self, path: &str) -> String {
        format!("http://{}/{path}", self.addr)
    }

    pub fn set_hold(&self, hold: std::time::Duration) {
        *self.state.hold.lock().unwrap() = hold;
    }

    pub fn set_status(&self, status: u16) {
        self.state
            .status
            .store(status, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn script(&self, answers: &[(u16, Option<&str>)]) {
        let mut script = self.state.script.lock().unwrap();
        for (status, retry_after) in answers {
            script.push_back((*status, retry_after.map(str::to_string)));
        }
    }

    /// Verify requests to `/path` with this `whsec_` secret.
    pub fn verify_with(&self, path: &str, secret: &str) {
        self.state
            .secrets
            .lock()
            .unwrap()
            .insert(format!("/{path}"), secret.to_string());
    }

    /// How many requests arrived (cheap enough to poll).
    pub fn count(&self) -> usize {
        self.state.arrivals.lock().unwrap().len()
    }

    pub fn requests(&self) -> Vec<Arrival> {
        self.state.arrivals.lock().unwrap().clone()
    }

    pub fn arrivals(&self) -> Vec<String> {
        self.requests().into_iter().map(|a| a.event_id).collect()
    }

    /// How many times each event id arrived.
    pub fn arrivals_per_event(&self) -> HashMap<String, usize> {
        let mut seen = HashMap::new();
        for id in self.arrivals() {
            *seen.entry(id).or_default() += 1;
        }
        seen
    }

    pub fn answered(&self) -> Vec<String> {
        self.state.answered.lock().unwrap().clone()
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

impl ReceiverState {
    async fn receive(
        &self,
        path: String,
        headers: axum::http::HeaderMap,
        body: axum::body::Bytes,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let event_id = headers
            .get("x-herald-event-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if !event_id.is_empty() {
            assert_eq!(
                json["notification_event_id"],
                event_id.as_str(),
                "body and header agree"
            );
        }
        let secret = self.secrets.lock().unwrap().get(&path).cloned();
        let verified = secret.map(|secret| {
            standardwebhooks::Webhook::new(&secret)
                .unwrap()
                .verify(&body, &headers)
                .is_ok()
        });
        self.arrivals.lock().unwrap().push(Arrival {
            path,
            event_id: event_id.clone(),
            body: json,
            verified,
            at: std::time::Instant::now(),
        });
        let hold = *self.hold.lock().unwrap();
        tokio::time::sleep(hold).await;
        let (status, retry_after) = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or((self.status.load(std::sync::atomic::Ordering::SeqCst), None));
        self.answered.lock().unwrap().push(event_id);
        let status = axum::http::StatusCode::from_u16(status).unwrap();
        match retry_after {
            Some(value) => (status, [("retry-after", value)]).into_response(),
            None => status.into_response(),
        }
    }
}

/// `herald serve` as a real child process.
pub struct HeraldProcess {
    pub child: std::process::Child,
    /// Where the child's log (stderr) goes.
    pub log: std::path::PathBuf,
}

impl HeraldProcess {
    /// Starts `herald serve` on `database_url`; `extra` must include `--listen`.
    pub fn spawn(database_url: &str, extra: &[&str]) -> HeraldProcess {
        Self::spawn_with_env(database_url, extra, &[])
    }

    /// [`HeraldProcess::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> HeraldProcess {
        let log_path = std::env::temp_dir().join(format!(
            "herald-child-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
            .arg("serve")
            .args(["--database-url", database_url])
            .args(["--site-root", std::env::temp_dir().to_str().unwrap()])
            .args(extra)
            .env("HERALD_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn herald serve");
        HeraldProcess {
            child,
            log: log_path,
        }
    }

    /// SIGKILL: no drain, no goodbye.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then the exit status within `within`.
    pub fn terminate(mut self, within: std::time::Duration) -> Option<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.child.kill();
        None
    }
}

impl Drop for HeraldProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates an API token of `role` in the store at `database_url` (as `herald token
/// create` does) and returns its secret.
pub async fn api_token(database_url: &str, role: app::dto::Role) -> String {
    let settings = Settings::resolve(&SettingsArgs {
        database_url: Some(database_url.to_string()),
        ..Default::default()
    })
    .unwrap();
    let store = herald::server::open_store(&settings).await.unwrap();
    let accounts = herald::server::account_service(&store, &settings);
    let created = accounts
        .create_token(None, role.as_str(), role)
        .await
        .unwrap();
    store.close().await;
    created.secret
}

/// The run service over one store, as `herald serve` wires it (without workers).
pub fn run_service(store: &SqlStore, settings: &Settings) -> herald::service::runs::RunService {
    use std::sync::Arc;
    let deliveries = herald::service::deliveries::DeliveryService::new(
        Arc::new(store.clone()),
        Arc::new(store.clone()),
        Arc::new(herald::outbox::handler::Registry::new()),
        settings.max_attempts,
    );
    herald::service::runs::RunService::new(
        Arc::new(store.clone()),
        herald::outbox::Outbox::new(
            Arc::new(store.clone()),
            Arc::new(tokio::sync::Notify::new()),
        ),
        Arc::new(herald::notifications::NotificationPlanner::new(settings)),
        deliveries,
        settings.max_result_bytes,
    )
}

/// A loopback port free right now, for a child process's `--listen`.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `check` every 50 ms until it holds; panics naming `what` after `within`.
pub async fn wait_for(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Waits (up to 30 s) until the server at `base` answers `GET /readyz` with a 2xx,
/// asking through `client`.
pub async fn wait_ready(client: &reqwest::Client, base: &str) {
    herald::channels::install_crypto_provider();
    wait_for(
        &format!("{base}/readyz to answer 2xx"),
        Duration::from_secs(30),
        async || {
            client
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        },
    )
    .await;
}

/// `event`, filed under the run `parent_id` (so a test reads back only its own).
pub fn parented(mut event: NewEvent, parent_id: &str) -> NewEvent {
    event.parent_type = "run".into();
    event.parent_id = parent_id.into();
    event
}

/// The status of every event of the run `parent_id`, by event id.
pub async fn statuses(store: &SqlStore, parent_id: &str) -> HashMap<String, DeliveryStatus> {
    store
        .events_for_parent("run", parent_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.event_id, e.status))
        .collect()
}

/// Whether every event of the run `parent_id` is completed.
pub async fn all_completed(store: &SqlStore, parent_id: &str) -> bool {
    statuses(store, parent_id)
        .await
        .values()
        .all(|s| *s == DeliveryStatus::Completed)
}

/// Enqueues `events` in one producer transaction.
pub async fn enqueue(store: &SqlStore, events: &[NewEvent]) {
    let mut tx = store.begin_write().await.unwrap();
    store.enqueue_all_in(&mut tx, events).await.unwrap();
    tx.commit().await.unwrap();
}

/// Claims with retries: MySQL/Galera may answer a claim race with a deadlock error.
pub async fn claim(store: &SqlStore, request: &ClaimRequest) -> Vec<ClaimedEvent> {
    for _ in 0..20 {
        match store.claim(request).await {
            Ok(events) => return events,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("claim kept failing");
}

/// A claim of the `test` kind, `limit` events, leased for `lease_ms`.
pub fn claim_request(limit: u32, lease_ms: i64) -> ClaimRequest {
    ClaimRequest {
        lease_token: uuid::Uuid::new_v4().simple().to_string(),
        holder: "test-worker".into(),
        limit,
        kinds: vec!["test".into()],
        lease_ms_by_kind: vec![("test".into(), lease_ms)],
        default_lease_ms: lease_ms,
    }
}

/// The worker's settlement of a claimed event (the `test` kind's worker).
pub fn settlement(event: &ClaimedEvent, settle: Settle) -> Settlement {
    Settlement {
        event_id: event.event_id.clone(),
        kind: event.kind.clone(),
        lease_token: event.lease_token.clone(),
        attempt: event.attempts,
        cycle: event.cycle,
        worker: "test-worker".into(),
        started_at_ms: 0,
        finished_at_ms: 1,
        settle,
        status_code: Some(200),
        error: Some("boom".into()),
        dead_letter_event: None,
    }
}

/// The `Location` header of a response, or "" without one.
pub fn location(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// The Prometheus text of the server at `base` once it contains `wanted`, or the
/// last text read when `within` runs out (the caller asserts on it and prints it).
pub async fn metrics_with(base: &str, wanted: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let text = reqwest::get(format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains(wanted) || Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The lines of a child's log that contain `needle`.
pub fn lines_with(log: &std::path::Path, needle: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// Sends `request` and reads its JSON body (whatever the status).
pub async fn json_of(request: reqwest::RequestBuilder) -> serde_json::Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// Creates a run of type `etl` through the JSON API at `base`; returns its id.
pub async fn create_run_via_api(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    callback_url: Option<&str>,
) -> String {
    let run = json_of(
        client
            .post(format!("{base}/api/v1/runs"))
            .bearer_auth(token)
            .json(&serde_json::json!({"type": "etl", "tenant": "t", "callback_url": callback_url})),
    )
    .await;
    run["id"].as_str().expect("a created run").to_string()
}

/// Creates a run routed to `route` through the JSON API of `server` and moves it to
/// `succeeded` with `result` (asserting a `200`); returns the run's id.
pub async fn finish_routed_run(
    server: &TestServer,
    token: &str,
    route: &str,
    result: serde_json::Value,
) -> String {
    let client = reqwest::Client::new();
    let run = json_of(
        client
            .post(server.url("/api/v1/runs"))
            .bearer_auth(token)
            .json(&serde_json::json!({"type": "etl", "tenant": "acme", "routes": [route]})),
    )
    .await;
    let id = run["id"].as_str().expect("a created run").to_string();
    let done = client
        .post(server.url(&format!("/api/v1/runs/{id}/transitions")))
        .bearer_auth(token)
        .json(&serde_json::json!({"to": "succeeded", "result": result}))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), reqwest::StatusCode::OK, "finishing run {id}");
    id
}
