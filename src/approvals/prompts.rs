//! The `approval_prompt` handler: re-checks that the approval still waits on the
//! prompted step (a decided or recalled approval's prompt ends `skipped`, never
//! sent — seed 003 "decided approvals"), then delivers over the route's channel.
//! `alert` events are plain route deliveries (`routes::DeliveryHandler`).

use std::sync::Arc;

use async_trait::async_trait;

use super::model::InstanceStatus;
use super::planner::PromptPayload;
use crate::outbox::handler::{Handler, Outcome};
use crate::outbox::model::ClaimedEvent;
use crate::routes::DeliveryHandler;
use crate::store::ports::ApprovalRepository;

pub struct PromptHandler {
    pub store: Arc<dyn ApprovalRepository>,
    pub delivery: Arc<DeliveryHandler>,
}

#[async_trait]
impl Handler for PromptHandler {
    async fn handle(&self, event: &ClaimedEvent) -> Outcome {
        let payload: PromptPayload =
            match crate::channels::read_payload(&event.payload, "approval_prompt") {
                Ok(payload) => payload,
                Err(outcome) => return outcome,
            };
        let instance = match self.store.instance(&payload.approval_id).await {
            Ok(Some(instance)) => instance,
            Ok(None) => {
                return Outcome::Skipped {
                    reason: format!("approval {} no longer exists", payload.approval_id),
                }
            }
            Err(err) => {
                return Outcome::Retryable {
                    error: format!("cannot read the approval: {err}"),
                    status_code: None,
                    retry_after: None,
                }
            }
        };
        if instance.status != InstanceStatus::Pending || instance.step_index != payload.step_index {
            return Outcome::Skipped {
                reason: format!(
                    "the approval is {} at step {}; this prompt is no longer owed",
                    instance.status.as_str(),
                    instance.step_index + 1
                ),
            };
        }
        self.delivery
            .deliver(&event.event_id, payload.delivery)
            .await
    }
}
