//! The Users page's port (`app::port::AccountsPort`) over the account service,
//! which checks `users:manage` and audits every change in its transaction.

use async_trait::async_trait;

use app::dto::{AccountOutcome, AccountsView, TokenRow, UserAction, UserRow};
use app::port::{AccountsPort, ConsoleError};
use vocab::{Role, Viewer};

use crate::http::error::console_error;
use crate::service::accounts::{AccountChange, AccountService, Actor};
use crate::service::{format_ms, ServiceError};

pub struct AccountsConsole {
    pub accounts: AccountService,
}

fn role_of(value: Option<&str>) -> Result<Role, ConsoleError> {
    value.and_then(Role::parse).ok_or_else(|| {
        console_error(ServiceError::invalid(
            "role",
            "must be reader, operator or admin",
        ))
    })
}

/// What a user action asks, from the page's words.
fn change_of(
    action: &str,
    role: Option<&str>,
    password: Option<String>,
) -> Result<AccountChange, ConsoleError> {
    let Some(action) = UserAction::parse(action) else {
        let known: Vec<&str> = UserAction::ALL.iter().map(|a| a.as_str()).collect();
        return Err(console_error(ServiceError::invalid(
            "action",
            format!(
                "{action:?} is not a user action: use one of {}",
                known.join(", ")
            ),
        )));
    };
    Ok(match action {
        UserAction::Role => AccountChange::Role(role_of(role)?),
        UserAction::Disable => AccountChange::Disable,
        UserAction::Enable => AccountChange::Enable,
        UserAction::ResetPassword => AccountChange::ResetPassword(password),
    })
}

/// What the page says a change did.
fn done(change: &AccountChange, username: &str) -> String {
    match change {
        AccountChange::Role(role) => format!("{username} is now {}.", role.as_str()),
        AccountChange::Disable => {
            format!("{username} is disabled: signed out everywhere, and cannot sign in.")
        }
        AccountChange::Enable => format!("{username} can sign in again."),
        AccountChange::ResetPassword(_) => {
            format!("{username}'s password is reset; their sessions have ended.")
        }
    }
}

#[async_trait]
impl AccountsPort for AccountsConsole {
    async fn list(&self, viewer: Option<&Viewer>) -> Result<AccountsView, ConsoleError> {
        let accounts = self.accounts.list(viewer).await.map_err(console_error)?;
        let you = viewer.map(|v| v.name.as_str());
        Ok(AccountsView {
            users: accounts
                .users
                .into_iter()
                .map(|user| UserRow {
                    is_you: Some(user.username.as_str()) == you,
                    disabled: user.is_disabled(),
                    id: user.id,
                    username: user.username,
                    role: user.role,
                    created_at: format_ms(user.created_at_ms),
                })
                .collect(),
            tokens: accounts
                .tokens
                .into_iter()
                .map(|token| TokenRow {
                    id: token.id,
                    name: token.name,
                    role: token.role,
                    created_at: format_ms(token.created_at_ms),
                    created_by: token.created_by,
                    revoked_at: token.revoked_at_ms.map(format_ms),
                })
                .collect(),
        })
    }

    async fn add_user(
        &self,
        viewer: Option<&Viewer>,
        username: String,
        role: String,
        password: Option<String>,
    ) -> Result<AccountOutcome, ConsoleError> {
        let role = role_of(Some(&role))?;
        let actor = viewer.ok_or_else(|| console_error(ServiceError::Unauthenticated))?;
        let added = self
            .accounts
            .add_user(Actor::Viewer(actor), &username, password.as_deref(), role)
            .await
            .map_err(console_error)?;
        Ok(AccountOutcome {
            message: format!(
                "Added {} as {}.",
                added.user.username,
                added.user.role.as_str()
            ),
            secret: added.generated_password,
        })
    }

    async fn change_user(
        &self,
        viewer: Option<&Viewer>,
        user_id: String,
        action: String,
        role: Option<String>,
        password: Option<String>,
    ) -> Result<AccountOutcome, ConsoleError> {
        let change = change_of(&action, role.as_deref(), password)?;
        let changed = self
            .accounts
            .change_user(viewer, &user_id, change.clone())
            .await
            .map_err(console_error)?;
        Ok(AccountOutcome {
            message: done(&change, &changed.user.username),
            secret: changed.generated_password,
        })
    }

    async fn create_token(
        &self,
        viewer: Option<&Viewer>,
        name: String,
        role: String,
    ) -> Result<AccountOutcome, ConsoleError> {
        let role = role_of(Some(&role))?;
        let actor = viewer.ok_or_else(|| console_error(ServiceError::Unauthenticated))?;
        let created = self
            .accounts
            .create_token(Actor::Viewer(actor), &name, role)
            .await
            .map_err(console_error)?;
        Ok(AccountOutcome {
            message: format!(
                "Created the {} token {}. Send it as Authorization: Bearer <token>.",
                created.token.role.as_str(),
                created.token.name
            ),
            secret: Some(created.secret),
        })
    }

    async fn revoke_token(
        &self,
        viewer: Option<&Viewer>,
        token_id: String,
    ) -> Result<AccountOutcome, ConsoleError> {
        let token = self
            .accounts
            .revoke_token(viewer, &token_id)
            .await
            .map_err(console_error)?;
        Ok(AccountOutcome {
            message: format!(
                "Revoked the token {}: it authenticates nothing now.",
                token.name
            ),
            secret: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_actions_and_roles_are_refused_by_name() {
        let err = change_of("promote", None, None).unwrap_err();
        assert_eq!(err.status, 400);
        assert!(err.message.contains("\"promote\""), "{}", err.message);
        let err = change_of("role", Some("owner"), None).unwrap_err();
        assert_eq!(err.status, 400);
        assert!(err.message.contains("role"), "{}", err.message);
        assert!(matches!(
            change_of("role", Some("admin"), None),
            Ok(AccountChange::Role(Role::Admin))
        ));
        assert!(matches!(
            change_of("reset_password", None, None),
            Ok(AccountChange::ResetPassword(None))
        ));
    }
}
