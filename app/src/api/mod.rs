//! Server functions: the console's calls into the server. Each runs on the server,
//! finds the request's [`Viewer`] (set by the server's authentication layer) and
//! calls the [`ConsolePort`](crate::port::ConsolePort) (the Approvals page's, in
//! [`approvals`], the `ApprovalsPort`), whose service layer checks permissions. A refusal comes back as a [`Failure`] with its HTTP status, which
//! the server function's response also carries.

pub mod accounts;
pub mod approvals;
pub mod records;

use leptos::prelude::*;
use leptos::server_fn::codec::{Json, JsonEncoding};
use leptos::server_fn::error::{FromServerFnError, ServerFnErrorErr};
use serde::{Deserialize, Serialize};

use crate::dto::{
    AuditPage, BlockedLanes, BreakerClosed, BreakerList, BulkOutcome, BulkPreview, ConfigNotice,
    DeliveryPage, DeliveryQuery, DeliveryView, FailureGroups, OverviewQuery, OverviewView,
    RetryCommand, RunPage, RunView, SearchAnswer, SkipCommand, Viewer,
};
#[cfg(feature = "ssr")]
use crate::dto::{DeliveryFilter, RunQuery, RunStatus};

/// Why a server function failed: the HTTP status and a message for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub status: u16,
    pub message: String,
}

impl FromServerFnError for Failure {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        // Arguments that do not decode are the caller's mistake (400), a wrong
        // method too (405); anything else the framework reports is the server's.
        // (On the server, the only thing deserialized is the arguments.)
        let (status, message) = match value {
            ServerFnErrorErr::Args(why) | ServerFnErrorErr::MissingArg(why) => (400, why),
            #[cfg(feature = "ssr")]
            ServerFnErrorErr::Deserialization(why) => (400, why),
            ServerFnErrorErr::UnsupportedRequestMethod(method) => {
                (405, format!("{method} is not accepted here"))
            }
            other => (500, other.to_string()),
        };
        let message = if status == 400 {
            format!("the request's arguments could not be read: {message}")
        } else {
            message
        };
        #[cfg(feature = "ssr")]
        server::set_status(status);
        Failure { status, message }
    }
}

/// Server-side helpers every server function shares (the Approvals page's too).
#[cfg(feature = "ssr")]
pub(crate) mod server {
    use std::sync::Arc;

    use leptos::prelude::*;

    use super::Failure;
    use crate::dto::Viewer;
    use crate::port::{ConsoleError, ConsolePort};

    pub fn viewer() -> Option<Viewer> {
        use_context::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Viewer>().cloned())
    }

    pub fn port() -> Result<Arc<dyn ConsolePort>, Failure> {
        use_context::<Arc<dyn ConsolePort>>().ok_or_else(|| fail(500, "console port missing"))
    }

    /// Sets the HTTP status of the server function's response.
    pub fn set_status(status: u16) {
        if let Some(options) = use_context::<leptos_axum::ResponseOptions>() {
            if let Ok(code) = http::StatusCode::from_u16(status) {
                options.set_status(code);
            }
        }
    }

    /// A failure, with its status set on the response.
    pub fn fail(status: u16, message: impl Into<String>) -> Failure {
        set_status(status);
        Failure {
            status,
            message: message.into(),
        }
    }

    pub fn from_port(err: ConsoleError) -> Failure {
        fail(err.status, err.message)
    }
}

/// The signed-in viewer, or `None`.
#[server(prefix = "/console-api", endpoint = "viewer")]
pub async fn current_viewer() -> Result<Option<Viewer>, Failure> {
    Ok(server::viewer())
}

/// One page of runs, newest first, with their delivery counts.
#[server(prefix = "/console-api", endpoint = "runs")]
#[allow(clippy::too_many_arguments)]
pub async fn list_runs(
    run_type: Option<String>,
    status: Option<String>,
    tenant: Option<String>,
    delivery: Option<String>,
    created_from: Option<String>,
    created_to: Option<String>,
    after: Option<String>,
) -> Result<RunPage, Failure> {
    let status = match status.as_deref() {
        None | Some("") => None,
        Some(value) => Some(
            RunStatus::parse(value)
                .ok_or_else(|| server::fail(400, format!("unknown status {value:?}")))?,
        ),
    };
    let delivery = match delivery.as_deref() {
        None | Some("") => None,
        Some(value) => Some(
            DeliveryFilter::parse(value)
                .ok_or_else(|| server::fail(400, format!("unknown delivery state {value:?}")))?,
        ),
    };
    let query = RunQuery {
        run_type,
        status,
        tenant,
        delivery,
        created_from,
        created_to,
        after,
        limit: None,
    };
    let viewer = server::viewer();
    server::port()?
        .list_runs(viewer.as_ref(), query)
        .await
        .map_err(server::from_port)
}

/// A run, its deliveries and their attempt timelines, redacted for the viewer.
#[server(prefix = "/console-api", endpoint = "run")]
pub async fn load_run(id: String) -> Result<RunView, Failure> {
    let viewer = server::viewer();
    server::port()?
        .run_view(viewer.as_ref(), &id)
        .await
        .map_err(server::from_port)
}

