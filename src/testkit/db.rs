//! A fresh real database per test (SQLite file, PostgreSQL or MariaDB database)
//! and the macro that runs a contract function on all three engines.

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
        let name = format!("herald_t_{}", uuid::Uuid::new_v4().simple());
        Self::create(engine, name, || admin_url(engine)).await
    }

    /// A fresh database `name` on `engine`: a SQLite file in a temporary folder, or
    /// a database created on the server `admin` names (asked only when needed).
    pub async fn create(engine: Engine, name: String, admin: impl FnOnce() -> String) -> TestDb {
        sqlx::any::install_default_drivers();
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
        let admin = admin();
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
                   let db = $crate::TestDb::new(herald::store::Engine::Sqlite).await;
                   super::$name(&db).await;
                   db.drop_db().await;
               } )*
        }
        mod postgres {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
               async fn $name() {
                   let db = $crate::TestDb::new(herald::store::Engine::Postgres).await;
                   super::$name(&db).await;
                   db.drop_db().await;
               } )*
        }
        mod mysql {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
               async fn $name() {
                   let db = $crate::TestDb::new(herald::store::Engine::MySql).await;
                   super::$name(&db).await;
                   db.drop_db().await;
               } )*
        }
    };
}

/// A PostgreSQL database taken out from under its users, as an outage would: new
/// connections refused and every open one terminated, until [`PostgresOutage::end`].
pub struct PostgresOutage {
    name: String,
    admin: sqlx::AnyConnection,
}

impl PostgresOutage {
    /// Starts the outage of the database at `url` (a PostgreSQL URL).
    pub async fn start(url: &str) -> PostgresOutage {
        use sqlx::{Connection, Executor};
        sqlx::any::install_default_drivers();
        let name = url::Url::parse(url)
            .unwrap()
            .path()
            .trim_start_matches('/')
            .to_string();
        let admin_url = std::env::var("HERALD_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let mut admin = sqlx::AnyConnection::connect(&admin_url)
            .await
            .expect("PostgreSQL admin connection");
        admin
            .execute(format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false").as_str())
            .await
            .unwrap();
        // A connection that passed the startup check just before the ALTER shows
        // up only afterwards, and a terminated backend is listed until it exits:
        // terminate until none is left, so no connection serves the outage.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let left: i64 = sqlx::query_scalar(&format!(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '{name}'"
            ))
            .fetch_one(&mut admin)
            .await
            .unwrap();
            if left == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{left} connections to {name} outlived the outage's start"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        PostgresOutage { name, admin }
    }

    /// Lets connections in again.
    pub async fn end(mut self) {
        use sqlx::{Connection, Executor};
        self.admin
            .execute(format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", self.name).as_str())
            .await
            .unwrap();
        self.admin.close().await.ok();
    }
}
