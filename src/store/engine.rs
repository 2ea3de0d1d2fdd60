//! The three database engines Herald runs on, and every place their SQL differs.
//!
//! All adapters share one implementation over `sqlx::Any`; this module is the single
//! home of dialect differences (placeholders, the database clock, connection set-up,
//! batched claim syntax) so that shared logic is written once.

use std::borrow::Cow;

use sqlx::migrate::Migrator;

use super::error::StoreError;
use super::fault::StoreFault;

// `ignore_missing`: a database a newer release has migrated further still opens
// (a rollback, or an old node restarting mid-rollout): every migration is
// additive, so this build's queries hold on the newer schema (docs/OPERATIONS.md).
// Applied migrations this build knows are still checked against their checksums.
// (The field is `migrate!`'s own, as public as its `set_ignore_missing`, which
// needs a `&mut` these statics cannot give.)
static SQLITE_MIGRATIONS: Migrator = Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("./migrations/sqlite")
};
static POSTGRES_MIGRATIONS: Migrator = Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("./migrations/postgres")
};
static MYSQL_MIGRATIONS: Migrator = Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("./migrations/mysql")
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
    MySql,
}

impl Engine {
    /// Picks the engine from a database URL's scheme. `memory://` is SQLite held in
    /// memory (see [`Durability`]).
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" | MEMORY_SCHEME => Ok(Engine::Sqlite),
            "postgres" | "postgresql" => Ok(Engine::Postgres),
            "mysql" | "mariadb" => Ok(Engine::MySql),
            _ => Err(StoreError::UnsupportedUrl(redact_url(url))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
            Engine::MySql => "mysql",
        }
    }

    pub fn migrator(self) -> &'static Migrator {
        match self {
            Engine::Sqlite => &SQLITE_MIGRATIONS,
            Engine::Postgres => &POSTGRES_MIGRATIONS,
            Engine::MySql => &MYSQL_MIGRATIONS,
        }
    }

    /// The store's own clock in epoch milliseconds. Lease expiry is always compared
    /// against this one clock, so skewed node clocks cannot steal a lease early.
    pub fn now_ms(self) -> &'static str {
        match self {
            Engine::Sqlite => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
            Engine::Postgres => "CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT)",
            Engine::MySql => "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
        }
    }

    /// Statements run on every new connection.
    pub fn connection_setup(self) -> &'static [&'static str] {
        match self {
            // WAL for concurrent readers; FULL so a commit survives power loss.
            Engine::Sqlite => &[
                "PRAGMA journal_mode = WAL",
                "PRAGMA synchronous = FULL",
                "PRAGMA busy_timeout = 10000",
                "PRAGMA foreign_keys = ON",
            ],
            // A plan per execution: a generic plan cached while the outbox was
            // small (or had no statistics yet) turns the claim into a scan of every
            // pending row once a backlog builds (issue 9: claims of seconds).
            Engine::Postgres => &[
                "SET TIME ZONE 'UTC'",
                "SET plan_cache_mode = force_custom_plan",
            ],
            Engine::MySql => &[
                "SET time_zone = '+00:00'",
                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            ],
        }
    }

    /// Statements run on a new connection only when the server replicates
    /// synchronously (`wsrep_on` is ON: MariaDB Galera). Galera certifies a
    /// commit on every node but applies it on the others a moment later, so a
    /// producer that creates a run through one Herald node and moves it through
    /// another (any load balancer) would get 404 for the run it was just told
    /// exists. `wsrep_sync_wait = 1` makes each read and each transaction's
    /// start wait until this node has applied everything committed before it.
    pub fn synchronous_cluster_setup(self) -> &'static [&'static str] {
        match self {
            Engine::MySql => &["SET SESSION wsrep_sync_wait = 1"],
            Engine::Sqlite | Engine::Postgres => &[],
        }
    }

    /// The statement that opens a write transaction. On SQLite it takes the write lock
    /// up front, so a read-then-write transaction waits instead of failing with BUSY.
    pub fn begin_write(self) -> &'static str {
        match self {
            Engine::Sqlite => "BEGIN IMMEDIATE",
            Engine::Postgres | Engine::MySql => "BEGIN",
        }
    }

    /// The statement that tells other nodes' listeners that events were committed,
    /// sent on its own after the commit (never inside a producer's transaction: a
    /// transaction that issued `NOTIFY` takes a global lock at COMMIT and holds it
    /// across its WAL flush, which serialises every commit). `None`: the engine has
    /// no such channel and other nodes find work by polling.
    pub fn peer_notice(self) -> Option<&'static str> {
        match self {
            Engine::Postgres => Some("SELECT pg_notify('herald_outbox', '')"),
            Engine::Sqlite | Engine::MySql => None,
        }
    }

    /// Connections of a pool beside the writer for reads that need no write
    /// transaction (every request's API-token lookup), or 0 to share the one pool.
    /// SQLite has one writer connection, which would otherwise serve every such
    /// read in line with the group commits; in WAL mode readers run beside it.
    pub fn read_connections(self) -> u32 {
        match self {
            Engine::Sqlite => 4,
            Engine::Postgres | Engine::MySql => 0,
        }
    }

    /// Whether producers' write units share transactions (`store::group_commit`).
    /// SQLite has one writer and one fsync per COMMIT, so sharing a COMMIT is what
    /// multiplies its throughput (docs/BENCHMARKS.md, issue 9). PostgreSQL and
    /// MySQL group concurrent commits themselves and run transactions in parallel
    /// on several connections, which one serial writer would give up.
    pub fn groups_commits(self) -> bool {
        matches!(self, Engine::Sqlite)
    }

    /// The tail of an `INSERT` that overwrites `columns` when `key` already exists.
    pub fn upsert_tail(self, key: &str, columns: &[&str]) -> String {
        match self {
            Engine::Sqlite | Engine::Postgres => {
                let sets: Vec<String> = columns
                    .iter()
                    .map(|c| format!("{c} = excluded.{c}"))
                    .collect();
                format!("ON CONFLICT ({key}) DO UPDATE SET {}", sets.join(", "))
            }
            Engine::MySql => {
                let sets: Vec<String> = columns
                    .iter()
                    .map(|c| format!("{c} = VALUES({c})"))
                    .collect();
                format!("ON DUPLICATE KEY UPDATE {}", sets.join(", "))
            }
        }
    }

    /// The tail of an `INSERT` into `table` that, where a row with the same
    /// `key` exists, adds one to its `column` instead.
    pub fn increment_tail(self, key: &str, table: &str, column: &str) -> String {
        match self {
            Engine::Sqlite | Engine::Postgres => {
                format!("ON CONFLICT ({key}) DO UPDATE SET {column} = {table}.{column} + 1")
            }
            Engine::MySql => format!("ON DUPLICATE KEY UPDATE {column} = {column} + 1"),
        }
    }

    /// The tail of an `INSERT` that silently keeps an existing row with the same
    /// `key` (one or more comma-separated columns).
    pub fn insert_if_absent_tail(self, key: &str) -> String {
        match self {
            Engine::Sqlite | Engine::Postgres => format!("ON CONFLICT ({key}) DO NOTHING"),
            // A no-op update: unlike INSERT IGNORE it does not hide other errors.
            Engine::MySql => {
                let first = key.split(',').next().unwrap_or(key).trim();
                format!("ON DUPLICATE KEY UPDATE {first} = {first}")
            }
        }
    }

    /// An `UPDATE` of at most `LIMIT ?` rows matching `filter`, taken in `order`
    /// (the limit is bound after `filter`'s values, so the statement's text, and so
    /// its prepared statement, does not change with it).
    ///
    /// MySQL has `UPDATE … ORDER BY … LIMIT` but cannot select from the table it
    /// updates. PostgreSQL picks the rows in a subquery and re-checks `recheck`
    /// (which must need no bound values) on each row as it is updated, so a row
    /// another claimer took in the meantime is skipped. SQLite runs the whole
    /// statement under its single write lock, so nothing can change in between; a
    /// recheck there would only steer its planner onto a scan of every due row. No
    /// `SKIP LOCKED`: the same shape is correct on TiDB and Galera.
    pub fn limited_update(
        self,
        table: &str,
        set: &str,
        filter: &str,
        recheck: &str,
        order: &str,
    ) -> String {
        match self {
            Engine::MySql => {
                format!("UPDATE {table} SET {set} WHERE {filter} ORDER BY {order} LIMIT ?")
            }
            // `= ANY(ARRAY(…))` runs the limited pick once, as an init plan; with
            // `IN (…)` the planner may choose a semi join that re-runs it for every
            // pending row (claims of 25–76 s measured at 1,000 runs/s).
            Engine::Postgres => format!(
                "UPDATE {table} SET {set} WHERE event_id = ANY(ARRAY(\
                 SELECT event_id FROM {table} WHERE {filter} ORDER BY {order} LIMIT ?)) \
                 AND {recheck}"
            ),
            Engine::Sqlite => format!(
                "UPDATE {table} SET {set} WHERE event_id IN \
                 (SELECT event_id FROM {table} WHERE {filter} ORDER BY {order} LIMIT ?)"
            ),
        }
    }

    /// `test` as a condition checked on each row that no index can serve. SQLite
    /// without fresh statistics takes any index on a tested column, so a test
    /// nearly every row passes (a run's terminal status) walks that index and
    /// sorts the table; wrapped in CASE it stays a residual filter. PostgreSQL
    /// and MySQL plan from statistics, which a CASE would blind: PostgreSQL then
    /// guesses that 0.5 % of rows pass and plans a sort of every candidate.
    pub fn residual_on_sqlite(self, test: &str) -> String {
        match self {
            Engine::Sqlite => format!("(CASE WHEN {test} THEN 1 ELSE 0 END) = 1"),
            Engine::Postgres | Engine::MySql => test.to_string(),
        }
    }

    /// Whether a limited, ordered pick of rows to lock is better made as a pick of
    /// their keys first, then the rows with those keys (PostgreSQL): the ordered
    /// walk and its limit then handle narrow keys, run once as an init plan, and
    /// only the chosen rows are read whole and locked.
    pub fn sorts_keys_before_rows(self) -> bool {
        matches!(self, Engine::Postgres)
    }

    /// Whether a `WITH` clause may hold `UPDATE … RETURNING` and `INSERT`
    /// (PostgreSQL only): a worker's completions and their attempt rows then go
    /// in one statement, one round trip and one implicit transaction, where
    /// `BEGIN`, two statements and `COMMIT` took four.
    pub fn writes_in_with(self) -> bool {
        matches!(self, Engine::Postgres)
    }

    /// Whether `UPDATE … RETURNING` is available (not on MySQL/MariaDB).
    pub fn has_returning(self) -> bool {
        matches!(self, Engine::Sqlite | Engine::Postgres)
    }

    /// What makes a `SELECT` lock its rows until the transaction ends (SQLite's
    /// `BEGIN IMMEDIATE` already holds the only write lock).
    pub fn lock_rows(self) -> &'static str {
        match self {
            Engine::Sqlite => "",
            Engine::Postgres | Engine::MySql => " FOR UPDATE",
        }
    }

    /// A condition finding the ids in `column` that begin (or end) with `part`
    /// through an index (migration 0017: an end through each id's last
    /// [`ID_PART_INDEXED`] characters; a beginning as a range in byte order, of
    /// the primary key on SQLite and MariaDB, of a `COLLATE "C"` index on
    /// PostgreSQL, whose key may sort by a linguistic collation),
    /// and the values it binds, in order. It may match a little more (`LIKE`
    /// ignores case on SQLite): the caller checks each id against `part`.
    pub fn id_part_condition(self, column: &str, end: IdEnd, part: &str) -> (String, Vec<String>) {
        match end {
            IdEnd::Start => {
                let bytes = match self {
                    Engine::Postgres => format!("{column} COLLATE \"C\""),
                    Engine::Sqlite | Engine::MySql => column.to_string(),
                };
                (
                    format!("{bytes} >= ? AND {bytes} < ?"),
                    // In byte order every id beginning with `part` sorts before
                    // `part` followed by the greatest character.
                    vec![part.to_string(), format!("{part}\u{10FFFF}")],
                )
            }
            IdEnd::End => {
                let pattern = format!("%{}", like_escaped(part));
                let chars = part.chars().count();
                if chars < ID_PART_INDEXED {
                    // Too short for the index: a scan (the search box refuses such parts).
                    return (format!("{column} LIKE ? ESCAPE '!'"), vec![pattern]);
                }
                let indexed = match self {
                    Engine::Sqlite => format!("substr({column}, -8)"),
                    Engine::Postgres => format!("right({column}, 8)"),
                    Engine::MySql => format!("{column}_tail"),
                };
                let tail = part.chars().skip(chars - ID_PART_INDEXED).collect();
                (
                    format!("{indexed} = ? AND {column} LIKE ? ESCAPE '!'"),
                    vec![tail, pattern],
                )
            }
        }
    }

    /// Rewrites `?` placeholders to `$n` for PostgreSQL. Herald's SQL never contains a
    /// literal question mark, so a plain scan is exact.
    pub fn sql<'a>(self, sql: &'a str) -> Cow<'a, str> {
        if self != Engine::Postgres || !sql.contains('?') {
            return Cow::Borrowed(sql);
        }
        let mut out = String::with_capacity(sql.len() + 8);
        let mut n = 0;
        for ch in sql.chars() {
            if ch == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(ch);
            }
        }
        Cow::Owned(out)
    }
}

