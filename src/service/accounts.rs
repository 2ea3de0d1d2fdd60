//! Accounts: users, sign-in with throttling, API tokens, and resolving who a request is.

use std::sync::Arc;

use vocab::{Permission, Role, Viewer};

use super::{require, ServiceError};
use crate::auth::hashing_pool::{HashingPool, PoolError};
use crate::auth::password::{self, MIN_PASSWORD_LEN};
use crate::auth::throttle::{LoginThrottle, Refusal};
use crate::auth::token;
use crate::store::ports::{NewUser, TokenRepository, User, UserRepository};

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
}

/// A newly created API token; `secret` is shown once and never stored.
pub struct CreatedToken {
    pub name: String,
    pub role: Role,
    pub secret: String,
}

impl AccountService {
    pub fn new(
        users: Arc<dyn UserRepository>,
        tokens: Arc<dyn TokenRepository>,
        throttle: LoginThrottle,
    ) -> Self {
        AccountService {
            users,
            tokens,
            throttle: Arc::new(throttle),
            hashing: HashingPool::per_core(),
        }
    }

    /// Creates a user. `actor` is `None` only for the local CLI and first start, which
    /// act with the machine owner's authority.
    pub async fn add_user(
        &self,
        actor: Option<&Viewer>,
        username: &str,
        password: &str,
        role: Role,
    ) -> Result<User, ServiceError> {
        if actor.is_some() {
            require(actor, Permission::UsersManage)?;
        }
        let username = validate_username(username)?;
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
        let password = password.to_string();
        let password_hash = self
            .hashing_blocking(move || password::hash_password(&password))
            .await?
            .map_err(|e| ServiceError::Internal(e.to_string()))?;
        Ok(self
            .users
            .create_user(NewUser {
                username,
                password_hash,
                role,
            })
            .await?)
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
            Some(user) if ok => {
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

    /// The viewer behind a session's user id, if that user still exists.
    pub async fn viewer_for_user(&self, user_id: &str) -> Result<Option<Viewer>, ServiceError> {
        Ok(self.users.user_by_id(user_id).await?.map(|user| Viewer {
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
        Ok(self.tokens.token_by_hash(&hash).await?.map(|t| Viewer {
            name: format!("token:{}", t.name),
            role: t.role,
        }))
    }

    pub async fn create_token(
        &self,
        actor: Option<&Viewer>,
        name: &str,
        role: Role,
    ) -> Result<CreatedToken, ServiceError> {
        if actor.is_some() {
            require(actor, Permission::UsersManage)?;
        }
        let name = name.trim();
        if name.is_empty() || name.len() > 128 {
            return Err(ServiceError::invalid("name", "must be 1 to 128 characters"));
        }
        let secret = token::generate_secret();
        let created = self
            .tokens
            .create_token(name, role, &token::hash_secret(&secret))
            .await?;
        Ok(CreatedToken {
            name: created.name,
            role: created.role,
            secret,
        })
    }
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
