//! `GET /console-api/live` (issue 23, item 5): one Server-Sent Events stream per
//! console tab carrying change notices, never data (`crate::changes`); the page
//! refetches what it shows. Bounded: at most `live_max_streams` streams a
//! server (past it a 503, and the tab polls), a notice at most every
//! [`MIN_GAP`] per stream (changes in between are one notice), and a stream
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
/// The least time between two notices of one stream.
pub const MIN_GAP: Duration = Duration::from_millis(250);
/// How long a stream lasts before the browser opens a new one.
pub const LIFETIME: Duration = Duration::from_secs(600);
/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

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
    // The first event says the stream is open; then one per change (coalesced).
    let notices = stream::unfold(
        (changes, place, true),
        move |(mut changes, place, first)| {
            let stopping = stopping.clone();
            async move {
                if first {
                    let ready = Event::default().event("ready").data("{}");
                    return Some((Ok::<_, Infallible>(ready), (changes, place, false)));
                }
                let changed = tokio::select! {
                    changed = tokio::time::timeout_at(ends, changes.changed()) => changed,
                    // The server is stopping: the stream ends, the browser reconnects.
                    () = stopping.cancelled() => return None,
                };
                match changed {
                    Ok(Ok(())) => {
                        // Changes that land in the gap are in this notice.
                        tokio::time::sleep(MIN_GAP).await;
                        changes.mark_unchanged();
                        let notice = Event::default().event("change").data("{}");
                        Some((Ok(notice), (changes, place, false)))
                    }
                    // The lifetime is over (or the feed is gone): the browser reconnects.
                    _ => None,
                }
            }
        },
    );
    Sse::new(notices)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}