/// How many characters of an id migration 0017 indexes (`8` in its SQL and in
/// [`Engine::id_part_condition`]'s): a searched part this long or longer is
/// found by lookup.
pub const ID_PART_INDEXED: usize = 8;

/// Which end of an id a searched part is matched at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdEnd {
    Start,
    End,
}

/// `text` as a `LIKE` pattern's literal part, with `!` as the escape character.
pub fn like_escaped(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c {
            '!' | '%' | '_' => vec!['!', c],
            c => vec![c],
        })
        .collect()
}

/// The class of a database error, from each engine's codes.
pub fn fault_of(err: &sqlx::Error) -> StoreFault {
    use sqlx::Error as E;
    match err {
        E::Io(_) | E::Tls(_) | E::PoolTimedOut | E::PoolClosed | E::WorkerCrashed => {
            StoreFault::Unreachable
        }
        E::Protocol(_) => StoreFault::Unreachable,
        E::Database(db) => {
            // MySQL/MariaDB: the error number says more than the SQLSTATE.
            if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                return match my.number() {
                    // Deadlock (a Galera certification conflict at COMMIT included).
                    1213 => StoreFault::Conflict,
                    // Lock wait timeout: another session holds the rows.
                    1205 => StoreFault::Locked,
                    // WSREP has not yet prepared node for application use; a Galera
                    // commit interrupted by losing the primary component.
                    1047 | 1180 => StoreFault::NoQuorum,
                    // Server shutdown in progress, connection killed, too many connections.
                    1053 | 1927 | 1040 => StoreFault::Refusing,
                    _ => StoreFault::Other,
                };
            }
            match db.code().as_deref() {
                // serialization_failure, deadlock_detected
                Some("40001") | Some("40P01") => StoreFault::Conflict,
                Some(code) if code.starts_with("08") => StoreFault::Unreachable,
                // admin_shutdown (connections terminated), crash_shutdown,
                // cannot_connect_now, too_many_connections, and "database is not
                // currently accepting connections" (55000 at connect).
                Some("57P01") | Some("57P02") | Some("57P03") | Some("53300") | Some("55000") => {
                    StoreFault::Refusing
                }
                // SQLITE_BUSY / SQLITE_LOCKED after the busy timeout: another
                // writer (a shell, a backup) holds the lock.
                Some("5") | Some("6") => StoreFault::Locked,
                _ => StoreFault::Other,
            }
        }
        _ => StoreFault::Other,
    }
}

