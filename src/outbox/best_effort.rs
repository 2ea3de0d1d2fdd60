//! Best-effort sending for a store without a durable outbox (`memory://`): the
//! events a committed transition owes are handed to their kinds' handlers once, in a
//! spawned task, after the commit. Nothing is stored, nothing is retried, and a
//! restart forgets what was in flight. Failures are logged by event, kind and
//! outcome class — never with the payload or the destination.

use std::sync::Arc;
use std::time::Duration;

use crate::outbox::handler::{Outcome, Registry};
use crate::outbox::model::{ClaimedEvent, NewEvent};

/// Sends events once, through the same handlers the outbox workers use.
#[derive(Clone)]
pub struct BestEffortSender {
    registry: Arc<Registry>,
}

impl BestEffortSender {
    pub fn new(registry: Arc<Registry>) -> Self {
        BestEffortSender { registry }
    }

    /// Starts sending `events` (already committed business state owes them) and
    /// returns at once; each event is attempted exactly once.
    pub fn send(&self, events: Vec<NewEvent>) {
        for event in events {
            let registry = self.registry.clone();
            tokio::spawn(async move {
                let outcome = send_once(&registry, &event).await;
                log(&event, &outcome);
            });
        }
    }
}

/// One attempt of one event (after its planned delay), or `None` when no handler
/// is registered for its kind.
async fn send_once(registry: &Registry, event: &NewEvent) -> Option<Outcome> {
    let registration = registry.get(&event.kind)?;
    if event.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(event.delay_ms as u64)).await;
    }
    let attempt = ClaimedEvent {
        event_id: event.event_id.clone(),
        source: event.source.as_str().to_string(),
        kind: event.kind.clone(),
        parent_type: event.parent_type.clone(),
        parent_id: event.parent_id.clone(),
        payload: event.payload.clone(),
        redeliverable: event.redeliverable,
        attempts: 1,
        cycle: 1,
        cycle_attempts: 1,
        // One attempt: there is nowhere to keep a retry.
        max_attempts: 1,
        lease_token: String::new(),
        destination: event.destination.clone(),
        trace_parent: event.trace_parent.clone(),
        lane: event.lane.clone(),
    };
    Some(registration.handler.handle(&attempt).await)
}

fn log(event: &NewEvent, outcome: &Option<Outcome>) {
    let (class, status_code) = match outcome {
        None => {
            tracing::warn!(event_id = %event.event_id, kind = %event.kind, "best-effort notification dropped: no handler for its kind");
            return;
        }
        Some(Outcome::Delivered { status_code }) => {
            tracing::info!(event_id = %event.event_id, kind = %event.kind, status_code, "best-effort notification delivered");
            return;
        }
        Some(Outcome::Skipped { .. }) => ("skipped", None),
        Some(Outcome::Retryable { status_code, .. }) => ("retryable", *status_code),
        Some(Outcome::NotSent { .. }) => ("not sent", None),
        Some(Outcome::Permanent { status_code, .. }) => ("permanent", *status_code),
        Some(Outcome::Uncertain { status_code, .. }) => ("uncertain", *status_code),
    };
    tracing::warn!(
        event_id = %event.event_id,
        kind = %event.kind,
        outcome = class,
        status_code,
        "best-effort notification not delivered; this store keeps no outbox, so it will not be retried"
    );
}
