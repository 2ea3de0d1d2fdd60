//! Online backup of a SQLite store (issue 21, `herald backup --to FILE`): a
//! consistent copy made while Herald serves (`VACUUM INTO` reads one snapshot; in
//! WAL mode writers carry on beside it), then opened and checked — the file's
//! integrity, and every migration this build knows applied with its checksum.
//! PostgreSQL and MariaDB have their own tools; the error says which.

use std::path::{Path, PathBuf};

use sqlx::Row;

use super::engine::Engine;
use super::error::StoreError;
use super::sql::{SqlStore, StoreOptions};

/// Why a backup was not made, or not trusted.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "`herald backup` copies a SQLite store; for PostgreSQL use `pg_dump --format=custom --file=FILE DBNAME` (see docs/OPERATIONS.md, Backup and restore)"
    )]
    Postgres,
    #[error(
        "`herald backup` copies a SQLite store; for MariaDB/MySQL use `mariadb-dump --single-transaction --routines DBNAME > FILE` (see docs/OPERATIONS.md, Backup and restore)"
    )]
    MySql,
    #[error("{0} already exists; a backup never overwrites a file")]
    Exists(PathBuf),
    #[error("the backup at {path} failed its check: {why}")]
    Unverified { path: PathBuf, why: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What the check of a finished backup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupCheck {
    /// Migrations applied in the copy (all this build knows).
    pub migrations: usize,
    pub runs: i64,
    pub events: i64,
}

impl SqlStore {
    /// Copies this SQLite store to `to` while it serves, then opens the copy and
    /// checks it.
    pub async fn backup_to(&self, to: &Path) -> Result<BackupCheck, BackupError> {
        match self.engine() {
            Engine::Postgres => return Err(BackupError::Postgres),
            Engine::MySql => return Err(BackupError::MySql),
            Engine::Sqlite => {}
        }
        if to.exists() {
            return Err(BackupError::Exists(to.to_path_buf()));
        }
        let target = to.to_str().ok_or_else(|| BackupError::Unverified {
            path: to.to_path_buf(),
            why: "the path is not UTF-8".into(),
        })?;
        sqlx::query("VACUUM INTO ?")
            .bind(target)
            .execute(self.pool())
            .await
            .map_err(StoreError::from)?;
        check_copy(to).await
    }
}

/// Opens the copy at `path` (without migrating it) and checks its integrity and
/// its migrations.
async fn check_copy(path: &Path) -> Result<BackupCheck, BackupError> {
    let unverified = |why: String| BackupError::Unverified {
        path: path.to_path_buf(),
        why,
    };
    let copy = SqlStore::connect(&StoreOptions {
        url: format!("sqlite://{}", path.display()),
        max_connections: 1,
    })
    .await?;
    let checked = async {
        let integrity: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(copy.pool())
            .await
            .map_err(StoreError::from)?;
        if integrity != "ok" {
            return Err(unverified(format!("integrity check: {integrity}")));
        }
        let rows = sqlx::query(
            "SELECT version, checksum, CAST(success AS INTEGER) AS success FROM _sqlx_migrations",
        )
        .fetch_all(copy.pool())
        .await
        .map_err(StoreError::from)?;
        let mut applied = std::collections::HashMap::new();
        for row in &rows {
            let version: i64 = row.try_get("version").map_err(StoreError::from)?;
            let checksum: Vec<u8> = row.try_get("checksum").map_err(StoreError::from)?;
            let success: i64 = row.try_get("success").map_err(StoreError::from)?;
            applied.insert(version, (checksum, success == 1));
        }
        let migrator = Engine::Sqlite.migrator();
        for migration in migrator.iter() {
            match applied.get(&migration.version) {
                Some((checksum, true)) if *checksum == *migration.checksum => {}
                Some(_) => {
                    return Err(unverified(format!(
                        "migration {} is not applied as this build knows it",
                        migration.version
                    )))
                }
                None => {
                    return Err(unverified(format!(
                        "migration {} is missing",
                        migration.version
                    )))
                }
            }
        }
        let count = |table: &'static str| {
            let copy = &copy;
            async move {
                sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
                    .fetch_one(copy.pool())
                    .await
                    .map_err(StoreError::from)
            }
        };
        Ok(BackupCheck {
            migrations: migrator.iter().count(),
            runs: count("runs").await?,
            events: count("outbox_events").await?,
        })
    }
    .await;
    copy.close().await;
    checked
}
