//! The Users page's server functions (issue 23, item 6). The server implements
//! [`AccountsPort`](crate::port::AccountsPort) over its account service, where
//! `users:manage` is checked and every change is audited.

use leptos::prelude::*;

use super::Failure;
use crate::dto::{AccountOutcome, AccountsView};

#[cfg(feature = "ssr")]
mod server {
    use std::sync::Arc;

    use leptos::prelude::*;

    use crate::api::server::fail as failure;
    pub use crate::api::server::{from_port as fail, viewer};
    use crate::api::Failure;
    use crate::port::AccountsPort;

    pub fn port() -> Result<Arc<dyn AccountsPort>, Failure> {
        use_context::<Arc<dyn AccountsPort>>()
            .ok_or_else(|| failure(500, "accounts port missing from context"))
    }
}

/// An empty text field is no value.
#[cfg(feature = "ssr")]
fn given(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

#[server(prefix = "/console-api", endpoint = "accounts")]
pub async fn list_accounts() -> Result<AccountsView, Failure> {
    let viewer = server::viewer();
    server::port()?
        .list(viewer.as_ref())
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "user-add")]
pub async fn add_user(
    username: String,
    role: String,
    password: Option<String>,
) -> Result<AccountOutcome, Failure> {
    let viewer = server::viewer();
    server::port()?
        .add_user(viewer.as_ref(), username, role, given(password))
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "user-change")]
pub async fn change_user(
    user_id: String,
    action: String,
    role: Option<String>,
    password: Option<String>,
) -> Result<AccountOutcome, Failure> {
    let viewer = server::viewer();
    server::port()?
        .change_user(
            viewer.as_ref(),
            user_id,
            action,
            given(role),
            given(password),
        )
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "token-create")]
pub async fn create_token(name: String, role: String) -> Result<AccountOutcome, Failure> {
    let viewer = server::viewer();
    server::port()?
        .create_token(viewer.as_ref(), name, role)
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "token-revoke")]
pub async fn revoke_token(token_id: String) -> Result<AccountOutcome, Failure> {
    let viewer = server::viewer();
    server::port()?
        .revoke_token(viewer.as_ref(), token_id)
        .await
        .map_err(server::fail)
}
