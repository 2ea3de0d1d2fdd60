//! Channels: how an event's side effect leaves Herald. Each is a handler the
//! outbox engine runs for one kind.

pub mod chat;
pub mod email;
pub mod guard;
pub mod secrets;
pub mod webhook;

/// A frozen payload, or the permanent failure of an unreadable one.
pub fn read_payload<T: serde::de::DeserializeOwned>(
    payload: &str,
    what: &str,
) -> Result<T, crate::outbox::handler::Outcome> {
    serde_json::from_str(payload).map_err(|err| crate::outbox::handler::Outcome::Permanent {
        error: format!("unreadable {what} payload: {err}"),
        status_code: None,
    })
}

/// rustls needs one process-wide crypto provider; ring is the one compiled in.
/// Idempotent: later calls keep the first provider.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
