//! Deliveries (outbox events) as operators see them: redacted summaries for
//! readers, and the one manual-retry entry point (a compare-and-set, audited).

use std::sync::Arc;

use app::dto::{DeliveryStatus, Permission, Viewer};
use serde::{Deserialize, Serialize};

use super::{format_ms, require, ServiceError};
use crate::outbox::handler::Registry;
use crate::outbox::model::{EventRecord, RetryRefusal};
use crate::store::ports::{ManualRetry, OutboxStore};

/// An event without its payload: safe for every reader.
#[derive(Debug, Serialize, Deserialize)]
pub struct DeliverySummary {
    pub event_id: String,
    pub kind: String,
    pub status: DeliveryStatus,
    pub attempts: i64,
    pub cycle: i64,
    pub cycle_attempts: i64,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub next_attempt_at: String,
    pub created_at: String,
    pub updated_at: String,
    pub completed_at: Option<String>,
    pub failed_at: Option<String>,
    pub uncertain_at: Option<String>,
    pub dead_letter_id: Option<String>,
}

/// The body of `POST /api/v1/deliveries/{event_id}/retry`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    pub kind: String,
    pub expected_status: DeliveryStatus,
    #[serde(default)]
    pub allow_uncertain: bool,
}

#[derive(Clone)]
pub struct DeliveryService {
    store: Arc<dyn OutboxStore>,
    registry: Arc<Registry>,
    default_max_attempts: u32,
    /// Other sources' stores and handlers (the approvals source), by kind.
    others: Vec<(Arc<dyn OutboxStore>, Arc<Registry>)>,
}

impl DeliveryService {
    pub fn new(
        store: Arc<dyn OutboxStore>,
        registry: Arc<Registry>,
        default_max_attempts: u32,
    ) -> Self {
        DeliveryService {
            store,
            registry,
            default_max_attempts,
            others: Vec::new(),
        }
    }

    /// Adds a source whose kinds live in another store: retries of its kinds go
    /// to that store, through the same [`DeliveryService::retry`].
    pub fn with_source(mut self, store: Arc<dyn OutboxStore>, registry: Arc<Registry>) -> Self {
        self.others.push((store, registry));
        self
    }

    /// The store and registry that own `kind`.
    fn owner(&self, kind: &str) -> (&Arc<dyn OutboxStore>, &Arc<Registry>) {
        self.others
            .iter()
            .find(|(_, registry)| registry.get(kind).is_some())
            .map(|(store, registry)| (store, registry))
            .unwrap_or((&self.store, &self.registry))
    }

    pub async fn for_run(
        &self,
        viewer: Option<&Viewer>,
        run_id: &str,
    ) -> Result<Vec<DeliverySummary>, ServiceError> {
        require(viewer, Permission::RunsRead)?;
        let events = self.store.events_for_parent("run", run_id).await?;
        Ok(events.into_iter().map(summary).collect())
    }

    pub async fn retry(
        &self,
        viewer: Option<&Viewer>,
        event_id: &str,
        request: RetryRequest,
    ) -> Result<DeliverySummary, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?;
        let (store, registry) = self.owner(&request.kind);
        let max_attempts = registry
            .policy(&request.kind)
            .map(|p| p.max_attempts)
            .unwrap_or(self.default_max_attempts);
        let outcome = store
            .retry_event(&ManualRetry {
                event_id: event_id.to_string(),
                kind: request.kind,
                expected_status: request.expected_status,
                allow_uncertain: request.allow_uncertain,
                actor: viewer.name.clone(),
                max_attempts,
            })
            .await?;
        match outcome {
            Ok(()) => {
                tracing::info!(event_id, by = %viewer.name, acknowledged_duplicate_risk = request.allow_uncertain, "delivery retried");
                let event = store
                    .get_event(event_id)
                    .await?
                    .ok_or_else(|| ServiceError::NotFound(format!("delivery {event_id:?}")))?;
                Ok(summary(event))
            }
            Err(RetryRefusal::NotFound(id)) => Err(ServiceError::NotFound(format!("delivery {id:?}"))),
            Err(RetryRefusal::UncertainNeedsAcknowledgement) => Err(ServiceError::invalid(
                "allow_uncertain",
                RetryRefusal::UncertainNeedsAcknowledgement.to_string(),
            )),
            Err(RetryRefusal::NotRetryable(status)) => Err(ServiceError::invalid(
                "expected_status",
                format!("a {status} delivery cannot be retried; only failed, skipped and uncertain ones can"),
            )),
            Err(refusal) => Err(ServiceError::Conflict(refusal.to_string())),
        }
    }
}

fn summary(event: EventRecord) -> DeliverySummary {
    DeliverySummary {
        event_id: event.event_id,
        kind: event.kind,
        status: event.status,
        attempts: event.attempts,
        cycle: event.cycle,
        cycle_attempts: event.cycle_attempts,
        last_status_code: event.last_status_code,
        last_error: event.last_error,
        next_attempt_at: format_ms(event.next_attempt_at),
        created_at: format_ms(event.created_at),
        updated_at: format_ms(event.updated_at),
        completed_at: event.completed_at.map(format_ms),
        failed_at: event.failed_at.map(format_ms),
        uncertain_at: event.uncertain_at.map(format_ms),
        dead_letter_id: event.dead_letter_id,
    }
}
