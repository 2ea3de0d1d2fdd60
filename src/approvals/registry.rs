//! The approvals source's handlers: prompts and alerts on one worker pool, the
//! field-update replay on its own (its poll interval and batch are its own settings),
//! and all three together, for retries and maintenance.

use std::sync::Arc;

use super::model::kinds;
use super::prompts::PromptHandler;
use super::replay::ReplayHandler;
use crate::outbox::handler::{Registry, Sending};
use crate::outbox::model::Source;
use crate::outbox::policy::RetryPolicy;
use crate::routes::DeliveryHandler;
use crate::store::SqlStore;

pub struct ApprovalRegistries {
    /// Prompts and alerts.
    pub notices: Registry,
    /// The field-update replay (every lifecycle event's FieldUpdates).
    pub replays: Registry,
    /// Every approvals kind.
    pub all: Registry,
}

/// The approvals kinds' handlers: notices under `policy`, the replay under
/// `replay_policy`, both reading and writing `store`.
pub fn registries(
    policy: &RetryPolicy,
    replay_policy: &RetryPolicy,
    store: &SqlStore,
    deliveries: &Arc<DeliveryHandler>,
) -> ApprovalRegistries {
    let prompts = Arc::new(PromptHandler {
        store: Arc::new(store.clone()),
        delivery: deliveries.clone(),
    });
    let alerts = Arc::new(Sending(deliveries.clone()));
    let replayer = Arc::new(ReplayHandler::new(store.clone()));
    let add_notices = |registry: &mut Registry| {
        registry
            .register(
                kinds::APPROVAL_PROMPT,
                Source::Approvals,
                policy.clone(),
                prompts.clone(),
            )
            .register(
                kinds::ALERT,
                Source::Approvals,
                policy.clone(),
                alerts.clone(),
            );
    };
    let add_replay = |registry: &mut Registry| {
        registry.register(
            kinds::FIELD_UPDATE,
            Source::Approvals,
            replay_policy.clone(),
            replayer.clone(),
        );
    };
    let (mut notices, mut replays, mut all) = (Registry::new(), Registry::new(), Registry::new());
    add_notices(&mut notices);
    add_replay(&mut replays);
    add_notices(&mut all);
    add_replay(&mut all);
    ApprovalRegistries {
        notices,
        replays,
        all,
    }
}
