//! Accounts: users, sign-in with throttling, API tokens, and resolving who a request is.

use std::sync::Arc;

use vocab::{Permission, Role, Viewer};

use super::{require, ServiceError};
use crate::auth::hashing_pool::{HashingPool, PoolError};
use crate::auth::password::{self, generate_password, MIN_PASSWORD_LEN};
use crate::auth::throttle::{LoginThrottle, Refusal};
use crate::auth::token;
use crate::auth::token_cache::TokenCache;
use crate::store::ports::{
    ApiToken, NewAuditEntry, NewUser, TokenRepository, User, UserChange, UserChangeRefusal,
    UserRepository,
};
use crate::store::{MAX_LISTED_TOKENS, MAX_LISTED_USERS};

pub const MAX_USERNAME_LEN: usize = 64;
/// Longer passwords are refused before hashing (argon2 would accept them, but
/// nobody types this much, and an attacker should not get to send megabytes).
pub const MAX_PASSWORD_LEN: usize = 1024;

#[derive(Clone)]
pub struct AccountService {
    users: Arc<dyn UserRepository>,
    tokens: Arc<dyn TokenRepository>,
    throttle: Arc<LoginThrottle>,
    /// argon2id takes ~19 MiB and a core: it runs on a few threads of its own.
    hashing: HashingPool,
    /// Tokens found valid a moment ago (`api_token_cache_ms`).
    token_cache: Arc<TokenCache>,
}

/// A newly created API token; `secret` is shown once and never stored.
pub struct CreatedToken {
    pub token: ApiToken,
    pub secret: String,
}

/// Who the audit trail names for an action the machine's owner takes (the
/// command line, or the first start creating the first admin).
pub const LOCAL_ACTOR: &str = "local";

/// Who adds a user or creates a token: the machine's owner (the command line,
/// the first start), or a viewer, who needs `users:manage`. Said outright, so no
/// caller can pass an absent viewer and get the owner's authority.
#[derive(Clone, Copy, Debug)]
pub enum Actor<'a> {
    Local,
    Viewer(&'a Viewer),
}

impl Actor<'_> {
    /// Checks the viewer's permission; the owner needs none.
    fn check(self) -> Result<(), ServiceError> {
        match self {
            Actor::Local => Ok(()),
            Actor::Viewer(viewer) => require(Some(viewer), Permission::UsersManage).map(|_| ()),
        }
    }

    fn name(self) -> String {
        match self {
            Actor::Local => LOCAL_ACTOR.to_string(),
            Actor::Viewer(viewer) => viewer.name.clone(),
        }
    }
}

/// A user just added or given a new password; `generated_password` is set when
/// Herald made the password, to be shown once.
pub struct WithPassword {
    pub user: User,
    pub generated_password: Option<String>,
}

/// What an admin does to a user from the console.
#[derive(Clone, Debug)]
pub enum AccountChange {
    Role(Role),
    Disable,
    Enable,
    /// A new password: the one given, or (`None`) one Herald makes and shows once.
    ResetPassword(Option<String>),
}

impl AccountChange {
    fn action(&self) -> &'static str {
        match self {
            AccountChange::Role(_) => "change_role",
            AccountChange::Disable => "disable_user",
            AccountChange::Enable => "enable_user",
            AccountChange::ResetPassword(_) => "reset_password",
        }
    }
}

/// Every user and token, for the Users page.
pub struct Accounts {
    pub users: Vec<User>,
    pub tokens: Vec<ApiToken>,
}

impl AccountService {
    pub fn new(
        users: Arc<dyn UserRepository>,
        tokens: Arc<dyn TokenRepository>,
        throttle: LoginThrottle,
        token_cache: TokenCache,
    ) -> Self {
        AccountService {
            users,
            tokens,
            throttle: Arc::new(throttle),
            hashing: HashingPool::per_core(),
            token_cache: Arc::new(token_cache),
        }
    }

    /// Creates a user, audited in the same transaction. `password` `None`: Herald
    /// makes one, returned once.
    pub async fn add_user(
        &self,
        actor: Actor<'_>,
        username: &str,
        password: Option<&str>,
        role: Role,
    ) -> Result<WithPassword, ServiceError> {
        actor.check()?;
        let username = validate_username(username)?;
        let (password_hash, generated_password) = self.password_hash(password).await?;
        let audit = NewAuditEntry {
            subject: format!("user {username} ({})", role.as_str()),
            action: "add_user".into(),
            actor: actor.name(),
            from_status: "new".into(),
            acknowledged_duplicate_risk: false,
            affected: 1,
            reason: None,
        };
        let user = self
            .users
            .create_user(
                NewUser {
                    username,
                    password_hash,
                    role,
                },
                &audit,
            )
            .await?;
        Ok(WithPassword {
            user,
            generated_password,
        })
    }

