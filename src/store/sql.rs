//! The SQL adapter: one pool (and a read pool beside it) on one engine, how it
//! is opened and migrated.

use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, ConnectOptions, Executor};

use super::engine::{self, Durability, Engine};
use super::error::StoreError;
use super::runs::LearnFrom;

/// How a store is opened.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub url: String,
    pub max_connections: u32,
}

/// The SQL adapter: one pool on one engine.
#[derive(Clone, Debug)]
pub struct SqlStore {
    pub(super) pool: AnyPool,
    /// Reads beside the writer (`Engine::read_connections`); `pool` itself when
    /// the engine shares one pool or the database lives in one connection.
    pub(super) reads: AnyPool,
    pub(super) engine: Engine,
    pub(super) durability: Durability,
    /// Run types read back as recorded: a creation of known types reads nothing.
    pub(super) known_run_types: std::sync::Arc<super::runs::KnownRunTypes>,
}

impl SqlStore {
    /// Connects (creating a SQLite file and its folder if missing). Does not migrate.
    pub async fn connect(options: &StoreOptions) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let engine = Engine::from_url(&options.url)?;
        let durability = Durability::of_url(&options.url);
        let url = match (durability.connect_url(), engine) {
            (Some(url), _) => url.to_string(),
            (None, Engine::Sqlite) => prepare_sqlite_url(&options.url)?,
            (None, _) => options.url.clone(),
        };
        let connect_error = |source| StoreError::Connect {
            url: engine::redact_url(&options.url),
            source,
        };
        let connect_options = AnyConnectOptions::from_str(&url)
            .map_err(connect_error)?
            .disable_statement_logging();
        // SQLite allows one writer at a time, and its busy handler waits by sleeping:
        // writers queued on one connection in the pool's fair async queue are far
        // faster than several connections taking turns through BUSY.
        let max_connections = match engine {
            Engine::Sqlite => 1,
            _ => options.max_connections.max(1),
        };
        let pool_options = |max_connections: u32| {
            let mut options = AnyPoolOptions::new();
            if durability.keeps_connection_forever() {
                options = options
                    .min_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None);
            }
            options
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(30))
                .after_connect(move |conn, _meta| Box::pin(set_up(conn, engine)))
        };
        let pool = match pool_options(max_connections)
            .connect_with(connect_options.clone())
            .await
        {
            Ok(pool) => pool,
            // The pool retries a failing connection until its deadline and then
            // says only that it timed out: one direct attempt says why.
            Err(sqlx::Error::PoolTimedOut) => {
                return Err(connect_error(
                    why_no_connection(&connect_options, engine).await,
                ))
            }
            Err(other) => return Err(connect_error(other)),
        };
        // An in-memory database exists only inside its one connection.
        let own_reads = engine.read_connections() > 0 && !durability.keeps_connection_forever();
        let reads = if own_reads {
            pool_options(engine.read_connections())
                .connect_with(connect_options)
                .await
                .map_err(connect_error)?
        } else {
            pool.clone()
        };
        let learn_from = match (engine.groups_commits(), own_reads) {
            (false, _) => LearnFrom::CreationsRead,
            (true, true) => LearnFrom::ReadPool,
            (true, false) => LearnFrom::Nothing,
        };
        Ok(SqlStore {
            pool,
            reads,
            engine,
            durability,
            known_run_types: std::sync::Arc::new(super::runs::KnownRunTypes::new(learn_from)),
        })
    }

    /// Connects and applies every pending migration.
    pub async fn open(options: &StoreOptions) -> Result<Self, StoreError> {
        let store = Self::connect(options).await?;
        store.migrate().await?;
        Ok(store)
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.engine.migrator().run(&self.pool).await?;
        Ok(())
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Whether this store carries the durable outbox (false on `memory://`).
    pub fn has_durable_outbox(&self) -> bool {
        self.durability.has_durable_outbox()
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The database is reachable and every migration this build knows is applied.
    pub async fn is_ready(&self) -> bool {
        let applied: Result<i64, sqlx::Error> =
            sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success = TRUE")
                .fetch_one(&self.pool)
                .await;
        let known = self.engine.migrator().iter().count() as i64;
        matches!(applied, Ok(n) if n >= known)
    }

    pub async fn close(&self) {
        self.reads.close().await;
        self.pool.close().await;
    }
}

/// What every new connection runs before its first use.
async fn set_up(conn: &mut sqlx::AnyConnection, engine: Engine) -> Result<(), sqlx::Error> {
    for statement in engine.connection_setup() {
        conn.execute(*statement).await?;
    }
    if !engine.synchronous_cluster_setup().is_empty() && replicates_synchronously(conn).await? {
        for statement in engine.synchronous_cluster_setup() {
            conn.execute(*statement).await?;
        }
    }
    Ok(())
}

/// The error of one connection made and set up as the pool makes them, after the
/// pool timed out; the timeout itself when this one succeeds (the server was slow).
async fn why_no_connection(options: &AnyConnectOptions, engine: Engine) -> sqlx::Error {
    match options.connect().await {
        Err(err) => err,
        Ok(mut conn) => match set_up(&mut conn, engine).await {
            Err(err) => err,
            Ok(()) => {
                let _ = sqlx::Connection::close(conn).await;
                sqlx::Error::PoolTimedOut
            }
        },
    }
}

/// Makes sure a SQLite URL creates its file, and that the file's folder exists.
fn prepare_sqlite_url(url: &str) -> Result<String, StoreError> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or_default();
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" {
        return Err(StoreError::UnsupportedUrl(format!(
            "{url} (Herald needs a durable SQLite file, e.g. sqlite://data/herald.db)"
        )));
    }
    if let Some(parent) = std::path::Path::new(path).parent() {
        if !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Connect {
                url: url.to_string(),
                source: sqlx::Error::Io(e),
            })?;
        }
    }
    Ok(if rest.contains("mode=") {
        url.to_string()
    } else if rest.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    })
}

#[async_trait::async_trait]
impl super::ports::Transactions for SqlStore {
    async fn begin_write(&self) -> Result<super::ports::WriteTx, StoreError> {
        Ok(self.pool.begin_with(self.engine.begin_write()).await?)
    }
}

/// Whether the server this connection reached is a node of a synchronously
/// replicated cluster (Galera: `wsrep_on` is ON). Asked with `SHOW VARIABLES`,
/// which any MySQL or MariaDB answers, with or without Galera built in.
async fn replicates_synchronously(conn: &mut sqlx::AnyConnection) -> Result<bool, sqlx::Error> {
    let row = sqlx::query("SHOW VARIABLES LIKE 'wsrep_on'")
        .fetch_optional(&mut *conn)
        .await?;
    Ok(match row {
        Some(row) => sqlx::Row::try_get::<String, _>(&row, 1)?.eq_ignore_ascii_case("ON"),
        None => false,
    })
}
