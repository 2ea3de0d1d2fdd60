//! A route's frozen payload: the channel and coordinates of a route as of commit,
//! with the body (webhooks, e-mail templates) and text (chat, e-mail's default
//! body) it carries.

use serde::{Deserialize, Serialize};

use super::route::{RouteChannel, RouteConfig};
use crate::channels::chat::ChatPayload;
use crate::channels::email::{EmailPayload, DEFAULT_FROM};
use crate::channels::webhook::WebhookPayload;

/// A route delivery's frozen payload.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "channel", rename_all = "snake_case")]
pub enum DeliveryPayload {
    Webhook(WebhookPayload),
    Chat(ChatPayload),
    Email(EmailPayload),
    /// A run or an approval named a route that was no longer configured when the
    /// event was committed: recorded (and failed) rather than silently dropped.
    MissingRoute {
        route: String,
    },
}

impl DeliveryPayload {
    /// The payload as stored (JSON text).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl RouteConfig {
    /// This route's frozen payload for `body` and `text`, and whether an expired
    /// lease of it may be delivered again (only webhooks deduplicate by id).
    pub fn delivery(&self, body: &serde_json::Value, text: &str) -> (DeliveryPayload, bool) {
        let payload = match self.channel {
            RouteChannel::Webhook => {
                let mut body = body.clone();
                if let (Some(brand), Some(map)) = (&self.brand, body.as_object_mut()) {
                    map.insert("brand".into(), serde_json::Value::String(brand.clone()));
                }
                DeliveryPayload::Webhook(WebhookPayload {
                    url: self.url.clone(),
                    body,
                    secret_ref: self.secret_ref.clone(),
                })
            }
            RouteChannel::Chat => DeliveryPayload::Chat(ChatPayload {
                url: self.url.clone(),
                text: text.to_string(),
                brand: self.brand.clone(),
            }),
            RouteChannel::Email => DeliveryPayload::Email(EmailPayload {
                url: self.url.clone(),
                to: self.to.clone(),
                from: self.from.clone().unwrap_or_else(|| DEFAULT_FROM.into()),
                brand: self.brand.clone(),
                subject: self.subject.clone(),
                body: self.body.clone(),
                secret_ref: self.secret_ref.clone(),
                snapshot: body.clone(),
                text: text.to_string(),
            }),
        };
        (payload, self.channel == RouteChannel::Webhook)
    }
}
