//! Test fixtures: a fresh real database per test, and a real server on loopback.

use std::net::SocketAddr;

use herald::config::{Settings, SettingsArgs};
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

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    async fn wait_ready(&self) {
        let client = reqwest::Client::new();
        for _ in 0..200 {
            if let Ok(resp) = client.get(self.url("/readyz")).send().await {
                if resp.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("test server did not become ready");
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
