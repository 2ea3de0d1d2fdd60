//! HTTP: the console (Leptos SSR + server functions), the JSON API, sign-in,
//! health probes, and the layers around them.

mod admin;
mod admission;
mod approvals;
mod auth;
mod body_limit;
mod client_addr;
mod console;
mod deliveries;
mod error;
mod export;
mod extract;
mod health;
mod idempotency;
pub mod listener;
mod live;
mod openapi;
mod runs;
mod state;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use axum::{middleware, Router};
use leptos::prelude::*;
use leptos_axum::{generate_route_list, LeptosRoutes};
use tower_http::services::ServeDir;
use tower_http::trace::TraceLayer;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

use app::port::ConsolePort;
use app::{shell, App};

use crate::auth::session_store::DbSessionStore;
use console::{AccountsConsole, ApprovalsConsole, Console, RecordsConsole};

pub use admission::{Admission, AdmissionGauges};
pub use error::ApiError;
pub use state::AppState;

pub const SESSION_COOKIE: &str = "herald_session";

pub fn router(state: AppState, sessions: DbSessionStore) -> Router {
    let routes = generate_route_list(App);
    let console: Arc<dyn ConsolePort> = Arc::new(
        Console::new(
            state.runs.clone(),
            state.deliveries.clone(),
            state.settings.clone(),
        )
        .with_destinations(state.destinations.clone()),
    );
    let approvals_console: Arc<dyn app::port::ApprovalsPort> = Arc::new(ApprovalsConsole {
        approvals: state.approvals.clone(),
        deliveries: state.deliveries.clone(),
    });
    let accounts_console: Arc<dyn app::port::AccountsPort> = Arc::new(AccountsConsole {
        accounts: state.accounts.clone(),
    });
    let records_console: Arc<dyn app::port::RecordsPort> = Arc::new(RecordsConsole {
        records: state.records.clone(),
        approvals: state.approvals.clone(),
    });
    let leptos_options = state.leptos.clone();
    let not_found = not_found_page(console.clone(), leptos_options.clone());
    let site_root = leptos_options.site_root.to_string();

    let session_layer = SessionManagerLayer::new(sessions)
        .with_name(SESSION_COOKIE)
        .with_http_only(true)
        .with_secure(state.settings.secure_cookies)
        .with_same_site(SameSite::Strict)
        .with_always_save(true)
        .with_expiry(Expiry::OnInactivity(time::Duration::hours(
            state.settings.session_idle_hours as i64,
        )));

    Router::new()
        .route("/", get(|| async { Redirect::to("/overview") }))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        // A sign-in form is a few hundred bytes: refuse anything large before it is
        // buffered, so a flood of oversize sign-ins cannot take memory.
        .route(
            "/auth/login",
            post(auth::sign_in).layer(DefaultBodyLimit::max(auth::MAX_SIGN_IN_BODY)),
        )
        .route("/auth/logout", post(auth::sign_out))
        .route("/api/openapi.json", get(openapi::document))
        // The Deliveries and Audit pages' Export links (under their pages, so a
        // signed-out browser is sent to sign in and back).
        .route(live::LIVE_PATH, get(live::stream))
        .route("/deliveries/export", get(export::events))
        .route("/audit/export", get(export::audit))
        // Only the producer API is bounded: the console, probes and metrics stay
        // reachable while producers are told to back off.
        .nest(
            "/api/v1",
            runs::router()
                .merge(deliveries::api_router())
                .merge(approvals::api_router())
                .layer(middleware::from_fn_with_state(
                    state.admission.clone(),
                    admission::admit,
                )),
        )
        .nest(
            "/admin/api",
            admin::router().merge(approvals::admin_router()),
        )
        .leptos_routes_with_context(
            &state,
            routes,
            move || {
                provide_context(console.clone());
                provide_context(approvals_console.clone());
                provide_context(accounts_console.clone());
                provide_context(records_console.clone());
            },
            move || shell(leptos_options.clone()),
        )
        .fallback_service(ServeDir::new(site_root).not_found_service(not_found))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            body_limit::limit_server_fn_bodies,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(session_layer)
        .layer(DefaultBodyLimit::max(state.settings.max_body_bytes))
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .with_state(state)
}

/// A request's span (a trace's root, or the child of the caller's `traceparent`).
/// Its path only: a query may carry cursors and filters, never worth a trace.
fn request_span(request: &axum::extract::Request) -> tracing::Span {
    let span = tracing::info_span!(
        target: crate::telemetry::TRACE_TARGET,
        "request",
        otel.kind = "server",
        http.request.method = %request.method(),
        url.path = %request.uri().path(),
    );
    let traceparent = request
        .headers()
        .get(crate::telemetry::TRACEPARENT)
        .and_then(|value| value.to_str().ok());
    crate::telemetry::continue_trace(&span, traceparent);
    span
}

/// Paths under which every answer is JSON, a 404 included.
const JSON_PREFIXES: &[&str] = &["/api/", "/admin/api/"];

/// What answers an address nothing else serves: JSON for the API paths, the console's
/// designed "page not found" page (HTTP 404) for everything else.
fn not_found_page(
    console: Arc<dyn ConsolePort>,
    options: LeptosOptions,
) -> axum::routing::MethodRouter<()> {
    let render = leptos_axum::render_app_to_stream_with_context(
        move || provide_context(console.clone()),
        move || shell(options.clone()),
    );
    axum::routing::any(move |req: axum::extract::Request| {
        let render = render.clone();
        async move {
            let path = req.uri().path();
            let is_api = JSON_PREFIXES
                .iter()
                .any(|prefix| path.starts_with(prefix) || path == prefix.trim_end_matches('/'));
            if is_api || req.method() != axum::http::Method::GET {
                return ApiError::new(StatusCode::NOT_FOUND, "not_found", "nothing here")
                    .into_response();
            }
            let mut response = render(req).await;
            if response.status() == StatusCode::OK {
                *response.status_mut() = StatusCode::NOT_FOUND;
            }
            response.into_response()
        }
    })
}
