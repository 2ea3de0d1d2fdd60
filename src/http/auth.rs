//! Request authentication (API token or session), CSRF protection, the console's
//! sign-in guard, and the sign-in / sign-out form handlers.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Form, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use tower_sessions::Session;

use vocab::Viewer;

use super::error::ApiError;
use super::state::AppState;
use crate::auth::{SESSION_EPOCH_KEY, SESSION_USER_KEY};
use crate::channels::guard::DestinationGuard;
use crate::service::ServiceError;

/// Console pages that need a signed-in user (the page and everything below it).
const GUARDED_PAGES: &[&str] = &[
    "/overview",
    "/runs",
    "/audit",
    "/deliveries",
    "/approvals",
    "/search",
    "/users",
    "/records",
];

fn is_guarded_page(path: &str) -> bool {
    GUARDED_PAGES.iter().any(|page| {
        path.strip_prefix(page)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Where an anonymous state-changing request may go: signing in and out.
const ANONYMOUS_POSTS: &[&str] = &["/auth/login", "/auth/logout"];

pub async fn authenticate(
    State(state): State<AppState>,
    session: Session,
    mut req: Request,
    next: Next,
) -> Response {
    let bearer = bearer_token(req.headers());
    let viewer = match &bearer {
        Some(secret) => match state.accounts.viewer_for_token(secret).await {
            Ok(Some(viewer)) => Some(viewer),
            Ok(None) => {
                return ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "bad_token",
                    "the API token is not valid",
                )
                .into_response()
            }
            Err(err) => return ApiError::from(err).into_response(),
        },
        None => match session_viewer(&state, &session).await {
            Ok(viewer) => viewer,
            Err(err) => return ApiError::from(err).into_response(),
        },
    };

    // Who is asking comes first: a state-changing request with neither a session nor
    // a token is unauthenticated (401), whatever its origin; only a request that a
    // session cookie would authenticate needs the same-origin check (CSRF, 403).
    if bearer.is_none() && is_state_changing(req.method()) {
        let path = req.uri().path();
        if viewer.is_none() && !ANONYMOUS_POSTS.contains(&path) {
            return ApiError::from(ServiceError::Unauthenticated).into_response();
        }
        if !is_same_origin(req.headers()) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "csrf",
                "cross-site request refused: state-changing requests must come from the console's own origin or carry an API token",
            )
            .into_response();
        }
    }

    if viewer.is_none() && req.method() == Method::GET && is_guarded_page(req.uri().path()) {
        let next = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/overview".into());
        return Redirect::to(&format!("/login?next={}", urlencode(&next))).into_response();
    }
    if let Some(viewer) = viewer {
        req.extensions_mut().insert(viewer);
    }
    next.run(req).await
}

async fn session_viewer(
    state: &AppState,
    session: &Session,
) -> Result<Option<Viewer>, ServiceError> {
    let user_id: Option<String> = session
        .get(SESSION_USER_KEY)
        .await
        .map_err(|e| ServiceError::Internal(e.to_string()))?;
    // Sessions begun before epochs were kept are of epoch 0, the first one.
    let epoch: Option<i64> = session
        .get(SESSION_EPOCH_KEY)
        .await
        .map_err(|e| ServiceError::Internal(e.to_string()))?;
    match user_id {
        Some(id) => {
            state
                .accounts
                .viewer_for_user(&id, epoch.unwrap_or(0))
                .await
        }
        None => Ok(None),
    }
}

fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?;
    Some(token.trim().to_string())
}

