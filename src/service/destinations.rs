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
    /// Every database holding breakers: the jobs store's, and the approvals
    /// database's when it is apart.
    stores: Vec<Arc<dyn DestinationStore>>,
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
    /// The breakers of `store` (the jobs store).
    pub fn for_store(store: &SqlStore) -> Self {
        DestinationService {
            stores: vec![Arc::new(store.clone())],
            durable: store.has_durable_outbox(),
        }
    }

    /// Also the breakers of `store`, a database of its own (the approvals
    /// database apart): its senders open and close their breakers there.
    pub fn with_store(mut self, store: &SqlStore) -> Self {
        self.stores.push(Arc::new(store.clone()));
        self
    }

    /// Every store's breakers, one a destination: where two stores hold one for
    /// the same destination, the more open (then the more recent) stands for it.
    async fn merged(&self) -> Result<Vec<BreakerRecord>, ServiceError> {
        let mut by_destination: std::collections::HashMap<String, BreakerRecord> =
            std::collections::HashMap::new();
        for store in &self.stores {
            for row in store.breakers().await? {
                let replace = match by_destination.get(&row.destination) {
                    None => true,
                    Some(kept) => {
                        (severity(&row.state), row.updated_at)
                            > (severity(&kept.state), kept.updated_at)
                    }
                };
                if replace {
                    by_destination.insert(row.destination.clone(), row);
                }
            }
        }
        Ok(by_destination.into_values().collect())
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
        Ok(open_first(self.merged().await?)
            .into_iter()
            .map(view)
            .collect())
    }

    /// Closes a destination's breaker by hand: its waiting events are due now.
    pub async fn close(
        &self,
        viewer: Option<&Viewer>,
        destination: &str,
    ) -> Result<BreakerClosed, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?;
        self.available()?;
        let known = self.merged().await?;
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
        // Closed in every store that holds it open, each close audited there.
        let mut closed: Option<(String, u64)> = None;
        for store in &self.stores {
            if let Some((from, released)) = store.close_breaker(destination, Some(&audit)).await? {
                let (state, total) = closed.get_or_insert((from.clone(), 0));
                if severity(&from) > severity(state) {
                    *state = from;
                }
                *total += released;
            }
        }
        let Some((from_state, released)) = closed else {
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

/// How open a breaker state is: open above half-open above closed.
fn severity(state: &str) -> u8 {
    match state {
        "open" => 2,
        "half_open" => 1,
        _ => 0,
    }
}
