//! Idempotency keys (issue 21): a create's key, claimed inside the create's own
//! write transaction and answered there, so the effect and its key commit
//! together, and a repeat (or a concurrent twin) finds the original answer.

use async_trait::async_trait;

use super::error::StoreError;
use super::ports::{IdempotencyKeys, KeyClaim, StoredAnswer, WriteTx};
use super::row::{opt_int, opt_text, text};
use super::sql::SqlStore;

impl SqlStore {
    async fn key_row<'e, E>(
        &self,
        executor: E,
        principal: &str,
        key: &str,
        lock: bool,
    ) -> Result<Option<(String, StoredAnswer)>, StoreError>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let sql = format!(
            "SELECT operation, request_hash, claim, status, body FROM idempotency_keys \
             WHERE principal = ? AND idem_key = ?{}",
            if lock { self.engine.lock_rows() } else { "" }
        );
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(principal)
            .bind(key)
            .fetch_optional(executor)
            .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some((
            text(&row, "claim")?,
            StoredAnswer {
                operation: text(&row, "operation")?,
                request_hash: text(&row, "request_hash")?,
                status: opt_int(&row, "status")?.and_then(|s| u16::try_from(s).ok()),
                body: opt_text(&row, "body")?,
            },
        )))
    }
}

#[async_trait]
impl IdempotencyKeys for SqlStore {
    async fn claim_key_in(
        &self,
        tx: &mut WriteTx,
        principal: &str,
        key: &str,
        operation: &str,
        request_hash: &str,
    ) -> Result<KeyClaim, StoreError> {
        // Insert-if-absent under a claim of our own, then read the row under its
        // lock: our claim means the key is ours; another's, that a first request
        // (committed, or committing before us) holds it.
        let claim = uuid::Uuid::new_v4().simple().to_string();
        let sql = format!(
            "INSERT INTO idempotency_keys (principal, idem_key, operation, request_hash, claim, created_at) \
             VALUES (?, ?, ?, ?, ?, {}) {}",
            self.engine.now_ms(),
            self.engine.insert_if_absent_tail("principal, idem_key")
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(principal)
            .bind(key)
            .bind(operation)
            .bind(request_hash)
            .bind(&claim)
            .execute(&mut **tx)
            .await?;
        match self.key_row(&mut **tx, principal, key, true).await? {
            Some((held, _)) if held == claim => Ok(KeyClaim::Fresh),
            Some((_, answer)) => Ok(KeyClaim::Taken(answer)),
            None => Err(StoreError::Corrupt(format!(
                "idempotency key {key:?} vanished as it was claimed"
            ))),
        }
    }

    async fn answer_key_in(
        &self,
        tx: &mut WriteTx,
        principal: &str,
        key: &str,
        status: u16,
        body: &str,
    ) -> Result<(), StoreError> {
        let sql =
            "UPDATE idempotency_keys SET status = ?, body = ? WHERE principal = ? AND idem_key = ?";
        sqlx::query(&self.engine.sql(sql))
            .bind(i64::from(status))
            .bind(body)
            .bind(principal)
            .bind(key)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn key_answer(
        &self,
        principal: &str,
        key: &str,
    ) -> Result<Option<StoredAnswer>, StoreError> {
        Ok(self
            .key_row(&self.pool, principal, key, false)
            .await?
            .map(|(_, answer)| answer))
    }
}