impl StoreError {
    /// What class of failure this is (see [`StoreFault`]).
    pub fn fault(&self) -> StoreFault {
        match self {
            StoreError::Database(err) => fault_of(err),
            StoreError::Connect { source, .. } => match fault_of(source) {
                StoreFault::Other => StoreFault::Unreachable,
                fault => fault,
            },
            StoreError::GroupCommit { fault, .. } => *fault,
            _ => StoreFault::Other,
        }
    }
}

/// The scheme of the ephemeral store: `memory://`.
pub const MEMORY_SCHEME: &str = "memory";

/// Whether a store keeps what it commits across restarts, and so can carry the
/// durable ports (the outbox, its attempt log and audit trail).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// A database file or server: every port is available.
    Durable,
    /// `memory://`: SQLite in memory on one connection that lives as long as the
    /// pool. Runs, users, sessions and tokens work; there is no durable outbox.
    Ephemeral,
}

impl Durability {
    pub fn of_url(url: &str) -> Durability {
        if url.split(':').next() == Some(MEMORY_SCHEME) {
            Durability::Ephemeral
        } else {
            Durability::Durable
        }
    }

    /// Whether outbox events can be committed with the state change that owes them.
    pub fn has_durable_outbox(self) -> bool {
        self == Durability::Durable
    }