    /// The hash of `given` (checked), or of a password made here (returned to be
    /// shown once).
    async fn password_hash(
        &self,
        given: Option<&str>,
    ) -> Result<(String, Option<String>), ServiceError> {
        let (password, generated) = match given {
            Some(password) => {
                check_password(password)?;
                (password.to_string(), None)
            }
            None => {
                let made = generate_password();
                (made.clone(), Some(made))
            }
        };
        let hash = self
            .hashing_blocking(move || password::hash_password(&password))
            .await?
            .map_err(|e| ServiceError::Internal(e.to_string()))?;
        Ok((hash, generated))
    }

    /// Every user and token (`users:manage`).
    pub async fn list(&self, actor: Option<&Viewer>) -> Result<Accounts, ServiceError> {
        require(actor, Permission::UsersManage)?;
        Ok(Accounts {
            users: self.users.list_users(MAX_LISTED_USERS).await?,
            tokens: self.tokens.list_tokens(MAX_LISTED_TOKENS).await?,
        })
    }

    /// Changes a user (`users:manage`), audited in the same transaction. Refused:
    /// disabling, demoting or resetting yourself (ask another admin: nobody locks
    /// themselves out by a slip, and a reset would end your own session), and
    /// leaving no enabled admin. A disable or a password reset
    /// ends the user's sessions; a change that changes nothing writes nothing.
    pub async fn change_user(
        &self,
        actor: Option<&Viewer>,
        user_id: &str,
        change: AccountChange,
    ) -> Result<WithPassword, ServiceError> {
        let viewer = require(actor, Permission::UsersManage)?;
        let Some(current) = self.users.user_by_id(user_id).await? else {
            return Err(ServiceError::NotFound(format!("user {user_id}")));
        };
        let takes_yourself_out = matches!(
            change,
            AccountChange::Disable
                | AccountChange::ResetPassword(_)
                | AccountChange::Role(Role::Reader | Role::Operator)
        );
        if takes_yourself_out && current.username == viewer.name {
            return Err(ServiceError::Conflict(
                "you cannot disable, demote or reset your own account; another admin can".into(),
            ));
        }
        let action = change.action();
        let (store_change, generated_password, subject) = match change {
            AccountChange::Role(role) => (
                UserChange::Role(role),
                None,
                format!("user {} → {}", current.username, role.as_str()),
            ),
            AccountChange::Disable => (
                UserChange::Disabled(true),
                None,
                format!("user {}", current.username),
            ),
            AccountChange::Enable => (
                UserChange::Disabled(false),
                None,
                format!("user {}", current.username),
            ),
            AccountChange::ResetPassword(given) => {
                let (hash, generated) = self.password_hash(given.as_deref()).await?;
                (
                    UserChange::Password(hash),
                    generated,
                    format!("user {}", current.username),
                )
            }
        };
        let audit = NewAuditEntry {
            subject,
            action: action.into(),
            actor: viewer.name.clone(),
            from_status: String::new(),
            acknowledged_duplicate_risk: false,
            affected: 1,
            reason: None,
        };
        match self
            .users
            .change_user(user_id, &store_change, &audit)
            .await?
        {
            Ok((_, user)) => Ok(WithPassword {
                user,
                generated_password,
            }),
            Err(UserChangeRefusal::NotFound) => {
                Err(ServiceError::NotFound(format!("user {user_id}")))
            }
            Err(UserChangeRefusal::LastAdmin) => Err(ServiceError::Conflict(format!(
                "{} is the last enabled admin: make another user admin first",
                current.username
            ))),
        }
    }

    /// Revokes a token (`users:manage`), audited in the same transaction; a
    /// revoked token authenticates nothing from the next request on.
    pub async fn revoke_token(
        &self,
        actor: Option<&Viewer>,
        token_id: &str,
    ) -> Result<ApiToken, ServiceError> {
        let viewer = require(actor, Permission::UsersManage)?;
        let audit = NewAuditEntry {
            subject: "token".into(),
            action: "revoke_token".into(),
            actor: viewer.name.clone(),
            from_status: "active".into(),
            acknowledged_duplicate_risk: false,
            affected: 1,
            reason: None,
        };
        let revoked = self.tokens.revoke_token(token_id, &audit).await;
        // Before the answer, and on an error too (the commit may have landed): the
        // next request with this token is looked up again here.
        self.token_cache.revoked();
        revoked?.ok_or_else(|| ServiceError::NotFound(format!("token {token_id}")))
    }

    pub async fn user_count(&self) -> Result<i64, ServiceError> {
        Ok(self.users.count_users().await?)
    }

