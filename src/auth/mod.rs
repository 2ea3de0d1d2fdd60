//! Authentication: password hashes, API token secrets, sessions and login throttling.
//! Permission checks themselves live in the service layer (`crate::service`).

pub mod hashing_pool;
pub mod password;
pub mod session_store;
pub mod throttle;
pub mod token;
pub mod token_cache;

/// Session key under which the signed-in user's id is kept.
pub const SESSION_USER_KEY: &str = "user_id";
/// Session key under which the user's session epoch at sign-in is kept: a session
/// of an older epoch is over (see `AccountService::viewer_for_user`).
pub const SESSION_EPOCH_KEY: &str = "session_epoch";
