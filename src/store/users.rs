//! Users of the console: created, listed and changed by admins, every change
//! audited in its own transaction.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use vocab::Role;

use super::error::StoreError;
use super::ports::{
    NewAuditEntry, NewUser, Transactions, User, UserChange, UserChangeRefusal, UserRepository,
};
use super::row::{int, opt_int, text};
use super::sql::SqlStore;

const USER_COLUMNS: &str =
    "id, username, password_hash, role, created_at, disabled_at, session_epoch";

/// Users a listing shows at most (a console's users are people: a few dozen).
pub const MAX_LISTED_USERS: u32 = 1_000;

fn user_from_row(row: &AnyRow) -> Result<User, StoreError> {
    let role = text(row, "role")?;
    Ok(User {
        id: text(row, "id")?,
        username: text(row, "username")?,
        password_hash: text(row, "password_hash")?,
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role {role:?}")))?,
        created_at_ms: int(row, "created_at")?,
        disabled_at_ms: opt_int(row, "disabled_at")?,
        session_epoch: int(row, "session_epoch")?,
    })
}

/// Whether `change` takes `user` out of the enabled admins.
fn removes_an_admin(user: &User, change: &UserChange) -> bool {
    let enabled_admin = user.role == Role::Admin && !user.is_disabled();
    enabled_admin
        && match change {
            UserChange::Role(role) => *role != Role::Admin,
            UserChange::Disabled(disabled) => *disabled,
            UserChange::Password(_) => false,
        }
}

/// Whether `change` leaves `user` as it is (no write, no audit row).
fn changes_nothing(user: &User, change: &UserChange) -> bool {
    match change {
        UserChange::Role(role) => user.role == *role,
        UserChange::Disabled(disabled) => user.is_disabled() == *disabled,
        UserChange::Password(_) => false,
    }
}

/// What the audit row says the user was before: its role for a role change, else
/// whether it was enabled.
fn state_before(user: &User, change: &UserChange) -> &'static str {
    match change {
        UserChange::Role(_) => user.role.as_str(),
        _ if user.is_disabled() => "disabled",
        _ => "enabled",
    }
}

impl SqlStore {
    async fn user_where<'e, E>(
        &self,
        executor: E,
        column: &str,
        value: &str,
        lock: bool,
    ) -> Result<Option<User>, StoreError>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let lock = if lock { self.engine.lock_rows() } else { "" };
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {column} = ?{lock}");
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(value)
            .fetch_optional(executor)
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }
}

#[async_trait]
impl UserRepository for SqlStore {
    async fn create_user(&self, user: NewUser, audit: &NewAuditEntry) -> Result<User, StoreError> {
        let id = uuid::Uuid::now_v7().to_string();
        let sql = format!(
            "INSERT INTO users (id, username, password_hash, role, created_at) VALUES (?, ?, ?, ?, {})",
            self.engine.now_ms()
        );
        let mut tx = self.begin_write().await?;
        sqlx::query(&self.engine.sql(&sql))
            .bind(&id)
            .bind(&user.username)
            .bind(&user.password_hash)
            .bind(user.role.as_str())
            .execute(&mut *tx)
            .await
            .map_err(|e| StoreError::unique_as(e, format!("user {:?}", user.username)))?;
        self.insert_audit(&mut *tx, audit).await?;
        let created = self
            .user_where(&mut *tx, "id", &id, false)
            .await?
            .ok_or_else(|| StoreError::Corrupt("created user vanished".into()))?;
        tx.commit().await?;
        Ok(created)
    }

    async fn user_by_name(&self, username: &str) -> Result<Option<User>, StoreError> {
        self.user_where(&self.pool, "username", username, false)
            .await
    }

    async fn user_by_id(&self, id: &str) -> Result<Option<User>, StoreError> {
        self.user_where(&self.pool, "id", id, false).await
    }

    async fn count_users(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn list_users(&self, limit: u32) -> Result<Vec<User>, StoreError> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users ORDER BY username LIMIT {limit}");
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(user_from_row).collect()
    }

    async fn change_user(
        &self,
        id: &str,
        change: &UserChange,
        audit: &NewAuditEntry,
    ) -> Result<Result<(User, User), UserChangeRefusal>, StoreError> {
        let mut tx = self.begin_write().await?;
        // Every change writes the one shared row first: changes queue behind each
        // other here, and on Galera (row locks stay on their node) two nodes'
        // concurrent changes cannot both certify.
        sqlx::query("UPDATE account_changes SET changes = changes + 1 WHERE id = 1")
            .execute(&mut *tx)
            .await?;
        // Then the enabled admins' rows, in one order: counted after any change
        // that took one of them out has committed.
        let sql = format!(
            "SELECT id FROM users WHERE role = 'admin' AND disabled_at IS NULL ORDER BY id{}",
            self.engine.lock_rows()
        );
        let admins = sqlx::query(&sql).fetch_all(&mut *tx).await?.len();
        let Some(before) = self.user_where(&mut *tx, "id", id, true).await? else {
            return Ok(Err(UserChangeRefusal::NotFound));
        };
        if removes_an_admin(&before, change) && admins <= 1 {
            return Ok(Err(UserChangeRefusal::LastAdmin));
        }
        if changes_nothing(&before, change) {
            return Ok(Ok((before.clone(), before)));
        }
        let now = self.engine.now_ms();
        let (set, value) = match change {
            UserChange::Role(role) => ("role = ?".to_string(), Some(role.as_str().to_string())),
            UserChange::Disabled(true) => (
                format!("disabled_at = {now}, session_epoch = session_epoch + 1"),
                None,
            ),
            UserChange::Disabled(false) => ("disabled_at = NULL".to_string(), None),
            UserChange::Password(hash) => (
                "password_hash = ?, session_epoch = session_epoch + 1".to_string(),
                Some(hash.clone()),
            ),
        };
        let sql = format!("UPDATE users SET {set} WHERE id = ?");
        let sql = self.engine.sql(&sql);
        let mut update = sqlx::query(&sql);
        if let Some(value) = value {
            update = update.bind(value);
        }
        update.bind(id).execute(&mut *tx).await?;
        let entry = NewAuditEntry {
            from_status: state_before(&before, change).to_string(),
            ..audit.clone()
        };
        self.insert_audit(&mut *tx, &entry).await?;
        let after = self
            .user_where(&mut *tx, "id", id, false)
            .await?
            .ok_or_else(|| StoreError::Corrupt("changed user vanished".into()))?;
        tx.commit().await?;
        Ok(Ok((before, after)))
    }
}
