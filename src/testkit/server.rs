//! A real Herald server in this process on a loopback port, and API tokens.

use std::net::SocketAddr;
use std::time::Duration;

use herald::config::{Settings, SettingsArgs};
use herald::store::{Engine, SqlStore};

use crate::db::TestDb;
use crate::waiting::wait_for;

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
            .add_user(
                herald::service::accounts::Actor::Local,
                name,
                Some(password),
                role,
            )
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

/// Creates an API token of `role` in the store at `database_url` (as `herald token
/// create` does) and returns its secret.
pub async fn api_token(database_url: &str, role: vocab::Role) -> String {
    api_token_named(database_url, role.as_str(), role).await
}

/// [`api_token`] for a viewer of its own name (two producers of one role).
pub async fn api_token_named(database_url: &str, name: &str, role: vocab::Role) -> String {
    let settings = Settings::resolve(&SettingsArgs {
        database_url: Some(database_url.to_string()),
        ..Default::default()
    })
    .unwrap();
    let store = herald::server::open_store(&settings).await.unwrap();
    let accounts = herald::server::account_service(&store, &settings);
    let created = accounts
        .create_token(herald::service::accounts::Actor::Local, name, role)
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

/// A configuration file holding `text` (removed when dropped).
pub fn config_file(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

/// Ends a new run of `tenant`, routed to `routes`, as `succeeded` with `result`
/// under the configuration file `config`, in this process (no worker runs here:
/// nothing is sent). Its id and how many notifications the transition owed.
pub async fn finish_routed_run_in_process(
    db: &TestDb,
    store: &SqlStore,
    config: &tempfile::NamedTempFile,
    tenant: &str,
    routes: &[&str],
    result: serde_json::Value,
) -> (String, usize) {
    use herald::service::runs::TransitionRequest;
    use herald::store::ports::{NewRun, RunRepository};
    use vocab::{Role, RunStatus, Viewer};

    let settings = Settings::resolve(&SettingsArgs {
        database_url: Some(db.url.clone()),
        config: Some(config.path().to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    let runs = run_service(store, &settings);
    let run = store
        .create_run(NewRun {
            run_type: "etl".into(),
            tenant: tenant.into(),
            callback_url: None,
            routes: routes.iter().map(|r| r.to_string()).collect(),
        })
        .await
        .unwrap();
    let viewer = Viewer {
        name: "op".into(),
        role: Role::Operator,
    };
    let done = runs
        .transition(
            Some(&viewer),
            &run.id,
            TransitionRequest {
                approval: None,
                to: RunStatus::Succeeded,
                result: Some(result),
            },
        )
        .await
        .unwrap();
    (run.id, done.notifications.len())
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

/// A config file with a `deal` approval of Opportunity records (one Manager step,
/// decided by an admin) whose prompts go to `hook` through the route `approvers`.
/// `settings` (top-level keys) go before it, `more` (the definition's actions,
/// say) after it.
pub fn deal_approval_config(hook: &str, settings: &str, more: &str) -> tempfile::NamedTempFile {
    let text = format!(
        r#"{settings}
[[routes]]
name = "approvers"
channel = "webhook"
url = "{hook}"

[[approval_definitions]]
id = "deal"
object = "Opportunity"

[[approval_definitions.steps]]
name = "Manager"
approver = {{ role = "admin" }}
route = "approvers"
{more}"#
    );
    let file = tempfile::NamedTempFile::new().expect("a temporary config file");
    std::fs::write(file.path(), text).expect("write the config file");
    file
}
