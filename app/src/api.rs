//! Server functions: the console's calls into the server. Each runs on the server,
//! finds the request's [`Viewer`] (set by the server's authentication layer) and
//! calls the [`ConsolePort`](crate::port::ConsolePort), whose service layer checks
//! permissions.

use leptos::prelude::*;

use crate::dto::{RunPage, Viewer};
#[cfg(feature = "ssr")]
use crate::dto::{RunQuery, RunStatus};

#[cfg(feature = "ssr")]
mod server {
    use std::sync::Arc;

    use leptos::prelude::*;

    use crate::dto::Viewer;
    use crate::port::ConsolePort;

    pub fn viewer() -> Option<Viewer> {
        use_context::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Viewer>().cloned())
    }

    pub fn port() -> Result<Arc<dyn ConsolePort>, ServerFnError> {
        use_context::<Arc<dyn ConsolePort>>()
            .ok_or_else(|| ServerFnError::new("console port missing from context"))
    }

    /// Sets the HTTP status of a failed server function call.
    pub fn fail(status: u16, message: String) -> ServerFnError {
        if let Some(options) = use_context::<leptos_axum::ResponseOptions>() {
            if let Ok(code) = http::StatusCode::from_u16(status) {
                options.set_status(code);
            }
        }
        ServerFnError::new(message)
    }
}

/// The signed-in viewer, or `None`.
#[server(prefix = "/console-api", endpoint = "viewer")]
pub async fn current_viewer() -> Result<Option<Viewer>, ServerFnError> {
    Ok(server::viewer())
}

/// One page of runs, newest first.
#[server(prefix = "/console-api", endpoint = "runs")]
pub async fn list_runs(
    run_type: Option<String>,
    status: Option<String>,
    after: Option<String>,
) -> Result<RunPage, ServerFnError> {
    let status = match status.as_deref() {
        None | Some("") => None,
        Some(value) => Some(
            RunStatus::parse(value)
                .ok_or_else(|| server::fail(400, format!("unknown status {value:?}")))?,
        ),
    };
    let query = RunQuery {
        run_type,
        status,
        after,
        limit: None,
    };
    let viewer = server::viewer();
    server::port()?
        .list_runs(viewer.as_ref(), query)
        .await
        .map_err(|e| server::fail(e.status, e.message))
}
