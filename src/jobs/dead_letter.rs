//! The `dead_letter` notice: tells the dead-letter route about a failed event
//! (never about a failed notice, which would loop).

use std::sync::Arc;

use super::kinds;
use super::planner::JobsPlanner;
use crate::outbox::destinations::destination_of;
use crate::outbox::model::{
    dead_letter_notice_id, DeadLetterNotifier, FailedEvent, NewEvent, Source,
};

impl JobsPlanner {
    /// The notifier of the dead-letter route, if one is configured.
    pub fn dead_letter_notifier(self: &Arc<Self>) -> Option<DeadLetterNotifier> {
        let route = self
            .routes
            .get(self.plan.dead_letter_route.as_ref()?)?
            .clone();
        let max_attempts = self.plan.max_attempts;
        Some(Arc::new(move |failed: &FailedEvent| {
            if failed.kind == kinds::DEAD_LETTER {
                return None;
            }
            let body = serde_json::json!({
                "event": "delivery.failed",
                "failed_event_id": failed.event_id,
                "kind": failed.kind,
                "parent_type": failed.parent_type,
                "parent_id": failed.parent_id,
                "error": failed.error,
            });
            let text = format!(
                "Herald: {} event {} of {} {} failed: {}",
                failed.kind, failed.event_id, failed.parent_type, failed.parent_id, failed.error
            );
            let (payload, redeliverable) = route.delivery(&body, &text);
            Some(NewEvent {
                event_id: dead_letter_notice_id(&failed.event_id, failed.cycle),
                source: Source::Jobs,
                kind: kinds::DEAD_LETTER.into(),
                parent_type: failed.parent_type.clone(),
                parent_id: failed.parent_id.clone(),
                payload: payload.to_json(),
                redeliverable,
                max_attempts,
                delay_ms: 0,
                destination: destination_of(&route.url),
                // Under the failed delivery's span: the notice joins its trace.
                trace_parent: crate::telemetry::current_traceparent(),
                lane: None,
            })
        }))
    }
}
