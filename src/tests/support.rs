//! Test fixtures: a fresh real database per test, and a real server on loopback.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use herald::config::{Settings, SettingsArgs};
use herald::outbox::model::NewEvent;
use herald::outbox::model::{ClaimedEvent, Settle, Settlement};
use herald::store::ports::{ClaimRequest, OutboxStore};
use herald::store::{Engine, SqlStore, StoreOptions};
use sqlx::{AnyConnection, Connection, Executor};
use vocab::DeliveryStatus;

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
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .expect("bind");
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let first_admin_password = Some(ADMIN_PASSWORD.to_string());
        let task = tokio::spawn(herald::server::run(
            listener,
            settings,
            first_admin_password,
            async move {
                let _ = rx.await;
            },
        ));
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
    pub async fn token(&self, role: vocab::Role) -> String {
        api_token(&self.db.url, role).await
    }

    /// Adds a user of `role` to this server's store.
    pub async fn add_user(&self, name: &str, password: &str, role: vocab::Role) {
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
    pub async fn session(&self, role: vocab::Role) -> reqwest::Client {
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
    /// When it arrived (rates in `benches/isolation.rs`).
    #[allow(dead_code)]
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
    gate: Gate,
    /// Requests arrived and not yet answered, and the most there ever were at once.
    in_flight: std::sync::Mutex<(usize, usize)>,
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

    /// Holds every request (arrived, recorded, unanswered) until [`Receiver::resume`]:
    /// a sender's requests in flight stay in flight, whatever the machine's speed.
    pub fn pause(&self) {
        self.state.gate.closed.send_replace(true);
    }

    pub fn resume(&self) {
        self.state.gate.closed.send_replace(false);
    }

    /// The most requests this receiver held unanswered at once (since the last
    /// [`Receiver::reset_max_in_flight`]).
    pub fn max_in_flight(&self) -> usize {
        self.state.in_flight.lock().unwrap().1
    }

    /// Starts counting the most requests held at once from those held now.
    pub fn reset_max_in_flight(&self) {
        let mut in_flight = self.state.in_flight.lock().unwrap();
        in_flight.1 = in_flight.0;
    }

    /// The event ids of the requests held at the paused gate now.
    pub fn held_at_gate(&self) -> HashSet<String> {
        self.state.gate.held.lock().unwrap().clone()
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
        let _unanswered = InFlight::enter(&self.in_flight);
        let hold = *self.hold.lock().unwrap();
        tokio::time::sleep(hold).await;
        self.gate.pass(&event_id).await;
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

/// One request counted in flight until it is answered or its sender gives up
/// (the handler is dropped with the connection).
struct InFlight<'a>(&'a std::sync::Mutex<(usize, usize)>);

impl<'a> InFlight<'a> {
    fn enter(count: &'a std::sync::Mutex<(usize, usize)>) -> InFlight<'a> {
        let mut now = count.lock().unwrap();
        now.0 += 1;
        now.1 = now.1.max(now.0);
        InFlight(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap().0 -= 1;
    }
}

/// Where a paused [`Receiver`] holds requests.
struct Gate {
    closed: tokio::sync::watch::Sender<bool>,
    held: std::sync::Mutex<HashSet<String>>,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            closed: tokio::sync::watch::channel(false).0,
            held: Default::default(),
        }
    }
}

impl Gate {
    async fn pass(&self, event_id: &str) {
        let mut closed = self.closed.subscribe();
        if !*closed.borrow_and_update() {
            return;
        }
        self.held.lock().unwrap().insert(event_id.to_string());
        // Let go of it however the wait ends (the sender may give up first).
        let _release = HeldAtGate(&self.held, event_id);
        let _ = closed.wait_for(|closed| !closed).await;
    }
}

/// An event id in a gate's held set, removed when dropped.
struct HeldAtGate<'a>(&'a std::sync::Mutex<HashSet<String>>, &'a str);

impl Drop for HeldAtGate<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap().remove(self.1);
    }
}

/// `herald serve` as a real child process.
pub struct HeraldProcess {
    pub child: std::process::Child,
    /// Where the child's log (stderr) goes.
    pub log: std::path::PathBuf,
    /// Where its standard output goes: the line naming the address it serves on.
    out: std::path::PathBuf,
}

