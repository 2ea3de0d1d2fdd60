//! Destination health for operators: the circuit breakers every node shares
//! (read with `runs:read`) and their manual close (`runs:write`, audited).

use std::sync::Arc;

use app::dto::{BreakerClosed, BreakerView};

use vocab::{Permission, Viewer};

use super::{format_ms, require, ServiceError};
use crate::outbox::destinations::open_first;
use crate::store::ports::{BreakerRecord, DestinationStore, NewAuditEntry};
use crate::store::SqlStore;

#[derive(Clone)]
pub struct DestinationService {
    store: Arc<dyn DestinationStore>,
    durable: bool,
}

fn view(record: BreakerRecord) -> BreakerView {
    BreakerView {
        destination: record.destination,
        route: record.route,
        state: record.state,
        failures: record.failures,
        opened_at: record.opened_at.map(format_ms),
        probe_at: record.probe_at.map(format_ms),
    }
}

impl DestinationService {
    /// The breakers of `store` (the jobs store; a separate approvals store keeps
    /// its own).
    pub fn for_store(store: &SqlStore) -> Self {
        DestinationService {
            store: Arc::new(store.clone()),
            durable: store.has_durable_outbox(),
        }
    }

    fn available(&self) -> Result<(), ServiceError> {
        if self.durable {
            Ok(())
        } else {
            Err(ServiceError::CapabilityUnavailable(
                super::deliveries::NO_DURABLE_OUTBOX.into(),
            ))
        }
    }

    /// Every destination that has had a breaker, open and half-open ones first.
    pub async fn breakers(
        &self,
        viewer: Option<&Viewer>,
    ) -> Result<Vec<BreakerView>, ServiceError> {
        require(viewer, Permission::RunsRead)?;
        self.available()?;
        let rows = self.store.breakers().await?;
        Ok(open_first(rows).into_iter().map(view).collect())
    }

    /// Closes a destination's breaker by hand: its waiting events are due now.
    pub async fn close(
        &self,
        viewer: Option<&Viewer>,
        destination: &str,
    ) -> Result<BreakerClosed, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?;
        self.available()?;
        let known = self.store.breakers().await?;
        let Some(record) = known.iter().find(|r| r.destination == destination) else {
            return Err(ServiceError::NotFound(format!(
                "breaker of destination {destination:?}"
            )));
        };
        // Audited in the close's own transaction (its state and count filled in there).
        let audit = NewAuditEntry {
            subject: format!("breaker of route {} ({destination})", record.route),
            action: "close_breaker".into(),
            actor: viewer.name.clone(),
            from_status: String::new(),
            acknowledged_duplicate_risk: false,
            affected: 0,
        };
        let Some((from_state, released)) =
            self.store.close_breaker(destination, Some(&audit)).await?
        else {
            return Err(ServiceError::Conflict(
                "the destination's breaker is already closed".into(),
            ));
        };
        tracing::info!(route = %record.route, actor = %viewer.name, released, "destination breaker closed by hand");
        Ok(BreakerClosed {
            destination: destination.to_string(),
            from_state,
            released,
        })
    }
}
