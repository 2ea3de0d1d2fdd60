//! The outbox delivering to real receivers on loopback: signed webhooks and chat,
//! e-mail through a real SMTP server, retries and dead letters, destination health
//! and its breaker, and a handler that panics mid-attempt.

mod destinations;
mod email;
mod handler_panic;
mod notifications;
