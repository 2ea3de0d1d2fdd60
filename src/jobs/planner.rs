//! Plans the events a run's terminal transition owes.

use std::sync::Arc;

use super::kinds;
use crate::channels::webhook::WebhookPayload;
use crate::clock::format_ms;
use crate::outbox::destinations::destination_of;
use crate::outbox::model::{NewEvent, Source};
use crate::routes::{lane_key, DeliveryPayload, OrderedBy, Routes};
use crate::store::ports::Run;
use vocab::run_approvals::{approval_request_id, ApprovalRequest, RunDecision, APPROVAL_REQUEST};

/// What the jobs planner needs to know besides the routes.
#[derive(Clone, Debug, Default)]
pub struct JobsPlan {
    /// The signing secret's reference for run callbacks (none: unsigned).
    pub callback_secret_ref: Option<String>,
    /// The route told of failed events (none: nobody is told).
    pub dead_letter_route: Option<String>,
    /// Sending attempts per automatic cycle.
    pub max_attempts: u32,
    /// Run callbacks delivered one at a time per run or tenant (none: unordered).
    pub callback_ordered_by: Option<OrderedBy>,
}

pub struct JobsPlanner {
    pub(super) routes: Arc<Routes>,
    pub(super) plan: JobsPlan,
}

impl JobsPlanner {
    pub fn new(routes: Arc<Routes>, plan: JobsPlan) -> Self {
        JobsPlanner { routes, plan }
    }

    /// The configured routes this planner sends over (shared with other sources).
    pub fn routes(&self) -> &Arc<Routes> {
        &self.routes
    }

    pub fn has_route(&self, name: &str) -> bool {
        self.routes.contains(name)
    }

    /// The events of a terminal transition. `run` is the run as committed.
    pub fn for_terminal(&self, run: &Run, routes: &[String]) -> Vec<NewEvent> {
        let snapshot = snapshot(run);
        let mut events = Vec::new();
        // The terminal event is part of the identity: another legitimate terminal
        // event of this run is another callback.
        events.extend(self.callback(
            run,
            format!(
                "callback_{}_{}_{}",
                run.id,
                run.status.as_str(),
                run.transition_seq
            ),
            snapshot.clone(),
        ));
        for name in routes {
            let (payload, redeliverable, destination, lane) = match self.routes.get(name) {
                Some(route) => {
                    let (payload, redeliverable) = route.delivery(&snapshot, &run_text(run));
                    (
                        payload,
                        redeliverable,
                        destination_of(&route.url),
                        route.lane(&run.id, &run.tenant),
                    )
                }
                None => (
                    DeliveryPayload::MissingRoute {
                        route: name.clone(),
                    },
                    true,
                    None,
                    None,
                ),
            };
            events.push(NewEvent {
                lane,
                ..self.event(
                    format!("deliver_{}_{}", run.id, name),
                    kinds::DELIVERY,
                    run,
                    payload.to_json(),
                    redeliverable,
                    destination,
                )
            });
        }
        events
    }

    /// What a run's continuation owes (DESIGN §9), `run` as the continuation moved
    /// it: an approval tells the producer with a signed `run.approved` (a recall
    /// with `run.approval_recalled`), each its own callback identity; a rejection
    /// cancelled the run, which owes every terminal notification.
    pub fn for_continuation(
        &self,
        run: &Run,
        approval_id: &str,
        decision: RunDecision,
        by: &str,
    ) -> Vec<NewEvent> {
        let event = match decision {
            RunDecision::Rejected => return self.for_terminal(run, &run.routes),
            RunDecision::Approved => "approved",
            RunDecision::Recalled => "approval_recalled",
        };
        let body = serde_json::json!({
            "event": format!("run.{event}"),
            "run_id": run.id,
            "type": run.run_type,
            "tenant": run.tenant,
            "status": run.status.as_str(),
            "transition_seq": run.transition_seq,
            "approval_id": approval_id,
            "decided_by": by,
            "at": format_ms(run.updated_at_ms),
        });
        self.callback(
            run,
            format!("callback_{}_{event}_{}", run.id, run.transition_seq),
            body,
        )
        .into_iter()
        .collect()
    }

    /// A signed webhook of `body` to the run's callback, if it has one.
    fn callback(&self, run: &Run, event_id: String, body: serde_json::Value) -> Option<NewEvent> {
        let url = run.callback_url.as_ref()?;
        let payload = WebhookPayload {
            url: url.clone(),
            body,
            secret_ref: self.plan.callback_secret_ref.clone(),
        };
        let lane = self
            .plan
            .callback_ordered_by
            .map(|by| lane_key("callback", by, &run.id, &run.tenant));
        Some(NewEvent {
            lane,
            ..self.event(
                event_id,
                kinds::CALLBACK,
                run,
                serde_json::to_string(&payload).unwrap_or_default(),
                true,
                destination_of(url),
            )
        })
    }

    /// The `approval_request` a run's move to `awaiting_approval` owes (DESIGN §9):
    /// it opens the approval in the approvals store, wherever that is.
    pub fn approval_request(&self, run: &Run, request: &ApprovalRequest) -> NewEvent {
        self.event(
            approval_request_id(&request.approval_id),
            APPROVAL_REQUEST,
            run,
            serde_json::to_string(request).unwrap_or_default(),
            true,
            None,
        )
    }

    fn event(
        &self,
        event_id: String,
        kind: &str,
        run: &Run,
        payload: String,
        redeliverable: bool,
        destination: Option<String>,
    ) -> NewEvent {
        NewEvent {
            event_id,
            source: Source::Jobs,
            kind: kind.to_string(),
            parent_type: "run".into(),
            parent_id: run.id.clone(),
            payload,
            redeliverable,
            max_attempts: self.plan.max_attempts,
            delay_ms: 0,
            destination,
            // Set by the caller, who knows whose trace it continues (a
            // transition's writer, a continuation's delivery).
            trace_parent: None,
            lane: None,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use vocab::RunStatus;

    fn succeeded_run() -> Run {
        Run {
            id: "run-1".into(),
            run_type: "etl".into(),
            tenant: "acme".into(),
            status: RunStatus::Succeeded,
            callback_url: Some("https://hooks.example.com/runs".into()),
            result: None,
            transition_seq: 2,
            routes: Vec::new(),
            approval_id: None,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    fn callback_lane(ordered_by: Option<OrderedBy>) -> Option<String> {
        let planner = JobsPlanner::new(
            Arc::new(Routes::new(&[])),
            JobsPlan {
                callback_ordered_by: ordered_by,
                ..JobsPlan::default()
            },
        );
        let events = planner.for_terminal(&succeeded_run(), &[]);
        assert_eq!(events.len(), 1, "one callback");
        events[0].lane.clone()
    }

    #[test]
    fn callbacks_join_their_run_or_tenant_lane_only_when_ordered() {
        assert_eq!(callback_lane(None), None);
        assert_eq!(
            callback_lane(Some(OrderedBy::Run)).as_deref(),
            Some("callback:run:run-1")
        );
        assert_eq!(
            callback_lane(Some(OrderedBy::Tenant)).as_deref(),
            Some("callback:tenant:acme")
        );
    }
}
