//! The durable outbox engine (DESIGN §2–§3): producers enqueue events in their own
//! transaction; workers claim them under leases, run the kind's handler, and settle
//! the result fenced by the lease. One engine, a typed handler per kind.

pub mod destinations;
pub mod handler;
pub mod maintenance;
pub mod metrics;
pub mod model;
pub mod policy;
pub mod worker;

use std::sync::Arc;

use tokio::sync::Notify;

use crate::store::ports::{OutboxStore, WriteTx};
use crate::store::StoreError;
use model::NewEvent;

/// The producer's side of one store's outbox.
#[derive(Clone)]
pub struct Outbox {
    store: Arc<dyn OutboxStore>,
    wake: Arc<Notify>,
}

impl Outbox {
    pub fn new(store: Arc<dyn OutboxStore>, wake: Arc<Notify>) -> Self {
        Outbox { store, wake }
    }

    pub fn store(&self) -> &Arc<dyn OutboxStore> {
        &self.store
    }

    pub fn wake_handle(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Opens the transaction a state change and its events commit in.
    pub async fn begin(&self) -> Result<WriteTx, StoreError> {
        self.store.begin_write().await
    }

    /// Adds an event to `tx` (insert-if-absent on its id).
    pub async fn enqueue_in(&self, tx: &mut WriteTx, event: &NewEvent) -> Result<(), StoreError> {
        self.store.enqueue_in(tx, event).await
    }

    /// Commits, then wakes this process's workers so the events do not wait a poll.
    pub async fn commit(&self, tx: WriteTx) -> Result<(), StoreError> {
        tx.commit().await?;
        self.wake.notify_one();
        Ok(())
    }

    /// Enqueues events in a transaction of their own.
    pub async fn enqueue(&self, events: &[NewEvent]) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        for event in events {
            self.enqueue_in(&mut tx, event).await?;
        }
        self.commit(tx).await
    }
}
