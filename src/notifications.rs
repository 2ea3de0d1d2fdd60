//! The jobs source's notifications (seed 003): what a run's terminal transition
//! owes, frozen at commit time — a `callback` to the run's callback URL, one
//! `delivery` per configured route — and the `dead_letter` notice of a failed event.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::channels::chat::{ChatHandler, ChatPayload};
use crate::channels::email::{EmailHandler, EmailPayload};
use crate::channels::webhook::{WebhookHandler, WebhookPayload};
use crate::config::{RouteChannel, RouteConfig, Settings};
use crate::outbox::handler::{Handler, Outcome};
use crate::outbox::model::{
    dead_letter_notice_id, ClaimedEvent, DeadLetterNotifier, FailedEvent, NewEvent, Source,
};
use crate::service::format_ms;
use crate::store::ports::Run;

pub mod kinds {
    pub const CALLBACK: &str = "callback";
    pub const DELIVERY: &str = "delivery";
    pub const DEAD_LETTER: &str = "dead_letter";
}

/// A delivery event's frozen payload: the route's channel and coordinates as of commit.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "channel", rename_all = "snake_case")]
pub enum DeliveryPayload {
    Webhook(WebhookPayload),
    Chat(ChatPayload),
    Email(EmailPayload),
    /// The run named a route that was no longer configured when it finished:
    /// recorded (and failed) rather than silently dropped.
    MissingRoute {
        route: String,
    },
}

/// Plans the events a transition owes.
pub struct NotificationPlanner {
    routes: HashMap<String, RouteConfig>,
    callback_secret_ref: Option<String>,
    dead_letter_route: Option<String>,
    max_attempts: u32,
}

impl NotificationPlanner {
    pub fn new(settings: &Settings) -> Self {
        NotificationPlanner {
            routes: settings
                .routes
                .iter()
                .map(|r| (r.name.clone(), r.clone()))
                .collect(),
            callback_secret_ref: Some(settings.callback_secret_ref.clone())
                .filter(|s| !s.is_empty()),
            dead_letter_route: Some(settings.dead_letter_route.clone()).filter(|s| !s.is_empty()),
            max_attempts: settings.max_attempts,
        }
    }

    pub fn has_route(&self, name: &str) -> bool {
        self.routes.contains_key(name)
    }

    /// The events of a terminal transition. `run` is the run as committed.
    pub fn for_terminal(&self, run: &Run, routes: &[String]) -> Vec<NewEvent> {
        let snapshot = snapshot(run);
        let mut events = Vec::new();
        if let Some(url) = &run.callback_url {
            events.push(
                self.event(
                    // The terminal event is part of the identity: another legitimate
                    // terminal event of this run is another callback.
                    format!(
                        "callback_{}_{}_{}",
                        run.id,
                        run.status.as_str(),
                        run.transition_seq
                    ),
                    kinds::CALLBACK,
                    run,
                    WebhookPayload {
                        url: url.clone(),
                        body: snapshot.clone(),
                        secret_ref: self.callback_secret_ref.clone(),
                    }
                    .to_json(),
                    true,
                ),
            );
        }
        for name in routes {
            let (payload, redeliverable) = match self.routes.get(name) {
                Some(route) => self.route_payload(route, &snapshot, &run_text(run)),
                None => (
                    serde_json::to_string(&DeliveryPayload::MissingRoute {
                        route: name.clone(),
                    })
                    .unwrap_or_default(),
                    true,
                ),
            };
            events.push(self.event(
                format!("deliver_{}_{}", run.id, name),
                kinds::DELIVERY,
                run,
                payload,
                redeliverable,
            ));
        }
        events
    }

    /// A configured route by name.
    pub fn route(&self, name: &str) -> Option<&RouteConfig> {
        self.routes.get(name)
    }