impl HeraldProcess {
    /// Starts `herald serve` on `database_url`. Without `--listen` in `extra` it
    /// listens on a port the kernel picks (see [`HeraldProcess::base`]).
    pub fn spawn(database_url: &str, extra: &[&str]) -> HeraldProcess {
        Self::spawn_with_env(database_url, extra, &[])
    }

    /// [`HeraldProcess::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> HeraldProcess {
        // Under target/tmp (kept for a failing test to read, gone with `cargo clean`).
        let name = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        let log_path = dir.join(format!("herald-child-{name}.log"));
        let out_path = dir.join(format!("herald-child-{name}.out"));
        let log = std::fs::File::create(&log_path).unwrap();
        let out = std::fs::File::create(&out_path).unwrap();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_herald"));
        command
            .arg("serve")
            .args(["--database-url", database_url])
            .args(["--site-root", std::env::temp_dir().to_str().unwrap()]);
        if !extra.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        let child = command
            .args(extra)
            .env("HERALD_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(out)
            .stderr(log)
            .spawn()
            .expect("spawn herald serve");
        HeraldProcess {
            child,
            log: log_path,
            out: out_path,
        }
    }

    /// `http://host:port` this process serves on, once it listens (it prints the
    /// address it bound, so no test hands it a port another socket may take).
    pub async fn base(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let printed = std::fs::read_to_string(&self.out).unwrap_or_default();
            let served = printed
                .lines()
                .find_map(|line| line.strip_prefix("Herald console: ")?.strip_suffix("/runs"));
            if let Some(base) = served {
                return base.to_string();
            }
            if !self.is_running() || Instant::now() > deadline {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                panic!("herald serve never listened; its log:\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// [`HeraldProcess::base`], then waits until `/readyz` answers 2xx.
    pub async fn ready(&mut self) -> String {
        let base = self.base().await;
        wait_ready(&reqwest::Client::new(), &base).await;
        base
    }

    /// SIGKILL: no drain, no goodbye.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM (a graceful stop: drain, then exit).
    pub fn sigterm(&self) {
        let pid = self.child.id().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
    }

    /// The exit status, if the process exits within `within`.
    pub fn exited_within(
        &mut self,
        within: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// SIGTERM, then the exit status within `within` (SIGKILL if it has none).
    pub fn terminate(mut self, within: std::time::Duration) -> Option<std::process::ExitStatus> {
        self.sigterm();
        let status = self.exited_within(within);
        if status.is_none() {
            let _ = self.child.kill();
        }
        status
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
pub async fn api_token(database_url: &str, role: vocab::Role) -> String {
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
        Arc::new(herald::runtime::jobs_planner(settings)),
        deliveries,
        settings.max_result_bytes,
    )
}

/// A `whsec_` signing secret in a file of its own, named by a `file:` reference:
/// read where it is needed, with no process-wide environment to change.
pub struct SecretFile(tempfile::NamedTempFile);

impl SecretFile {
    pub fn new(secret: &str) -> SecretFile {
        // Under target/tmp: the process-wide ones (`secret_ref`) are never dropped.
        let file = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::write(file.path(), secret).unwrap();
        SecretFile(file)
    }

    /// The reference a setting or route takes (`file:/path`).
    pub fn reference(&self) -> String {
        format!("file:{}", self.0.path().display())
    }
}

/// A `file:` reference to `secret`, in a file kept for the whole test process (one
/// per secret), for servers that read it at send time, whenever that is.
pub fn secret_ref(secret: &str) -> String {
    static FILES: std::sync::LazyLock<std::sync::Mutex<HashMap<String, SecretFile>>> =
        std::sync::LazyLock::new(Default::default);
    FILES
        .lock()
        .unwrap()
        .entry(secret.to_string())
        .or_insert_with(|| SecretFile::new(secret))
        .reference()
}

/// A loopback port held by a socket that is bound but never listens: connecting to
/// it is refused for as long as the socket lives, and no other socket can take it.
pub fn refusing_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

/// Now by the wall clock, in ms since the epoch.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
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
