//! `GET /console-api/live` (issue 23, item 5): one Server-Sent Events stream per
//! console tab carrying change notices, never data (`crate::changes`); the page
//! refetches what it shows. Bounded: at most `live_max_streams` streams a
//! server (past it a 503, and the tab polls), a notice at once, then none for
//! [`MIN_GAP`] (changes in between are one notice), and a stream
//! ends after [`LIFETIME`] (the browser reconnects and is authenticated anew,
//! so a signed-out or disabled user's stream does not outlive its session for
//! long).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use tokio::time::Instant;

use super::error::ApiError;
use super::extract::MaybeViewer;
use super::state::AppState;
use crate::service::ServiceError;

/// The stream's address (under the server functions' prefix, beside them).
pub const LIVE_PATH: &str = "/console-api/live";
/// The least time between two notices of one stream (the old poll's interval).
pub const MIN_GAP: Duration = Duration::from_secs(2);

/// What a stream does next.
#[derive(Clone, Copy)]
enum Step {
    /// Say it is open.
    Ready,
    /// Wait for a change.
    Wait,
    /// Rest after a notice, then wait for a change.
    Rest,
}
/// How long a stream lasts before the browser opens a new one.
pub const LIFETIME: Duration = Duration::from_secs(600);
/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How often a stream writes a keep-alive: every [`KEEP_ALIVE`], or at a third
/// of `http_idle_timeout_secs` where that is shorter, so a quiet stream is
/// never taken for an idle connection and closed.
fn keep_alive_every(idle_timeout_secs: u64) -> Duration {
    match idle_timeout_secs {
        0 => KEEP_ALIVE,
        secs => KEEP_ALIVE.min(Duration::from_secs(secs) / 3),
    }
}

pub async fn stream(State(state): State<AppState>, MaybeViewer(viewer): MaybeViewer) -> Response {
    if viewer.is_none() {
        return ApiError::from(ServiceError::Unauthenticated).into_response();
    }
    let Ok(place) = state.live_streams.clone().try_acquire_owned() else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "live_streams_full",
            "this server pushes live updates to as many tabs as it may (live_max_streams): this tab polls instead",
        )
        .into_response();
    };
    let mut changes = crate::changes::subscribe();
    changes.mark_unchanged();
    let ends = Instant::now() + LIFETIME;
    let stopping = state.stopping.clone();
    // The first event says the stream is open; then a notice as soon as something
    // changes, and none for `MIN_GAP` after it (what changes meanwhile is told
    // at its end): a page never refetches more often than the old poll did.
    let notices = stream::unfold(
        (changes, place, Step::Ready),
        move |(mut changes, place, step)| {
            let stopping = stopping.clone();
            async move {
                let rest = match step {
                    Step::Ready => {
                        let ready = Event::default().event("ready").data("{}");
                        return Some((Ok::<_, Infallible>(ready), (changes, place, Step::Wait)));
                    }
                    Step::Wait => None,
                    Step::Rest => Some(MIN_GAP),
                };
                let changed = async {
                    if let Some(rest) = rest {
                        tokio::time::sleep(rest).await;
                    }
                    tokio::time::timeout_at(ends, changes.changed()).await
                };
                let changed = tokio::select! {
                    changed = changed => changed,
                    // The server is stopping: the stream ends, the browser reconnects.
                    () = stopping.cancelled() => return None,
                };
                match changed {
                    Ok(Ok(())) => {
                        changes.mark_unchanged();
                        let notice = Event::default().event("change").data("{}");
                        Some((Ok(notice), (changes, place, Step::Rest)))
                    }
                    // The lifetime is over (or the feed is gone): the browser reconnects.
                    _ => None,
                }
            }
        },
    );
    Sse::new(notices)
        .keep_alive(
            KeepAlive::new().interval(keep_alive_every(state.settings.http_idle_timeout_secs)),
        )
        .into_response()
}
