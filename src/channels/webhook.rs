//! Webhook delivery: POST the frozen body plus `notification_event_id`, with the
//! event id in a header, and classify the answer (DESIGN §3): 2xx done; network
//! error, timeout, 429 and 5xx retry (honouring `Retry-After`); other 4xx and 3xx
//! stop. Redirects are never followed.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::Deserialize;

use crate::outbox::handler::{Handler, Outcome};
use crate::outbox::model::ClaimedEvent;

pub const EVENT_ID_HEADER: &str = "X-Herald-Event-Id";

/// A webhook event's frozen payload: the destination and the body, as of commit.
#[derive(Debug, Deserialize, serde::Serialize)]
pub struct WebhookPayload {
    pub url: String,
    pub body: serde_json::Value,
}

pub struct WebhookHandler {
    client: reqwest::Client,
}

impl WebhookHandler {
    pub fn new(timeout: Duration) -> Result<Self, reqwest::Error> {
        super::install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(WebhookHandler { client })
    }
}

#[async_trait]
impl Handler for WebhookHandler {
    async fn handle(&self, event: &ClaimedEvent) -> Outcome {
        let payload: WebhookPayload = match serde_json::from_str(&event.payload) {
            Ok(payload) => payload,
            Err(err) => {
                return Outcome::Permanent {
                    error: format!("unreadable webhook payload: {err}"),
                    status_code: None,
                }
            }
        };
        let mut body = payload.body;
        match body.as_object_mut() {
            Some(map) => {
                map.insert(
                    "notification_event_id".into(),
                    serde_json::Value::String(event.event_id.clone()),
                );
            }
            None => {
                body = serde_json::json!({
                    "notification_event_id": event.event_id,
                    "data": body,
                })
            }
        }
        let sent = self
            .client
            .post(&payload.url)
            .header(EVENT_ID_HEADER, &event.event_id)
            .json(&body)
            .send()
            .await;
        classify(sent)
    }
}

/// Turns a response (or its absence) into an outcome. Errors never carry the URL,
/// which may hold secrets.
pub fn classify(sent: Result<reqwest::Response, reqwest::Error>) -> Outcome {
    let response = match sent {
        Ok(response) => response,
        Err(err) => {
            let kind = if err.is_timeout() {
                "timed out"
            } else if err.is_connect() {
                "connection failed"
            } else {
                "request failed"
            };
            return Outcome::Retryable {
                error: format!("{kind}: {}", err.without_url()),
                status_code: None,
                retry_after: None,
            };
        }
    };
    let status = response.status();
    let code = Some(status.as_u16());
    if status.is_success() {
        Outcome::Delivered { status_code: code }
    } else if status.as_u16() == 429 || status.is_server_error() {
        Outcome::Retryable {
            error: format!("receiver answered {status}"),
            status_code: code,
            retry_after: retry_after(response.headers()),
        }
    } else {
        Outcome::Permanent {
            error: format!("receiver answered {status}"),
            status_code: code,
        }
    }
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(SystemTime::now()).unwrap_or_default())
}
