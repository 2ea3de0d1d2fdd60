//! API tokens for scripts, stored by hash; created and revoked with an audit row
//! in the same transaction.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use vocab::Role;

use super::error::StoreError;
use super::ports::{ApiToken, NewAuditEntry, TokenRepository, Transactions};
use super::row::{int, opt_int, opt_text, text};
use super::sql::SqlStore;

const TOKEN_COLUMNS: &str = "id, name, role, created_at, created_by, revoked_at";

/// Tokens a listing shows at most.
pub const MAX_LISTED_TOKENS: u32 = 1_000;

fn token_from_row(row: &AnyRow) -> Result<ApiToken, StoreError> {
    let role = text(row, "role")?;
    Ok(ApiToken {
        id: text(row, "id")?,
        name: text(row, "name")?,
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role {role:?}")))?,
        created_at_ms: int(row, "created_at")?,
        created_by: opt_text(row, "created_by")?,
        revoked_at_ms: opt_int(row, "revoked_at")?,
    })
}

impl SqlStore {
    async fn token_by_id<'e, E>(
        &self,
        executor: E,
        id: &str,
        lock: bool,
    ) -> Result<Option<ApiToken>, StoreError>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let lock = if lock { self.engine.lock_rows() } else { "" };
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE id = ?{lock}");
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(id)
            .fetch_optional(executor)
            .await?;
        row.as_ref().map(token_from_row).transpose()
    }
}

#[async_trait]
impl TokenRepository for SqlStore {
    async fn create_token(
        &self,
        name: &str,
        role: Role,
        secret_hash: &str,
        audit: &NewAuditEntry,
    ) -> Result<ApiToken, StoreError> {
        let id = uuid::Uuid::now_v7().to_string();
        let sql = format!(
            "INSERT INTO api_tokens (id, name, secret_hash, role, created_by, created_at) VALUES (?, ?, ?, ?, ?, {})",
            self.engine.now_ms()
        );
        let mut tx = self.begin_write().await?;
        sqlx::query(&self.engine.sql(&sql))
            .bind(&id)
            .bind(name)
            .bind(secret_hash)
            .bind(role.as_str())
            .bind(&audit.actor)
            .execute(&mut *tx)
            .await
            .map_err(|e| StoreError::unique_as(e, "token"))?;
        let entry = NewAuditEntry {
            subject: format!("{} {name} ({id})", audit.subject),
            ..audit.clone()
        };
        self.insert_audit(&mut *tx, &entry).await?;
        let created = self
            .token_by_id(&mut *tx, &id, false)
            .await?
            .ok_or_else(|| StoreError::Corrupt("created token vanished".into()))?;
        tx.commit().await?;
        Ok(created)
    }

    async fn token_by_hash(&self, secret_hash: &str) -> Result<Option<ApiToken>, StoreError> {
        let sql = format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE secret_hash = ? AND revoked_at IS NULL"
        );
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(secret_hash)
            .fetch_optional(&self.reads)
            .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    async fn list_tokens(&self, limit: u32) -> Result<Vec<ApiToken>, StoreError> {
        let sql = format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at DESC, id DESC LIMIT {limit}"
        );
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(token_from_row).collect()
    }

    async fn revoke_token(
        &self,
        id: &str,
        audit: &NewAuditEntry,
    ) -> Result<Option<ApiToken>, StoreError> {
        let mut tx = self.begin_write().await?;
        let Some(before) = self.token_by_id(&mut *tx, id, true).await? else {
            return Ok(None);
        };
        if before.revoked_at_ms.is_some() {
            return Ok(Some(before));
        }
        let sql = format!(
            "UPDATE api_tokens SET revoked_at = {} WHERE id = ?",
            self.engine.now_ms()
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let entry = NewAuditEntry {
            subject: format!("{} {} ({id})", audit.subject, before.name),
            ..audit.clone()
        };
        self.insert_audit(&mut *tx, &entry).await?;
        let after = self
            .token_by_id(&mut *tx, id, false)
            .await?
            .ok_or_else(|| StoreError::Corrupt("revoked token vanished".into()))?;
        tx.commit().await?;
        Ok(Some(after))
    }
}
