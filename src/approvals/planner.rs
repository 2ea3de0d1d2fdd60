//! What an approval's lifecycle transition owes, as outbox events with
//! deterministic ids (DESIGN §2): the approval prompt to the step's approver route
//! (`approval_<id>`; later steps `approval_<id>_step<n>`), one `alert` per Alert
//! action (`alert_<id>_<event>_<seq>_<action>`), and the one replay event of a
//! transition that owes FieldUpdates (`<event>_<id>_<seq>`, e.g. `recall_<id>_3`)
//! holding its frozen instructions, in its record's lane.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::model::{
    kinds, Action, Definition, Instance, LifecycleEvent, ReplayPayload, Step, PARENT_TYPE,
    RUN_OBJECT,
};
use crate::outbox::destinations::destination_of;
use crate::outbox::model::{NewEvent, Source};
use crate::outbox::policy::RetryPolicy;
use crate::routes::{DeliveryPayload, Routes};
use vocab::run_approvals::{continuation_id, RunContinuation, RunDecision, RUN_CONTINUATION};

/// An approval prompt's frozen payload: which approval it asks about (its handler
/// re-checks that the approval still waits on this step) and how it leaves.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptPayload {
    pub approval_id: String,
    pub step_index: i64,
    pub delivery: DeliveryPayload,
}

pub struct ApprovalPlanner {
    routes: Arc<Routes>,
    max_attempts: u32,
    replay_max_attempts: u32,
}

impl ApprovalPlanner {
    pub fn new(routes: Arc<Routes>, policy: &RetryPolicy, replay_policy: &RetryPolicy) -> Self {
        ApprovalPlanner {
            routes,
            max_attempts: policy.max_attempts,
            replay_max_attempts: replay_policy.max_attempts,
        }
    }

    pub fn has_route(&self, name: &str) -> bool {
        self.routes.contains(name)
    }

    /// The prompt's event id for step `index` of approval `id`.
    pub fn prompt_id(approval_id: &str, index: i64) -> String {
        if index == 0 {
            format!("approval_{approval_id}")
        } else {
            format!("approval_{approval_id}_step{index}")
        }
    }

    /// The prompt of the step `instance` now waits on, if the step names a route.
    pub fn prompt(&self, definition: &Definition, instance: &Instance) -> Option<NewEvent> {
        let step: &Step = definition.steps.get(instance.step_index as usize)?;
        let route_name = step.route.as_deref()?;
        let (target, target_text) = target_of(instance);
        let mut body = serde_json::json!({
            "event": "approval.requested",
            "approval_id": instance.id,
            "definition_id": definition.id,
            "definition_version": definition.version,
            "step": step.name,
            "approver": { step.approver.kind(): step.approver.name() },
            "submitted_by": instance.submitted_by,
        });
        merge(&mut body, target);
        let text = format!(
            "Approval {} of {target_text} waits on step {:?} ({} {}), submitted by {}.",
            instance.id,
            step.name,
            step.approver.kind(),
            step.approver.name(),
            instance.submitted_by
        );
        // A route removed from the config since the definition named it: the prompt
        // is recorded and fails with a clear error, as a run's would, not skipped.
        let route = self.routes.get(route_name);
        let (delivery, redeliverable) = match route {
            Some(route) => route.delivery(&body, &text),
            None => (missing(route_name), true),
        };
        let payload = PromptPayload {
            approval_id: instance.id.clone(),
            step_index: instance.step_index,
            delivery,
        };
        let mut prompt = self.event(
            Self::prompt_id(&instance.id, instance.step_index),
            kinds::APPROVAL_PROMPT,
            instance,
            serde_json::to_string(&payload).ok()?,
            redeliverable,
            self.max_attempts,
        );
        // Its route's URL is nested in the payload: named here, so the prompt is
        // held to its destination's cap and breaker like every event that leaves.
        prompt.destination = route.and_then(|r| destination_of(&r.url));
        Some(prompt)
    }

