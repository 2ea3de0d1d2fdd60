//! The jobs source's handlers: callbacks, route deliveries and dead-letter
//! notices, each under the source's retry policy.

use std::sync::Arc;

use super::kinds;
use super::planner::JobsPlanner;
use crate::channels::webhook::WebhookHandler;
use crate::outbox::handler::{Registry, Sending};
use crate::outbox::model::Source;
use crate::outbox::policy::RetryPolicy;
use crate::routes::DeliveryHandler;

/// The jobs kinds' handlers; the dead-letter notifier when a route is set for it.
pub fn registry(
    planner: &Arc<JobsPlanner>,
    policy: &RetryPolicy,
    deliveries: Arc<DeliveryHandler>,
    callbacks: WebhookHandler,
) -> Registry {
    let mut registry = Registry::new();
    registry
        .register(
            kinds::CALLBACK,
            Source::Jobs,
            policy.clone(),
            Arc::new(Sending(callbacks)),
        )
        .register(
            kinds::DELIVERY,
            Source::Jobs,
            policy.clone(),
            Arc::new(Sending(deliveries.clone())),
        )
        .register(
            kinds::DEAD_LETTER,
            Source::Jobs,
            policy.clone(),
            Arc::new(Sending(deliveries)),
        );
    if let Some(notifier) = planner.dead_letter_notifier() {
        registry.set_dead_letter_notifier(notifier);
    }
    registry
}
