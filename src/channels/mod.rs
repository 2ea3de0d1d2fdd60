//! Channels: how an event's side effect leaves Herald. Each is a [`Sender`] of
//! its own frozen payload; they know nothing of configuration or the outbox
//! (which runs senders as handlers, `outbox::handler::Sending`).

use async_trait::async_trait;

pub mod chat;
pub mod email;
pub mod guard;
mod outcome;
pub mod secrets;
pub mod webhook;

pub use outcome::Outcome;

/// Sends one event's frozen payload.
#[async_trait]
pub trait Sender: Send + Sync {
    /// `event_id` is the event's identity: the idempotency key receivers see.
    async fn send(&self, event_id: &str, payload: &str) -> Outcome;
}

/// A shared sender (one HTTP client serves several kinds) sends as itself.
#[async_trait]
impl<S: Sender + ?Sized> Sender for std::sync::Arc<S> {
    async fn send(&self, event_id: &str, payload: &str) -> Outcome {
        (**self).send(event_id, payload).await
    }
}

/// A frozen payload, or the permanent failure of an unreadable one.
pub fn read_payload<T: serde::de::DeserializeOwned>(
    payload: &str,
    what: &str,
) -> Result<T, Outcome> {
    serde_json::from_str(payload).map_err(|err| Outcome::Permanent {
        error: format!("unreadable {what} payload: {err}"),
        status_code: None,
    })
}

/// rustls needs one process-wide crypto provider; ring is the one compiled in.
/// Idempotent: later calls keep the first provider.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