    /// The URL sqlx opens for a Herald database URL of this durability
    /// (`None`: the URL as given).
    pub fn connect_url(self) -> Option<&'static str> {
        match self {
            Durability::Durable => None,
            Durability::Ephemeral => Some("sqlite::memory:"),
        }
    }

    /// An in-memory database lives only as long as its one connection: the pool
    /// keeps it open for ever instead of recycling it.
    pub fn keeps_connection_forever(self) -> bool {
        self == Durability::Ephemeral
    }
}

/// `?, ?, ?` for `n` values.
pub fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// How many values a list of `n` is bound as: the next power of two, the rest filled
/// by repeating the last value. Variable-length `IN (…)` lists and multi-row inserts
/// then come in a handful of statement shapes that stay prepared, instead of one new
/// statement per length.
pub fn padded_len(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// `items`, then its last item again up to [`padded_len`].
pub fn padded<T>(items: &[T]) -> impl Iterator<Item = &T> {
    let fill = padded_len(items.len()) - items.len();
    items
        .iter()
        .chain(items.last().into_iter().cycle().take(fill))
}

/// A database URL with its password removed, safe for errors and logs.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            // Options such as `?password=` may carry secrets too.
            parsed.set_query(None);
            parsed.to_string()
        }
        Err(_) => url.split('@').next_back().unwrap_or_default().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_placeholders_are_numbered() {
        assert_eq!(
            Engine::Postgres.sql("a = ? AND b IN (?, ?)"),
            "a = $1 AND b IN ($2, $3)"
        );
        assert_eq!(Engine::MySql.sql("a = ?"), "a = ?");
    }

    #[test]
    fn engine_follows_the_url_scheme() {
        assert_eq!(Engine::from_url("sqlite://x.db").unwrap(), Engine::Sqlite);
        assert_eq!(
            Engine::from_url("postgres://u@h/db").unwrap(),
            Engine::Postgres
        );
        assert_eq!(
            Engine::from_url("mysql://root@h/db").unwrap(),
            Engine::MySql
        );
        assert_eq!(Engine::from_url("memory://").unwrap(), Engine::Sqlite);
        assert_eq!(Durability::of_url("memory://"), Durability::Ephemeral);
        assert!(!Durability::of_url("memory://").has_durable_outbox());
        assert!(Durability::of_url("sqlite://x.db").has_durable_outbox());
        assert!(Durability::of_url("postgres://u@h/db").has_durable_outbox());
        let err = Engine::from_url("redis://user:secret@h").unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
        assert!(!redact_url("postgres://h/db?password=hunter2").contains("hunter2"));
    }
}

