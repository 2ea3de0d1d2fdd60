//! Handlers: one per kind, registered with the kind's source and retry policy. The
//! engine itself never branches on a kind.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

pub use crate::channels::Outcome;
use crate::channels::Sender;

use super::model::{ClaimedEvent, Settle, Source};
use super::policy::RetryPolicy;

/// How long an event that could not be sent waits before it is tried again (at
/// most the kind's longest backoff).
pub const NOT_SENT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Outcome {
    /// The state the event moves to, given its claim and its kind's policy.
    pub fn settle(&self, event: &ClaimedEvent, policy: &RetryPolicy) -> Settle {
        match self {
            Outcome::Delivered { .. } => Settle::Completed,
            // Nothing left the node (its own configuration, e.g. a signing secret it
            // cannot read): the event waits, spending no attempt, and goes once the
            // setting is fixed; `config_check` says what to fix.
            Outcome::NotSent { .. } => Settle::Deferred {
                delay_ms: NOT_SENT_WAIT.min(policy.max_backoff).as_millis() as i64,
            },
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

/// The outcome of a hop between the two stores (a run approval opened in the
/// approvals store, a decision continued in the jobs store) whose write to the
/// other store failed with `err`. While that store is out, nothing was done and
/// the attempt is given back, like a node that cannot send: an outage outlasting
/// the hop's attempts must not fail it and strand the run that waits on it. A
/// failure of one statement is retried as usual.
pub fn hop_failed(what: &str, err: &crate::store::StoreError) -> Outcome {
    let error = format!("{what}: {err}");
    if err.fault().is_outage() {
        Outcome::NotSent { error }
    } else {
        Outcome::Retryable {
            error,
            status_code: None,
            retry_after: None,
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
    fn swept_failed(&self, _event_id: &str, _metrics: &super::metrics::Metrics) {}
}

/// Runs a channel or route [`Sender`] as the handler of a kind: the event's id and
/// frozen payload are all a sender needs.
pub struct Sending<S>(pub S);

#[async_trait]
impl<S: Sender + 'static> Handler for Sending<S> {
    async fn handle(&self, event: &ClaimedEvent) -> Outcome {
        self.0.send(&event.event_id, &event.payload).await
    }
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
