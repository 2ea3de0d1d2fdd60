//! Handlers: one per kind, registered with the kind's source and retry policy. The
//! engine itself never branches on a kind.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::model::{ClaimedEvent, Settle, Source};
use super::policy::RetryPolicy;

/// What one attempt achieved, as the handler saw it.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The receiver (or executor) accepted it.
    Delivered { status_code: Option<u16> },
    /// Worth another attempt: network error, timeout, 429, 5xx, a missing secret.
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
            Outcome::Skipped { .. } => None,
        }
    }

    pub fn error(&self) -> Option<&str> {
        match self {
            Outcome::Delivered { .. } => None,
            Outcome::Retryable { error, .. }
            | Outcome::Permanent { error, .. }
            | Outcome::Uncertain { error, .. } => Some(error),
            Outcome::Skipped { reason } => Some(reason),
        }
    }

    /// The state the event moves to, given its claim and its kind's policy.
    pub fn settle(&self, event: &ClaimedEvent, policy: &RetryPolicy) -> Settle {
        match self {
            Outcome::Delivered { .. } => Settle::Completed,
            Outcome::Retryable { retry_after, .. } => {
                if event.cycle_attempts < event.max_attempts {
                    let delay = policy.backoff(event.cycle_attempts.max(1) as u32, *retry_after);
                    Settle::Retry {
                        delay_ms: delay.as_millis() as i64,
                    }
                } else {
                    Settle::Failed { exhausted: true }
                }
            }
            Outcome::Permanent { .. } => Settle::Failed { exhausted: false },
            Outcome::Skipped { .. } => Settle::Skipped,
            Outcome::Uncertain { .. } => Settle::Uncertain,
        }
    }
}

#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Performs the side effect once. Must not panic on bad payloads: answer
    /// `Permanent` instead.
    async fn handle(&self, event: &ClaimedEvent) -> Outcome;

    /// Called once an attempt's settlement is durably accepted: a kind's own
    /// metrics (the engine's are recorded for every kind).
    fn settled(&self, _settlement: &super::model::Settlement, _metrics: &super::metrics::Metrics) {}

    /// Called when the maintenance sweep fails an event of this kind whose last
    /// attempt's lease expired (no settlement exists for it).
    fn swept_failed(&self, _metrics: &super::metrics::Metrics) {}
}

pub struct Registration {
    pub source: Source,
    pub handler: Arc<dyn Handler>,
    pub policy: RetryPolicy,
}

/// Handlers by kind.
#[derive(Default)]
pub struct Registry {
    kinds: HashMap<String, Registration>,
    dead_letter: Option<super::model::DeadLetterNotifier>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(
        &mut self,
        kind: &str,
        source: Source,
        policy: RetryPolicy,
        handler: Arc<dyn Handler>,
    ) -> &mut Self {
        self.kinds.insert(
            kind.to_string(),
            Registration {
                source,
                handler,
                policy,
            },
        );
        self
    }

    pub fn get(&self, kind: &str) -> Option<&Registration> {
        self.kinds.get(kind)
    }

    pub fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self.kinds.keys().cloned().collect();
        kinds.sort();
        kinds
    }

    pub fn policy(&self, kind: &str) -> Option<&RetryPolicy> {
        self.kinds.get(kind).map(|r| &r.policy)
    }

    /// Sets who is told when an event ends `failed`.
    pub fn set_dead_letter_notifier(
        &mut self,
        notifier: super::model::DeadLetterNotifier,
    ) -> &mut Self {
        self.dead_letter = Some(notifier);
        self
    }

    pub fn dead_letter_notifier(&self) -> Option<&super::model::DeadLetterNotifier> {
        self.dead_letter.as_ref()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }
}
