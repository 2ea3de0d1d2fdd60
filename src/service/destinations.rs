//! Destination health for operators: the circuit breakers every node shares
//! (read with `runs:read`) and their manual close (`runs:write`, audited).

use std::sync::Arc;

use app::dto::{BreakerClosed, BreakerList, BreakerView};

use vocab::{Permission, Viewer};

use super::{format_ms, partial_read, require, ServiceError};
use crate::outbox::destinations::open_first;
use crate::store::ports::{BreakerRecord, DestinationStore, NewAuditEntry};
use crate::store::SqlStore;

#[derive(Clone)]
pub struct DestinationService {
    /// Every database holding breakers: the jobs store's, and the approvals
    /// database's when it is apart.
    stores: Vec<(&'static str, Arc<dyn DestinationStore>)>,
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
            stores: vec![("jobs", Arc::new(store.clone()))],
            durable: store.has_durable_outbox(),
        }
    }

    /// Also the breakers of `store`, a database of its own (the approvals
    /// database apart): its senders open and close their breakers there.
    pub fn with_store(mut self, store: &SqlStore) -> Self {
        self.stores.push(("approvals", Arc::new(store.clone())));
        self
    }

    /// Every store's breakers, one a destination: where two stores hold one for
    /// the same destination, the more open (then the more recent) stands for it.
    /// A store that cannot be read while another can is left out and named.
    async fn merged(&self) -> Result<(Vec<BreakerRecord>, Vec<String>), ServiceError> {
        let mut by_destination: std::collections::HashMap<String, BreakerRecord> =
            std::collections::HashMap::new();
        let mut unavailable = Vec::new();
        for (name, store) in &self.stores {
            let read = store.breakers().await;
            let rows = partial_read(name, read, &mut unavailable, self.stores.len())?;
            for row in rows.unwrap_or_default() {
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
        Ok((by_destination.into_values().collect(), unavailable))
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
    pub async fn breakers(&self, viewer: Option<&Viewer>) -> Result<BreakerList, ServiceError> {
        require(viewer, Permission::RunsRead)?;
        self.available()?;
        let (records, unavailable) = self.merged().await?;
        Ok(BreakerList {
            breakers: open_first(records).into_iter().map(view).collect(),
            unavailable,
        })
    }

    /// Closes a destination's breaker by hand: its waiting events are due now.
    pub async fn close(
        &self,
        viewer: Option<&Viewer>,
        destination: &str,
    ) -> Result<BreakerClosed, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?;
        self.available()?;
        let (known, _) = self.merged().await?;
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
            reason: None,
        };
        // Closed in every store that holds it open, each close audited there.
        // A store that cannot be reached while another can keeps its breaker; the
        // panel names it until it answers again.
        let mut closed: Option<(String, u64)> = None;
        let mut unavailable = Vec::new();
        for (name, store) in &self.stores {
            let close = store.close_breaker(destination, Some(&audit)).await;
            let close = partial_read(name, close, &mut unavailable, self.stores.len())?;
            if let Some((from, released)) = close.flatten() {
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
