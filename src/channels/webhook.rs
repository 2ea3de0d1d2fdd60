//! Webhook delivery: POST the frozen body plus `notification_event_id`, signed in
//! the Standard Webhooks layout (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64 HMAC-SHA256 of id.timestamp.body>`, one signature
//! per secret while a key rotates), with `X-Herald-Event-Id` too; then classify the
//! answer (DESIGN §3): 2xx done; network error, timeout, 429 and 5xx retry
//! (honouring `Retry-After`); other 4xx and 3xx stop. Redirects are never followed,
//! and the destination guard vets every address connected to.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use super::guard::{DestinationGuard, GuardedResolver};
use super::secrets::resolve_keys;
use super::{Outcome, Sender};

pub const EVENT_ID_HEADER: &str = "X-Herald-Event-Id";

/// A webhook event's frozen payload: the destination and the body as of commit,
/// and the *name* of its signing secret (never the secret).
#[derive(Debug, Deserialize, serde::Serialize)]
pub struct WebhookPayload {
    pub url: String,
    pub body: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
}

pub struct WebhookHandler {
    client: reqwest::Client,
    guard: DestinationGuard,
}

/// One HTTP client for every outbound delivery: timeouts, no redirects, and the
/// destination guard as its resolver.
pub fn delivery_client(
    timeout: Duration,
    guard: &DestinationGuard,
) -> Result<reqwest::Client, reqwest::Error> {
    super::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .redirect(reqwest::redirect::Policy::none())
        // A proxy would resolve destinations itself, out of the guard's sight.
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver {
            guard: guard.clone(),
        }))
        .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
        .build()
}

impl WebhookHandler {
    pub fn new(client: reqwest::Client, guard: DestinationGuard) -> Self {
        WebhookHandler { client, guard }
    }
}

/// Refuses a URL whose host is a non-public IP literal (names are vetted by the
/// resolver at connect time).
pub fn check_literal_host(url: &str, guard: &DestinationGuard) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("invalid destination URL: {e}"))?;
    let ip = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
        Some(url::Host::Domain(_)) => return Ok(()),
        None => return Err("destination URL has no host".into()),
    };
    guard.check(ip).map_err(|refused| refused.to_string())
}

/// `v1,<base64>` signatures of `id.timestamp.body`, space-separated, one per key.
pub fn sign(keys: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|key| {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp.to_string().as_bytes());
            mac.update(b".");
            mac.update(body);
            format!(
                "v1,{}",
                base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[async_trait]
impl Sender for WebhookHandler {
    async fn send(&self, event_id: &str, payload: &str) -> Outcome {
        match super::read_payload(payload, "webhook") {
            Ok(payload) => self.deliver(event_id, payload).await,
            Err(outcome) => outcome,
        }
    }
}

impl WebhookHandler {
    /// Sends one signed POST of `payload` as event `event_id`.
    pub async fn deliver(&self, event_id: &str, payload: WebhookPayload) -> Outcome {
        let mut body = payload.body;
        match body.as_object_mut() {
            Some(map) => {
                map.insert(
                    "notification_event_id".into(),
                    serde_json::Value::String(event_id.to_string()),
                );
            }
            None => {
                body = serde_json::json!({
                    "notification_event_id": event_id,
                    "data": body,
                })
            }
        }
        if let Err(error) = check_literal_host(&payload.url, &self.guard) {
            return Outcome::Permanent {
                error,
                status_code: None,
            };
        }
        let keys = match payload.secret_ref.as_deref().map(resolve_keys).transpose() {
            Ok(keys) => keys.unwrap_or_default(),
            // A missing secret may be provided later: retry, do not drop; and it is
            // this node's configuration, not the receiver, that failed.
            Err(err) => {
                return Outcome::NotSent {
                    error: err.to_string(),
                }
            }
        };
        let bytes = match serde_json::to_vec(&body) {
            Ok(bytes) => bytes,
            Err(err) => {
                return Outcome::Permanent {
                    error: format!("unserialisable body: {err}"),
                    status_code: None,
                }
            }
        };
        let timestamp = time::OffsetDateTime::now_utc().unix_timestamp();
        let mut request = self
            .client
            .post(&payload.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(EVENT_ID_HEADER, event_id)
            .header("webhook-id", event_id)
            .header("webhook-timestamp", timestamp.to_string());
        if !keys.is_empty() {
            request = request.header(
                "webhook-signature",
                sign(&keys, event_id, timestamp, &bytes),
            );
        }
        // With traces on: the receiver joins the producer's trace, as a child of
        // this send.
        if let Some(traceparent) = crate::telemetry::current_traceparent() {
            request = request.header(crate::telemetry::TRACEPARENT, traceparent);
        }
        classify(request.body(bytes).send().await)
    }
}

/// Turns a response (or its absence) into an outcome. Errors never carry the URL,
/// which may hold secrets.
pub fn classify(sent: Result<reqwest::Response, reqwest::Error>) -> Outcome {
    let response = match sent {
        Ok(response) => response,
        Err(err) => {
            if let Some(refused) = guard_refusal(&err) {
                return Outcome::Permanent {
                    error: refused,
                    status_code: None,
                };
            }
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

/// The guard's refusal, if that is why the connection failed (a permanent error).
fn guard_refusal(err: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(current) = source {
        if let Some(refused) = current.downcast_ref::<super::guard::Refused>() {
            return Some(refused.to_string());
        }
        source = current.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_follow_the_standard_webhooks_layout() {
        // Reference vector from the Standard Webhooks specification's examples.
        let key = base64::engine::general_purpose::STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap();
        let body = br#"{"test": 2432232314}"#;
        let signature = sign(
            std::slice::from_ref(&key),
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            body,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let two = sign(&[key.clone(), key], "id", 1, b"{}");
        assert_eq!(two.split(' ').count(), 2);
    }

    #[test]
    fn literal_private_hosts_are_refused_before_sending() {
        let guard = DestinationGuard::default();
        assert!(check_literal_host("http://127.0.0.1:9/x", &guard).is_err());
        assert!(check_literal_host("http://[::1]/x", &guard).is_err());
        assert!(check_literal_host("https://hooks.example.com/x", &guard).is_ok());
    }
}
