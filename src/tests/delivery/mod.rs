//! The outbox delivering to real receivers on loopback: signed webhooks and chat,
//! e-mail through a real SMTP server, retries and dead letters, destination health
//! and its breaker, a handler that panics mid-attempt, and the places a worker's
//! claims share with events leased at insert.

mod claim_places;
mod destinations;
mod email;
mod handler_panic;
mod notifications;