/// What this node's configuration keeps from working (empty: nothing).
#[server(prefix = "/console-api", endpoint = "config-notices")]
pub async fn config_notices() -> Result<Vec<ConfigNotice>, Failure> {
    let viewer = server::viewer();
    server::port()?
        .config_notices(viewer.as_ref())
        .await
        .map_err(server::from_port)
}

/// Retries one delivery from the state the operator saw (a compare-and-set).
#[server(prefix = "/console-api", endpoint = "retry", input = Json)]
pub async fn retry_delivery(command: RetryCommand) -> Result<DeliveryView, Failure> {
    let viewer = server::viewer();
    server::port()?
        .retry_delivery(viewer.as_ref(), command)
        .await
        .map_err(server::from_port)
}

/// The operators' audit trail, newest first.
#[server(prefix = "/console-api", endpoint = "audit")]
pub async fn audit_trail(after: Option<String>) -> Result<AuditPage, Failure> {
    let viewer = server::viewer();
    server::port()?
        .audit(viewer.as_ref(), after)
        .await
        .map_err(server::from_port)
}

/// What a pasted id (or a part of one) names, and the page that shows it.
#[server(prefix = "/console-api", endpoint = "find")]
pub async fn find_by_id(q: String) -> Result<SearchAnswer, Failure> {
    let viewer = server::viewer();
    server::port()?
        .find_by_id(viewer.as_ref(), q)
        .await
        .map_err(server::from_port)
}

/// One page of the outbox: every delivery of every source, filtered, newest first.
#[server(prefix = "/console-api", endpoint = "deliveries", input = Json)]
pub async fn list_deliveries(query: DeliveryQuery) -> Result<DeliveryPage, Failure> {
    let viewer = server::viewer();
    server::port()?
        .list_deliveries(viewer.as_ref(), query)
        .await
        .map_err(server::from_port)
}

/// The deliveries that need attention, grouped by kind, destination and cause.
#[server(prefix = "/console-api", endpoint = "failure-groups", input = Json)]
pub async fn list_failure_groups() -> Result<FailureGroups, Failure> {
    let viewer = server::viewer();
    server::port()?
        .failure_groups(viewer.as_ref())
        .await
        .map_err(server::from_port)
}

/// How delivery went over the last hour or day, from the per-minute rollups.
#[server(prefix = "/console-api", endpoint = "overview", input = Json)]
pub async fn load_overview(query: OverviewQuery) -> Result<OverviewView, Failure> {
    let viewer = server::viewer();
    server::port()?
        .overview(viewer.as_ref(), query)
        .await
        .map_err(server::from_port)
}

/// How many deliveries a bulk retry of this filter would retry.
#[server(prefix = "/console-api", endpoint = "bulk-preview", input = Json)]
pub async fn preview_bulk_retry(query: DeliveryQuery) -> Result<BulkPreview, Failure> {
    let viewer = server::viewer();
    server::port()?
        .bulk_preview(viewer.as_ref(), query)
        .await
        .map_err(server::from_port)
}

/// Retries everything this filter matches (capped), each as its own compare-and-set.
#[server(prefix = "/console-api", endpoint = "bulk-retry", input = Json)]
pub async fn bulk_retry(
    query: DeliveryQuery,
    allow_uncertain: bool,
) -> Result<BulkOutcome, Failure> {
    let viewer = server::viewer();
    server::port()?
        .bulk_retry(viewer.as_ref(), query, allow_uncertain)
        .await
        .map_err(server::from_port)
}

/// Destination circuit breakers (issue 10), open and half-open first.
#[server(prefix = "/console-api", endpoint = "breakers")]
pub async fn destination_breakers() -> Result<BreakerList, Failure> {
    let viewer = server::viewer();
    server::port()?
        .breakers(viewer.as_ref())
        .await
        .map_err(server::from_port)
}

/// The ordered lanes whose head waits for an operator (issue 22).
#[server(prefix = "/console-api", endpoint = "blocked-lanes")]
pub async fn list_blocked_lanes() -> Result<BlockedLanes, Failure> {
    let viewer = server::viewer();
    server::port()?
        .blocked_lanes(viewer.as_ref())
        .await
        .map_err(server::from_port)
}

/// Skips a failed or uncertain delivery for good, with a reason (audited).
#[server(prefix = "/console-api", endpoint = "skip", input = Json)]
pub async fn skip_delivery(
    event_id: String,
    command: SkipCommand,
) -> Result<DeliveryView, Failure> {
    let viewer = server::viewer();
    server::port()?
        .skip_delivery(viewer.as_ref(), event_id, command)
        .await
        .map_err(server::from_port)
}

/// Closes a destination's breaker by hand (audited).
#[server(prefix = "/console-api", endpoint = "close-breaker")]
pub async fn close_destination_breaker(destination: String) -> Result<BreakerClosed, Failure> {
    let viewer = server::viewer();
    server::port()?
        .close_breaker(viewer.as_ref(), destination)
        .await
        .map_err(server::from_port)
}
