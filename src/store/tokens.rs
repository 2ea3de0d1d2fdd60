//! API tokens for scripts, stored by hash.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use vocab::Role;

use super::error::StoreError;
use super::ports::{ApiToken, TokenRepository};
use super::row::{int, text};
use super::sql::SqlStore;

fn token_from_row(row: &AnyRow) -> Result<ApiToken, StoreError> {
    let role = text(row, "role")?;
    Ok(ApiToken {
        id: text(row, "id")?,
        name: text(row, "name")?,
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role {role:?}")))?,
        created_at_ms: int(row, "created_at")?,
    })
}

#[async_trait]
impl TokenRepository for SqlStore {
    async fn create_token(
        &self,
        name: &str,
        role: Role,
        secret_hash: &str,
    ) -> Result<ApiToken, StoreError> {
        let id = uuid::Uuid::now_v7().to_string();
        let sql = format!(
            "INSERT INTO api_tokens (id, name, secret_hash, role, created_at) VALUES (?, ?, ?, ?, {})",
            self.engine.now_ms()
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(&id)
            .bind(name)
            .bind(secret_hash)
            .bind(role.as_str())
            .execute(&self.pool)
            .await
            .map_err(|e| StoreError::unique_as(e, "token"))?;
        let row = sqlx::query(
            &self
                .engine
                .sql("SELECT id, name, role, created_at FROM api_tokens WHERE id = ?"),
        )
        .bind(&id)
        .fetch_one(&self.pool)
        .await?;
        token_from_row(&row)
    }

    async fn token_by_hash(&self, secret_hash: &str) -> Result<Option<ApiToken>, StoreError> {
        let row = sqlx::query(
            &self
                .engine
                .sql("SELECT id, name, role, created_at FROM api_tokens WHERE secret_hash = ?"),
        )
        .bind(secret_hash)
        .fetch_optional(&self.reads)
        .await?;
        row.as_ref().map(token_from_row).transpose()
    }
}