    /// A route's frozen payload for `body` (webhooks; e-mail templates read it) or
    /// `text` (chat; e-mail's default body), and whether
    /// an expired lease of it may be delivered again.
    pub(crate) fn route_payload(
        &self,
        route: &RouteConfig,
        body: &serde_json::Value,
        text: &str,
    ) -> (String, bool) {
        let payload = match route.channel {
            RouteChannel::Webhook => {
                let mut body = body.clone();
                if let (Some(brand), Some(map)) = (&route.brand, body.as_object_mut()) {
                    map.insert("brand".into(), serde_json::Value::String(brand.clone()));
                }
                DeliveryPayload::Webhook(WebhookPayload {
                    url: route.url.clone(),
                    body,
                    secret_ref: route.secret_ref.clone(),
                })
            }
            RouteChannel::Chat => DeliveryPayload::Chat(ChatPayload {
                url: route.url.clone(),
                text: text.to_string(),
                brand: route.brand.clone(),
            }),
            RouteChannel::Email => {
                DeliveryPayload::Email(crate::channels::email::payload(route, body, text))
            }
        };
        let redeliverable = route.channel == RouteChannel::Webhook;
        (
            serde_json::to_string(&payload).unwrap_or_default(),
            redeliverable,
        )
    }

    fn event(
        &self,
        event_id: String,
        kind: &str,
        run: &Run,
        payload: String,
        redeliverable: bool,
    ) -> NewEvent {
        NewEvent {
            event_id,
            source: Source::Jobs,
            kind: kind.to_string(),
            parent_type: "run".into(),
            parent_id: run.id.clone(),
            payload,
            redeliverable,
            max_attempts: self.max_attempts,
            delay_ms: 0,
        }
    }

    /// The notifier that tells the dead-letter route about failed events (never
    /// about failed dead-letter notices, which would loop).
    pub fn dead_letter_notifier(self: &Arc<Self>) -> Option<DeadLetterNotifier> {
        let route = self.routes.get(self.dead_letter_route.as_ref()?)?.clone();
        let planner = self.clone();
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
            let (payload, redeliverable) = planner.route_payload(&route, &body, &text);
            Some(NewEvent {
                event_id: dead_letter_notice_id(&failed.event_id, failed.cycle),
                source: Source::Jobs,
                kind: kinds::DEAD_LETTER.into(),
                parent_type: failed.parent_type.clone(),
                parent_id: failed.parent_id.clone(),
                payload,
                redeliverable,
                max_attempts: planner.max_attempts,
                delay_ms: 0,
            })
        }))
    }
}

impl WebhookPayload {
    fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The business snapshot a notification carries.
fn snapshot(run: &Run) -> serde_json::Value {
    let result = run
        .result
        .as_deref()
        .and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok())
        .unwrap_or(serde_json::Value::Null);
    serde_json::json!({
        "event": "run.finished",
        "run_id": run.id,
        "type": run.run_type,
        "tenant": run.tenant,
        "status": run.status.as_str(),
        "transition_seq": run.transition_seq,
        "finished_at": format_ms(run.updated_at_ms),
        "result": result,
    })
}

fn run_text(run: &Run) -> String {
    let mut text = format!(
        "Run {} ({}, tenant {}) {}.",
        run.id,
        run.run_type,
        run.tenant,
        run.status.as_str()
    );
    if let Some(result) = &run.result {
        text.push('\n');
        text.push_str(result);
    }
    text
}

/// Delivers `delivery` and `dead_letter` events over their route's channel.
pub struct DeliveryHandler {
    pub webhook: WebhookHandler,
    pub chat: ChatHandler,
    pub email: EmailHandler,
}

#[async_trait]
impl Handler for DeliveryHandler {
    async fn handle(&self, event: &ClaimedEvent) -> Outcome {
        match crate::channels::read_payload(&event.payload, "delivery") {
            Ok(DeliveryPayload::Webhook(payload)) => {
                self.webhook.deliver(&event.event_id, payload).await
            }
            Ok(DeliveryPayload::Chat(payload)) => self.chat.deliver(payload).await,
            Ok(DeliveryPayload::Email(payload)) => {
                self.email.deliver(&event.event_id, payload).await
            }
            Ok(DeliveryPayload::MissingRoute { route }) => Outcome::Permanent {
                error: format!(
                    "route {route:?} was not configured when the run finished; nothing was sent"
                ),
                status_code: None,
            },
            Err(outcome) => outcome,
        }
    }
}
