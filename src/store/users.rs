//! Users of the console.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use vocab::Role;

use super::error::StoreError;
use super::ports::{NewUser, User, UserRepository};
use super::row::{int, text};
use super::sql::SqlStore;

const USER_COLUMNS: &str = "id, username, password_hash, role, created_at";

fn user_from_row(row: &AnyRow) -> Result<User, StoreError> {
    let role = text(row, "role")?;
    Ok(User {
        id: text(row, "id")?,
        username: text(row, "username")?,
        password_hash: text(row, "password_hash")?,
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role {role:?}")))?,
        created_at_ms: int(row, "created_at")?,
    })
}

impl SqlStore {
    async fn user_where(&self, column: &str, value: &str) -> Result<Option<User>, StoreError> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {column} = ?");
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(value)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }
}

#[async_trait]
impl UserRepository for SqlStore {
    async fn create_user(&self, user: NewUser) -> Result<User, StoreError> {
        let id = uuid::Uuid::now_v7().to_string();
        let sql = format!(
            "INSERT INTO users (id, username, password_hash, role, created_at) VALUES (?, ?, ?, ?, {})",
            self.engine.now_ms()
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(&id)
            .bind(&user.username)
            .bind(&user.password_hash)
            .bind(user.role.as_str())
            .execute(&self.pool)
            .await
            .map_err(|e| StoreError::unique_as(e, format!("user {:?}", user.username)))?;
        self.user_by_id(&id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("created user vanished".into()))
    }

    async fn user_by_name(&self, username: &str) -> Result<Option<User>, StoreError> {
        self.user_where("username", username).await
    }

    async fn user_by_id(&self, id: &str) -> Result<Option<User>, StoreError> {
        self.user_where("id", id).await
    }

    async fn count_users(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&self.pool)
            .await?)
    }
}
