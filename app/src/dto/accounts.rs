//! Users and API tokens as the Users page shows them (issue 23, item 6). No
//! password hash or token hash ever leaves the server.

use serde::{Deserialize, Serialize};
use vocab::Role;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRow {
    pub id: String,
    pub username: String,
    pub role: Role,
    pub created_at: String,
    pub disabled: bool,
    /// The signed-in admin's own row: it cannot be disabled or demoted from here.
    pub is_you: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub created_at: String,
    /// Who made it: a user's name, or `local` for the command line.
    pub created_by: Option<String>,
    pub revoked_at: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountsView {
    pub users: Vec<UserRow>,
    pub tokens: Vec<TokenRow>,
}

/// What an account action did, in words, and a secret to show once: a password
/// Herald made, or a new token's secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountOutcome {
    pub message: String,
    pub secret: Option<String>,
}

/// What the Users page asks of a user (the `action` argument of `change_user`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserAction {
    /// A new role (with the `role` argument).
    Role,
    Disable,
    Enable,
    /// A new password (the `password` argument, or none for one the server makes).
    ResetPassword,
}

impl UserAction {
    pub const ALL: [UserAction; 4] = [
        UserAction::Role,
        UserAction::Disable,
        UserAction::Enable,
        UserAction::ResetPassword,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            UserAction::Role => "role",
            UserAction::Disable => "disable",
            UserAction::Enable => "enable",
            UserAction::ResetPassword => "reset_password",
        }
    }

    pub fn parse(value: &str) -> Option<UserAction> {
        UserAction::ALL.into_iter().find(|a| a.as_str() == value)
    }
}