    /// Checks a password. The error never says whether the user exists.
    pub async fn sign_in(
        &self,
        username: &str,
        password: &str,
        client: &str,
    ) -> Result<User, ServiceError> {
        let username = username.trim();
        // Oversize input is refused before it costs memory or a hash: no user can
        // have such a name, so the answer is the same as for a wrong password.
        if username.is_empty()
            || username.len() > MAX_USERNAME_LEN
            || password.len() > MAX_PASSWORD_LEN
        {
            return Err(ServiceError::BadCredentials);
        }
        let attempt = match self.throttle.begin(username, client) {
            Ok(attempt) => attempt,
            Err(refusal) => {
                let scope = match refusal {
                    Refusal::Address => "address",
                    Refusal::User => "user",
                    Refusal::Client => "client",
                };
                tracing::warn!(client, scope, "sign-in throttled");
                return Err(ServiceError::Throttled);
            }
        };
        let checked = async {
            let user = self.users.user_by_name(username).await?;
            let stored = user.as_ref().map(|u| u.password_hash.clone());
            let candidate = password.to_string();
            let ok = self
                .hashing_blocking(move || password::verify_password(&candidate, stored.as_deref()))
                .await?;
            Ok::<_, ServiceError>((user, ok))
        };
        let (user, ok) = match checked.await {
            Ok(checked) => checked,
            // Never checked (the hasher was busy, the store failed): the attempt
            // is given back, so a real user retrying a 503 is not locked out.
            Err(err) => {
                self.throttle.abandoned(&attempt);
                return Err(err);
            }
        };
        match user {
            // A disabled user is refused like a wrong password: the answer never
            // says which, and the hash was checked either way (same timing).
            Some(user) if ok && !user.is_disabled() => {
                self.throttle.succeeded(&attempt);
                tracing::info!(user = %user.username, "signed in");
                Ok(user)
            }
            _ => {
                tracing::info!(client, "sign-in refused");
                Err(ServiceError::BadCredentials)
            }
        }
    }

    /// Runs password hashing on the hashing threads, a bounded number at once.
    async fn hashing_blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ServiceError> {
        self.hashing.run(work).await.map_err(|e| match e {
            // Transient: a flood of sign-ins outpaces hashing; the caller retries.
            PoolError::Busy => ServiceError::Unavailable(e.to_string()),
            PoolError::Gone => ServiceError::Internal(e.to_string()),
        })
    }

    /// The viewer behind a session's user id, if that user still exists, is
    /// enabled, and the session began in its current epoch (a password reset or a
    /// disable since ends it).
    pub async fn viewer_for_user(
        &self,
        user_id: &str,
        session_epoch: i64,
    ) -> Result<Option<Viewer>, ServiceError> {
        Ok(self
            .users
            .user_by_id(user_id)
            .await?
            .filter(|user| !user.is_disabled() && user.session_epoch == session_epoch)
            .map(|user| Viewer {
                name: user.username,
                role: user.role,
            }))
    }

    /// The viewer behind an API token secret.
    pub async fn viewer_for_token(&self, secret: &str) -> Result<Option<Viewer>, ServiceError> {
        if !secret.starts_with(token::TOKEN_PREFIX) {
            return Ok(None);
        }
        let hash = token::hash_secret(secret);
        if let Some(viewer) = self.token_cache.get(&hash) {
            return Ok(Some(viewer));
        }
        let start = self.token_cache.lookup_start();
        let Some(found) = self.tokens.token_by_hash(&hash).await? else {
            return Ok(None);
        };
        let viewer = Viewer {
            name: format!("token:{}", found.name),
            role: found.role,
        };
        self.token_cache.keep(start, hash, viewer.clone());
        Ok(Some(viewer))
    }

    pub async fn create_token(
        &self,
        actor: Actor<'_>,
        name: &str,
        role: Role,
    ) -> Result<CreatedToken, ServiceError> {
        actor.check()?;
        let name = name.trim();
        if name.is_empty() || name.len() > 128 {
            return Err(ServiceError::invalid("name", "must be 1 to 128 characters"));
        }
        let secret = token::generate_secret();
        // The store completes the subject with the token's name and id.
        let audit = NewAuditEntry {
            subject: format!("{} token", role.as_str()),
            action: "create_token".into(),
            actor: actor.name(),
            from_status: "new".into(),
            acknowledged_duplicate_risk: false,
            affected: 1,
            reason: None,
        };
        let token = self
            .tokens
            .create_token(name, role, &token::hash_secret(&secret), &audit)
            .await?;
        Ok(CreatedToken { token, secret })
    }
}

fn check_password(password: &str) -> Result<(), ServiceError> {
    if password.chars().count() < MIN_PASSWORD_LEN {
        return Err(ServiceError::invalid(
            "password",
            format!("must be at least {MIN_PASSWORD_LEN} characters"),
        ));
    }
    if password.len() > MAX_PASSWORD_LEN {
        return Err(ServiceError::invalid(
            "password",
            format!("must be at most {MAX_PASSWORD_LEN} bytes"),
        ));
    }
    Ok(())
}

fn validate_username(username: &str) -> Result<String, ServiceError> {
    let username = username.trim();
    if username.is_empty() || username.len() > MAX_USERNAME_LEN {
        return Err(ServiceError::invalid(
            "username",
            format!("must be 1 to {MAX_USERNAME_LEN} characters"),
        ));
    }
    if !username
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@'))
    {
        return Err(ServiceError::invalid(
            "username",
            "may hold only letters, digits and _ - . @",
        ));
    }
    Ok(username.to_string())
}
