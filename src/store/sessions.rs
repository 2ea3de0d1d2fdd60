//! Server-side console sessions, kept in the same database so they survive a restart.

use async_trait::async_trait;

use super::error::StoreError;
use super::ports::SessionRepository;
use super::row::{int, text};
use super::sql::SqlStore;

#[async_trait]
impl SessionRepository for SqlStore {
    async fn create_session(
        &self,
        id: &str,
        data: &str,
        expires_at_ms: i64,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            &self
                .engine
                .sql("INSERT INTO sessions (id, data, expires_at) VALUES (?, ?, ?)"),
        )
        .bind(id)
        .bind(data)
        .bind(expires_at_ms)
        .execute(&self.pool)
        .await;
        match inserted {
            Ok(_) => Ok(true),
            Err(err) => match StoreError::unique_as(err, "session") {
                StoreError::AlreadyExists(_) => Ok(false),
                other => Err(other),
            },
        }
    }

    async fn save_session(
        &self,
        id: &str,
        data: &str,
        expires_at_ms: i64,
    ) -> Result<bool, StoreError> {
        let sql = "UPDATE sessions SET data = ?, expires_at = ? WHERE id = ?";
        let updated = sqlx::query(&self.engine.sql(sql))
            .bind(data)
            .bind(expires_at_ms)
            .bind(id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        // (sqlx asks MySQL for found rows, so an unchanged save still counts 1.)
        Ok(updated == 1)
    }

    async fn load_session(&self, id: &str) -> Result<Option<(String, i64)>, StoreError> {
        let sql = format!(
            "SELECT data, expires_at FROM sessions WHERE id = ? AND expires_at > {}",
            self.engine.now_ms()
        );
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref()
            .map(|row| Ok((text(row, "data")?, int(row, "expires_at")?)))
            .transpose()
    }

    async fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query(&self.engine.sql("DELETE FROM sessions WHERE id = ?"))
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn delete_expired_sessions(&self) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM sessions WHERE expires_at <= {}",
            self.engine.now_ms()
        );
        Ok(sqlx::query(&sql).execute(&self.pool).await?.rows_affected())
    }
}