    /// One `alert` event per Alert action of `event` (`instance` as committed).
    pub fn alerts(
        &self,
        definition: &Definition,
        instance: &Instance,
        event: LifecycleEvent,
        actor: &str,
    ) -> Vec<NewEvent> {
        let mut events = Vec::new();
        for action in definition.actions.for_event(event) {
            let Action::Alert { id, name, route } = action else {
                continue;
            };
            let (route_name, route) = (route, self.routes.get(route));
            let (target, target_text) = target_of(instance);
            let mut body = serde_json::json!({
                "event": format!("approval.{}", event.label()),
                "approval_id": instance.id,
                "action_id": id,
                "action_name": name,
                "definition_id": definition.id,
                "status": instance.status.as_str(),
                "actor": actor,
            });
            merge(&mut body, target);
            let text = format!(
                "Approval {} of {target_text}: {} by {} ({}).",
                instance.id,
                event.as_str(),
                actor,
                if name.is_empty() { id } else { name }
            );
            let (payload, redeliverable) = match route {
                Some(route) => route.delivery(&body, &text),
                None => (missing(route_name), true),
            };
            let mut alert = self.event(
                format!(
                    "alert_{}_{}_{}_{}",
                    instance.id,
                    event.label(),
                    instance.transition_seq,
                    id
                ),
                kinds::ALERT,
                instance,
                payload.to_json(),
                redeliverable,
                self.max_attempts,
            );
            alert.destination = route.and_then(|r| destination_of(&r.url));
            events.push(alert);
        }
        events
    }

    /// The one replay event of a lifecycle transition (`payload.lifecycle_event`)
    /// that owes FieldUpdates: keyed by the event, the instance and the
    /// transition's sequence, and in its record's lane, so the FieldUpdates of one
    /// record apply in the order their transitions committed (docs/ORDERING.md).
    pub fn replay(&self, instance: &Instance, payload: &ReplayPayload) -> NewEvent {
        let mut replay = self.event(
            payload
                .lifecycle_event
                .replay_id(&instance.id, instance.transition_seq),
            kinds::FIELD_UPDATE,
            instance,
            serde_json::to_string(payload).unwrap_or_default(),
            true,
            self.replay_max_attempts,
        );
        replay.lane = Some(record_lane(&instance.object, &instance.record_id));
        replay
    }

    /// The continuation a decided or recalled run approval owes its run (DESIGN
    /// §9): one per approval, so a redelivered decision cannot continue it twice.
    pub fn continuation(&self, instance: &Instance, decision: RunDecision, by: &str) -> NewEvent {
        let payload = RunContinuation {
            approval_id: instance.id.clone(),
            run_id: instance.record_id.clone(),
            decision,
            by: by.to_string(),
        };
        self.event(
            continuation_id(&instance.id),
            RUN_CONTINUATION,
            instance,
            serde_json::to_string(&payload).unwrap_or_default(),
            true,
            self.max_attempts,
        )
    }

    fn event(
        &self,
        event_id: String,
        kind: &str,
        instance: &Instance,
        payload: String,
        redeliverable: bool,
        max_attempts: u32,
    ) -> NewEvent {
        NewEvent {
            event_id,
            source: Source::Approvals,
            kind: kind.to_string(),
            parent_type: PARENT_TYPE.into(),
            parent_id: instance.id.clone(),
            payload,
            redeliverable,
            max_attempts,
            delay_ms: 0,
            // Set by `prompt` and `alerts`, whose events leave for a route's URL;
            // replays write records and go to no destination.
            destination: None,
            // The lifecycle call's trace (its request's span is current).
            trace_parent: crate::telemetry::current_traceparent(),
            lane: None,
        }
    }
}

/// The lane of the FieldUpdates of one approved record: `record:<object>:<id>`.
pub fn record_lane(object: &str, record_id: &str) -> String {
    crate::routes::bounded_lane(format!("record:{object}:{record_id}"))
}

/// What an approval is about, as its notices name it: a run, or a record of an
/// object.
fn target_of(instance: &Instance) -> (serde_json::Value, String) {
    if instance.object == RUN_OBJECT {
        (
            serde_json::json!({ "target": "run", "run_id": instance.record_id }),
            format!("run {}", instance.record_id),
        )
    } else {
        (
            serde_json::json!({ "object": instance.object, "record_id": instance.record_id }),
            format!("{} {}", instance.object, instance.record_id),
        )
    }
}

fn merge(body: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(body), serde_json::Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
}

/// The payload of an event owed to a route no longer configured: its handler fails
/// it with a clear error, so the operators see it.
fn missing(route: &str) -> DeliveryPayload {
    DeliveryPayload::MissingRoute {
        route: route.to_string(),
    }
}
