//! The storage port: what Herald's services need from a store, independent of engine.

use app::dto::{Role, RunStatus};
use async_trait::async_trait;

use super::StoreError;

#[derive(Clone, Debug)]
pub struct User {
    pub id: String,
    pub username: String,
    pub password_hash: String,
    pub role: Role,
    pub created_at_ms: i64,
}

#[derive(Clone, Debug)]
pub struct NewUser {
    pub username: String,
    pub password_hash: String,
    pub role: Role,
}

#[derive(Clone, Debug)]
pub struct ApiToken {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub created_at_ms: i64,
}

#[derive(Clone, Debug)]
pub struct Run {
    pub id: String,
    pub run_type: String,
    pub tenant: String,
    pub status: RunStatus,
    pub callback_url: Option<String>,
    /// The result snapshot as JSON text (a payload: only `data:read` may see it).
    pub result: Option<String>,
    pub transition_seq: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Clone, Debug)]
pub struct NewRun {
    pub run_type: String,
    pub tenant: String,
    pub callback_url: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct RunFilter {
    pub run_type: Option<String>,
    pub status: Option<RunStatus>,
    /// Only runs whose id sorts before this one (keyset pagination, newest first).
    pub before_id: Option<String>,
    pub limit: u32,
}

#[async_trait]
pub trait UserRepository: Send + Sync {
    async fn create_user(&self, user: NewUser) -> Result<User, StoreError>;
    async fn user_by_name(&self, username: &str) -> Result<Option<User>, StoreError>;
    async fn user_by_id(&self, id: &str) -> Result<Option<User>, StoreError>;
    async fn count_users(&self) -> Result<i64, StoreError>;
}

#[async_trait]
pub trait TokenRepository: Send + Sync {
    /// Stores a token by the hash of its secret; the secret itself is never stored.
    async fn create_token(
        &self,
        name: &str,
        role: Role,
        secret_hash: &str,
    ) -> Result<ApiToken, StoreError>;
    async fn token_by_hash(&self, secret_hash: &str) -> Result<Option<ApiToken>, StoreError>;
}

#[async_trait]
pub trait RunRepository: Send + Sync {
    async fn create_run(&self, run: NewRun) -> Result<Run, StoreError>;
    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError>;
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<Run>, StoreError>;
    async fn run_types(&self) -> Result<Vec<String>, StoreError>;
}

#[async_trait]
pub trait SessionRepository: Send + Sync {
    /// Inserts a new session; `false` when the id is already taken.
    async fn create_session(
        &self,
        id: &str,
        data: &str,
        expires_at_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Inserts or replaces a session's serialized data.
    async fn save_session(
        &self,
        id: &str,
        data: &str,
        expires_at_ms: i64,
    ) -> Result<(), StoreError>;
    /// An unexpired session's data and expiry (epoch milliseconds).
    async fn load_session(&self, id: &str) -> Result<Option<(String, i64)>, StoreError>;
    async fn delete_session(&self, id: &str) -> Result<(), StoreError>;
    async fn delete_expired_sessions(&self) -> Result<u64, StoreError>;
}