fn is_state_changing(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A cookie-borne request is same-origin when its `Origin` (or, lacking one, its
/// `Referer`) names the host it was sent to. Browsers send `Origin` on every POST.
fn is_same_origin(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let source = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok());
    match source.and_then(|s| url::Url::parse(s).ok()) {
        Some(url) => {
            let authority = match (url.host_str(), url.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_string(),
                _ => return false,
            };
            authority.eq_ignore_ascii_case(host)
        }
        None => false,
    }
}

fn urlencode(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// Only a local path may be a post-sign-in destination (no open redirects).
fn safe_next(next: Option<&str>) -> String {
    match next {
        // Browsers drop tabs and newlines from URLs, so `/\t/evil` would become
        // `//evil`: refuse control characters and whitespace outright.
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.contains('\\')
                && !path.chars().any(|c| c.is_control() || c.is_whitespace()) =>
        {
            path.to_string()
        }
        // The landing page after sign-in.
        _ => "/overview".to_string(),
    }
}

#[derive(Deserialize)]
pub struct SignInForm {
    username: String,
    password: String,
    next: Option<String>,
}

/// Largest sign-in form body, in bytes (a username, a password and a `next` path).
pub const MAX_SIGN_IN_BODY: usize = 8 * 1024;

pub async fn sign_in(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    session: Session,
    Form(form): Form<SignInForm>,
) -> Response {
    // Validated at start-up, so an error here cannot happen; fall back to no proxies.
    let trusted =
        DestinationGuard::parse_allowlist(&state.settings.trusted_proxies).unwrap_or_default();
    let client = super::client_addr::client_address(peer.ip(), &headers, &trusted);
    let next = safe_next(form.next.as_deref());
    let back = |error: &str| {
        Redirect::to(&format!("/login?error={error}&next={}", urlencode(&next))).into_response()
    };
    match state
        .accounts
        .sign_in(&form.username, &form.password, &client.to_string())
        .await
    {
        Ok(user) => {
            // A fresh session id on sign-in defeats session fixation.
            if let Err(err) = session.cycle_id().await {
                return ApiError::from(ServiceError::Internal(err.to_string())).into_response();
            }
            let stored = async {
                session.insert(SESSION_USER_KEY, &user.id).await?;
                session.insert(SESSION_EPOCH_KEY, user.session_epoch).await
            };
            if let Err(err) = stored.await {
                return ApiError::from(ServiceError::Internal(err.to_string())).into_response();
            }
            Redirect::to(&next).into_response()
        }
        Err(ServiceError::Throttled) => back("throttled"),
        Err(ServiceError::BadCredentials) => back("invalid"),
        Err(other) => ApiError::from(other).into_response(),
    }
}

pub async fn sign_out(session: Session) -> Response {
    if let Err(err) = session.flush().await {
        return ApiError::from(ServiceError::Internal(err.to_string())).into_response();
    }
    Redirect::to("/login").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), value.parse().unwrap());
        }
        map
    }

    #[test]
    fn same_origin_needs_a_matching_origin_or_referer() {
        assert!(is_same_origin(&headers(&[
            (header::HOST, "127.0.0.1:3000"),
            (header::ORIGIN, "http://127.0.0.1:3000")
        ])));
        assert!(is_same_origin(&headers(&[
            (header::HOST, "h.example"),
            (header::REFERER, "https://h.example/runs")
        ])));
        assert!(!is_same_origin(&headers(&[
            (header::HOST, "127.0.0.1:3000"),
            (header::ORIGIN, "http://evil.example")
        ])));
        assert!(!is_same_origin(&headers(&[(
            header::HOST,
            "127.0.0.1:3000"
        )])));
        assert!(!is_same_origin(&headers(&[
            (header::HOST, "127.0.0.1:3000"),
            (header::ORIGIN, "null")
        ])));
    }

    #[test]
    fn guarded_pages_cover_their_subpaths_only() {
        assert!(is_guarded_page("/runs"));
        assert!(is_guarded_page("/runs/0193-abc"));
        assert!(is_guarded_page("/audit"));
        assert!(!is_guarded_page("/runsx"));
        assert!(!is_guarded_page("/login"));
    }

    #[test]
    fn next_is_always_local() {
        assert_eq!(
            safe_next(Some("/runs?status=failed")),
            "/runs?status=failed"
        );
        assert_eq!(safe_next(Some("//evil.example")), "/overview");
        assert_eq!(safe_next(Some("https://evil.example")), "/overview");
        assert_eq!(safe_next(Some("/\t/evil.example")), "/overview");
        assert_eq!(safe_next(Some("/\n/evil.example")), "/overview");
        assert_eq!(safe_next(None), "/overview", "the landing page");
    }
}
