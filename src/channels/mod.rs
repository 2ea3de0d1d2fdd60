//! Channels: how an event's side effect leaves Herald. Each is a handler the
//! outbox engine runs for one kind.

pub mod chat;
pub mod guard;
pub mod secrets;
pub mod webhook;

/// rustls needs one process-wide crypto provider; ring is the one compiled in.
/// Idempotent: later calls keep the first provider.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
