//! The route delivery: sends a [`DeliveryPayload`] over its channel. Both sources
//! use it (jobs' `delivery` and `dead_letter`, approvals' prompts and alerts).

use async_trait::async_trait;

use super::payload::DeliveryPayload;
use crate::channels::chat::ChatHandler;
use crate::channels::email::EmailHandler;
use crate::channels::webhook::WebhookHandler;
use crate::channels::{read_payload, Outcome, Sender};

/// Delivers route payloads over their channel.
pub struct DeliveryHandler {
    pub webhook: WebhookHandler,
    pub chat: ChatHandler,
    pub email: EmailHandler,
}

impl DeliveryHandler {
    /// Sends one decoded payload as event `event_id`.
    pub async fn deliver(&self, event_id: &str, payload: DeliveryPayload) -> Outcome {
        match payload {
            DeliveryPayload::Webhook(payload) => self.webhook.deliver(event_id, payload).await,
            DeliveryPayload::Chat(payload) => self.chat.deliver(payload).await,
            DeliveryPayload::Email(payload) => self.email.deliver(event_id, payload).await,
            DeliveryPayload::MissingRoute { route } => Outcome::Permanent {
                error: format!(
                    "route {route:?} was not configured when this event was committed; nothing was sent"
                ),
                status_code: None,
            },
        }
    }
}

#[async_trait]
impl Sender for DeliveryHandler {
    async fn send(&self, event_id: &str, payload: &str) -> Outcome {
        match read_payload(payload, "delivery") {
            Ok(payload) => self.deliver(event_id, payload).await,
            Err(outcome) => outcome,
        }
    }
}
