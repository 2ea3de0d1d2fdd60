//! Errors at the storage boundary.

use super::fault::StoreFault;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "unsupported database URL {0:?}: expected a sqlite:, postgres:, mysql: or memory:// URL"
    )]
    UnsupportedUrl(String),
    #[error("cannot open the database at {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0} already exists")]
    AlreadyExists(String),
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The shared transaction a write unit ran in did not commit; nothing of the
    /// unit was kept. `fault` is the class of the error that stopped it.
    #[error("the group commit failed: {why}")]
    GroupCommit { why: String, fault: StoreFault },
    /// Rows to be removed could not be archived; nothing was removed.
    #[error("cannot archive the rows to be removed: {0}")]
    Archive(#[source] std::io::Error),
}

impl StoreError {
    /// Maps a unique-key violation to `AlreadyExists(what)`; other errors pass through.
    pub(super) fn unique_as(err: sqlx::Error, what: impl Into<String>) -> StoreError {
        match err.as_database_error() {
            Some(db) if db.is_unique_violation() => StoreError::AlreadyExists(what.into()),
            _ => StoreError::Database(err),
        }
    }
}