/// Released migrations never change: their checksums are pinned here. A new schema
/// change is a new migration, pinned when it is released.
#[cfg(test)]
mod pinned_migrations {
    use super::Engine;

    const PINNED: &[(Engine, i64, &str)] = &[
        (Engine::Sqlite, 1, "08418a6848c6d4749d25a2051be2974e3b1d5fff65828f3dcb0ef5ed039226b5fb95fec7a72e2d3d402a1379a94680a1"),
        (Engine::Sqlite, 2, "008fa6fd27ca3c488fc8f7edc946fd30d6bbaf0a811c31ce8b33613b8e2b489a27b9e79b1e7be98fad70db4eaef01e00"),
        (Engine::Sqlite, 3, "3018f744ab9ce54b043f18a1fd895d652cd7ba7bbe2196decc4ee7535cc204e04f9a2a6d3bc471cd6637c3e8c3ea7b91"),
        (Engine::Sqlite, 5, "7c4b78e2e2c21d73cfcb68dcec7352bb10f1523b946e1911d0e461198f9872f60fade9c05aa21dc7515e4d7e20edd2b5"),
        (Engine::Sqlite, 6, "f463a8a30c22795804594b492422c4e915bac0f57f165dae63bfb2b7b24f05c8114fbc3f6b7a711a777eb67bef359037"),
        (Engine::Sqlite, 8, "30b9d34475dd565db2c55c9e90dfdeec1129ce0912a4380863e6ae8ebdbc793df84878b0a83c7be958c661c561fc17b4"),
        (Engine::Sqlite, 9, "dcc565c6c3624b1f66cfb19973958b90967d7a9e37134ce792f466f3b2af6731a918d8026479b52589bac2efcc1bc0ff"),
        (Engine::Sqlite, 10, "54381a98f2a894f8834200718bd670be5f0814a04686c076ebd3845df004c94a9f55ac2f996f36aee37582d9c831efaf"),
        (Engine::Sqlite, 11, "52975c10f6bee67e31bc0b2843718610908d6c325960699f8c14b370d343cd8b9bc7a93ac2e698e936159f85fdfa0d13"),
        (Engine::Sqlite, 12, "fb3e532d5905296ea57c9401c9166d059c192aa56fb6c65a296242703c122a62861619131ffbadb6786b9d9cd7c9375b"),
        (Engine::Sqlite, 13, "45a3a0359e04e29f877be7aca503cdc2b95a300f8d3412f3ffbac50648080779b5b2b6ff7fff4e7aa49f59b2b0f73873"),
        (Engine::Sqlite, 14, "35d2812b8f404b2860abc31e067c1d21a90d1d618984aeb9430349bccef8f0eccd7a617f792381e0c0110bdf6ebaa4d1"),
        (Engine::Sqlite, 15, "85175395976f0f01fd0462b2b4a0d721dafdc977e8c2c688df8e0715f1054d8aeaf7657ea49bb4c7e668769f27bc3846"),
        (Engine::Sqlite, 16, "8efea3eaa5ad75bf8bb20e3409c12d156381ad322065f42737e3887a4146087c0c9d2e856e5e66a1deec8930cbc06d45"),
        (Engine::Sqlite, 17, "a3108d1dfe8b2b0c058a9defd03860c6935c51a97c96d9a41f20bc57f7dcef1f16dcd7c83fb0059bd1c019de093c8f7f"),
        (Engine::Sqlite, 18, "0ecf2b7653815b5a66b09fb02cb193fc1aaa44783e79483c31694d84fc259596130b7bbc2508ce3f74e4d7563f96082c"),
        (Engine::Sqlite, 19, "04a947cbf62ce6b8a3e114fa954772db0fbd09cecbd94127a3fd783c52545e560a5a64d24a219b56355649e3e00d7dcd"),
        (Engine::Sqlite, 20, "d39e8670c35f51af1ae8136be934fbc657aba9a4ad4917208aa76b71a5d871d07f49f46dba37acfa48d0f299b4cfae04"),
        (Engine::Postgres, 1, "f07585c35a521d00a45214b194364358f69879bb7bfa502a533ad9bbf5a5f98b52c10a41682a18bdc6e8782e4d99e36b"),
        (Engine::Postgres, 2, "6b169987ccf09ab76f29de6c8b135d75ab34dc117ea759e397bdaa4983aa49244bee3d2b74b4025d3bf69761fddf349f"),
        (Engine::Postgres, 3, "3018f744ab9ce54b043f18a1fd895d652cd7ba7bbe2196decc4ee7535cc204e04f9a2a6d3bc471cd6637c3e8c3ea7b91"),
        (Engine::Postgres, 4, "3e4ebe43e02cf2a9367f7b9b4386fb7a1b21bd825cfda4778afd573676729454386c9d92c43530ac9dd964d3d916954e"),
        (Engine::Postgres, 5, "6a29c101dfc46f827c82eaaa468ef3aa2c1e5361a7bd523f42b7b23c5a970ecadf2e0b374dd3a05fecd2bc64375b3b61"),
        (Engine::Postgres, 6, "7a7e0d02a9fc5d37657cb83c1b49917ad3950c89380bd7c3436388f13672cabeb27e39222e0008ed1fe1b1b9e49e8d7b"),
        (Engine::Postgres, 8, "5f0f78da755c9f0e65b48502d4aaf1e7ced4f03b647ffe033850fda8be5b4a5d73037f2a31c9c7bf03b384cc74884d97"),
        (Engine::Postgres, 9, "36b077d111b6a2bf344864d4423d1d459fdc7cf34d634d0350264ed2c2d5a3680652b18f84eac440a084d4bfc29b2635"),
        (Engine::Postgres, 10, "54381a98f2a894f8834200718bd670be5f0814a04686c076ebd3845df004c94a9f55ac2f996f36aee37582d9c831efaf"),
        (Engine::Postgres, 11, "52975c10f6bee67e31bc0b2843718610908d6c325960699f8c14b370d343cd8b9bc7a93ac2e698e936159f85fdfa0d13"),
        (Engine::Postgres, 12, "fb3e532d5905296ea57c9401c9166d059c192aa56fb6c65a296242703c122a62861619131ffbadb6786b9d9cd7c9375b"),
        (Engine::Postgres, 13, "45a3a0359e04e29f877be7aca503cdc2b95a300f8d3412f3ffbac50648080779b5b2b6ff7fff4e7aa49f59b2b0f73873"),
        (Engine::Postgres, 14, "8b2e3822e159420d8a958abcf93fa7aa8a7bccdec3680856f90c8f1a31133376bd37498350ba99340ee0d2b9c2ce5982"),
        (Engine::Postgres, 15, "a1f6b2378d042f9a8234b339d192279edaa1452eca64788d461ee057d991b4a2bbc85e649f268df49e4be6119aa54d4a"),
        (Engine::Postgres, 16, "8efea3eaa5ad75bf8bb20e3409c12d156381ad322065f42737e3887a4146087c0c9d2e856e5e66a1deec8930cbc06d45"),
        (Engine::Postgres, 17, "d98f6a6fa32d88f84ac6ba2c77e2faf6c2bd30fbb443ec4a268da199e1b76e5c646e109109041e05e89c7bf7a82635eb"),
        (Engine::Postgres, 18, "0ecf2b7653815b5a66b09fb02cb193fc1aaa44783e79483c31694d84fc259596130b7bbc2508ce3f74e4d7563f96082c"),
        (Engine::Postgres, 19, "04a947cbf62ce6b8a3e114fa954772db0fbd09cecbd94127a3fd783c52545e560a5a64d24a219b56355649e3e00d7dcd"),
        (Engine::Postgres, 20, "d39e8670c35f51af1ae8136be934fbc657aba9a4ad4917208aa76b71a5d871d07f49f46dba37acfa48d0f299b4cfae04"),
        (Engine::MySql, 1, "1b581b8b02aa611a72b4e888aeef4dd44a7869630da4fa86cde52e817119c185a7e01de3ff2298b326134abdec30d1ec"),
        (Engine::MySql, 2, "b25ae144b43823f1198c00f86305ec54ac8eb18e0c2f0649c1ebbc4823ba181d67278967b56fa6af3fa4971365d7b6ce"),
        (Engine::MySql, 3, "067caa0ce8b2d63ada14b3d417c7bc98e8ee38ee13f80ffae457fb8b12c78234fe4957fb8ab6ca5e428b7462c7798ef4"),
        (Engine::MySql, 5, "2346cb536c62207403039feed5236aeea25f0d775e7cbfa704ba9d8a78a13f9d04d0c4d96ede013a443dc2e2b33c2bd0"),
        (Engine::MySql, 6, "5bfacc985cfc9accd92fcf668954a0e19bb85468de01bd50cf5a3e2530e18829736decb7d25b7172206ccad6e8381997"),
        (Engine::MySql, 8, "8c8d9a5787bca9e33b15b00ced0a98f3cfb59761cf0b99c0a10f9c771b0f1dc3d0b39d3bff80c02bbb13a22b54f0c534"),
        (Engine::MySql, 9, "29b8da10d6c0bd656891e6b1aaf54ebd2dfe4352686443deb2b8910d4b57e37648559b9e27a8cba5a7a6cc88231aab7d"),
        (Engine::MySql, 10, "54381a98f2a894f8834200718bd670be5f0814a04686c076ebd3845df004c94a9f55ac2f996f36aee37582d9c831efaf"),
        (Engine::MySql, 11, "65bf5270986abbdb4c754879d610cd8b03399d90c94a17fb003bed780bdbecd880fefce26ea4d22318958ed2e78fd4c0"),
        (Engine::MySql, 12, "66ee702ab2be41922408e3d428d151703363df329c6a675640302294fd6a43fa2f079478f61de44ea58c121c9ca058d2"),
        (Engine::MySql, 13, "c6839ab3ff2e6f58dfcdb4781618a14a6ac699cab48c6b4f0c9626b501a96d3658cad6f7c745096e7e030577a274aba5"),
        (Engine::MySql, 14, "8b2e3822e159420d8a958abcf93fa7aa8a7bccdec3680856f90c8f1a31133376bd37498350ba99340ee0d2b9c2ce5982"),
        (Engine::MySql, 15, "b65150ddba822bba0e662b06a469426449014e471af727cd1ad08c87b97a85f63eeb12e0c4b88319ecc5fd4707a703d6"),
        (Engine::MySql, 16, "494447dafd727bac89fb93a48a3bd33bf4b0724c1b37cf53591ad64aeae03d6dc92d4133e2c568346e3484323b9fc029"),
        (Engine::MySql, 17, "11dbdea4a01f71de6839c7cf865f2dfdc85a267db9d71dfd1933f445f99690023bd9ea29d584b90a873125c3294256be"),
        (Engine::MySql, 18, "a06bb03a22bc383931e49bd64dcb71ea8151d505eec16b84f795bf3df7117fa5e60bff387c8de8bbc2e4188376652d69"),
        (Engine::MySql, 19, "38d35a63dd230e6eda7e7ba350a95b86123244e7001b37e525849e2ab64d59ca45710dbd64b41a11196da9fd7c217ac5"),
        (Engine::MySql, 20, "d39e8670c35f51af1ae8136be934fbc657aba9a4ad4917208aa76b71a5d871d07f49f46dba37acfa48d0f299b4cfae04"),
    ];

    #[test]
    fn released_migrations_keep_their_checksums() {
        for engine in [Engine::Sqlite, Engine::Postgres, Engine::MySql] {
            for migration in engine.migrator().iter() {
                let actual = hex::encode(&migration.checksum);
                let pinned = PINNED
                    .iter()
                    .find(|(e, v, _)| *e == engine && *v == migration.version)
                    .map(|(_, _, sum)| *sum);
                assert_eq!(
                    pinned,
                    Some(actual.as_str()),
                    "{} migration {} ({}) changed or is not pinned",
                    engine.name(),
                    migration.version,
                    migration.description
                );
            }
        }
    }

    #[test]
    fn no_released_migration_is_missing() {
        for (engine, version, _) in PINNED {
            assert!(
                engine
                    .migrator()
                    .iter()
                    .any(|migration| migration.version == *version),
                "{} migration {version} was released and is gone",
                engine.name()
            );
        }
    }
}
