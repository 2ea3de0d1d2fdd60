//! What one attempt to send achieved, as the sender saw it: the vocabulary every
//! channel answers in and the outbox settles from.

use std::time::Duration;

/// What one attempt achieved, as the handler saw it.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The receiver (or executor) accepted it.
    Delivered { status_code: Option<u16> },
    /// Nothing left this node: it lacks what sending needs (a signing secret that
    /// cannot be read). Retried like a retryable failure, but it says nothing about
    /// the destination, so it never counts against its breaker.
    NotSent { error: String },
    /// Worth another attempt: network error, timeout, 429, 5xx.
    Retryable {
        error: String,
        status_code: Option<u16>,
        retry_after: Option<Duration>,
    },
    /// Will never succeed as it is: other 4xx, 3xx, an unreadable payload.
    Permanent {
        error: String,
        status_code: Option<u16>,
    },
    /// Nothing to do (the effect is already in place).
    Skipped { reason: String },
    /// Partly or maybe delivered on a channel that cannot deduplicate: never resent
    /// automatically.
    Uncertain {
        error: String,
        status_code: Option<u16>,
    },
}

impl Outcome {
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Outcome::Delivered { status_code }
            | Outcome::Retryable { status_code, .. }
            | Outcome::Permanent { status_code, .. }
            | Outcome::Uncertain { status_code, .. } => *status_code,
            Outcome::Skipped { .. } | Outcome::NotSent { .. } => None,
        }
    }

    /// Whether the attempt tells anything about its destination's health.
    pub fn tested_destination(&self) -> bool {
        !matches!(self, Outcome::NotSent { .. })
    }

    pub fn error(&self) -> Option<&str> {
        match self {
            Outcome::Delivered { .. } => None,
            Outcome::Retryable { error, .. }
            | Outcome::NotSent { error }
            | Outcome::Permanent { error, .. }
            | Outcome::Uncertain { error, .. } => Some(error),
            Outcome::Skipped { reason } => Some(reason),
        }
    }
}
