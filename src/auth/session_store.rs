//! tower-sessions storage on Herald's own database, through the storage port.

use std::sync::Arc;

use async_trait::async_trait;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{Error, Result};
use tower_sessions::SessionStore;

use crate::store::ports::SessionRepository;

#[derive(Clone)]
pub struct DbSessionStore {
    repo: Arc<dyn SessionRepository>,
}

impl std::fmt::Debug for DbSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DbSessionStore")
    }
}

impl DbSessionStore {
    pub fn new(repo: Arc<dyn SessionRepository>) -> Self {
        DbSessionStore { repo }
    }

    pub async fn delete_expired(&self) -> Result<u64> {
        self.repo
            .delete_expired_sessions()
            .await
            .map_err(|e| Error::Backend(e.to_string()))
    }
}

fn encode(record: &Record) -> Result<(String, i64)> {
    let data = serde_json::to_string(&record.data).map_err(|e| Error::Encode(e.to_string()))?;
    let expires_at_ms = (record.expiry_date.unix_timestamp_nanos() / 1_000_000) as i64;
    Ok((data, expires_at_ms))
}

#[async_trait]
impl SessionStore for DbSessionStore {
    /// Inserts under a fresh id, drawing a new one on the (astronomically rare) collision.
    async fn create(&self, record: &mut Record) -> Result<()> {
        let (data, expires_at_ms) = encode(record)?;
        loop {
            let created = self
                .repo
                .create_session(&record.id.to_string(), &data, expires_at_ms)
                .await
                .map_err(|e| Error::Backend(e.to_string()))?;
            if created {
                return Ok(());
            }
            record.id = Id::default();
        }
    }

    async fn save(&self, record: &Record) -> Result<()> {
        let (data, expires_at_ms) = encode(record)?;
        // A session deleted meanwhile (signed out) stays deleted: the save updates
        // nothing, and the cookie it answers with names no session.
        self.repo
            .save_session(&record.id.to_string(), &data, expires_at_ms)
            .await
            .map(|_| ())
            .map_err(|e| Error::Backend(e.to_string()))
    }

    async fn load(&self, id: &Id) -> Result<Option<Record>> {
        let Some((data, expires_at_ms)) = self
            .repo
            .load_session(&id.to_string())
            .await
            .map_err(|e| Error::Backend(e.to_string()))?
        else {
            return Ok(None);
        };
        let data = serde_json::from_str(&data).map_err(|e| Error::Decode(e.to_string()))?;
        let expiry_date =
            time::OffsetDateTime::from_unix_timestamp_nanos(expires_at_ms as i128 * 1_000_000)
                .map_err(|e| Error::Decode(e.to_string()))?;
        Ok(Some(Record {
            id: *id,
            data,
            expiry_date,
        }))
    }

    async fn delete(&self, id: &Id) -> Result<()> {
        self.repo
            .delete_session(&id.to_string())
            .await
            .map_err(|e| Error::Backend(e.to_string()))
    }
}
