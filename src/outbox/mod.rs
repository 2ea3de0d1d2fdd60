//! The durable outbox engine (DESIGN §2–§3): producers enqueue events in their own
//! transaction; workers claim them under leases, run the kind's handler, and settle
//! the result fenced by the lease. One engine, a typed handler per kind.

pub mod archive;
pub mod availability;
pub mod best_effort;
pub mod destinations;
pub mod frontier;
pub mod handler;
pub mod maintenance;
pub mod metrics;
pub mod model;
pub mod pace;
pub mod peer_notice;
pub mod policy;
pub mod retention;
pub mod rollup;
pub mod test_pause;
pub mod worker;

use std::sync::Arc;

use tokio::sync::Notify;

use crate::store::ports::{OutboxStore, WriteTx};
use crate::store::{GroupCommitter, StoreError, UnitFuture, WriteUnits};
use model::NewEvent;
use peer_notice::PeerNotifier;

/// The producer's side of one store's outbox.
#[derive(Clone)]
pub struct Outbox {
    store: Arc<dyn OutboxStore>,
    units: WriteUnits,
    wake: Arc<Notify>,
    peers: PeerNotifier,
}

impl Outbox {
    pub fn new(store: Arc<dyn OutboxStore>, wake: Arc<Notify>) -> Self {
        Outbox {
            peers: PeerNotifier::new(store.clone()),
            units: WriteUnits::new(store.clone()),
            store,
            wake,
        }
    }

    /// Runs [`Outbox::write`] units, and those of [`Outbox::units`], through `group`
    /// (same store as this outbox).
    pub fn with_group_commit(mut self, group: GroupCommitter) -> Self {
        self.units = self.units.with_group_commit(group);
        self
    }

    /// Runs `work` as a write unit ([`WriteUnits::run`]) and, once it has
    /// committed, wakes this process's workers and (coalesced) other nodes' for the
    /// events it enqueued.
    pub async fn write<T, E, F>(&self, work: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: for<'a> FnOnce(&'a mut WriteTx) -> UnitFuture<'a, T, E> + Send + 'static,
    {
        let value = self.units.run(work).await?;
        self.committed();
        Ok(value)
    }

    /// The write units this outbox's producers share (group commit included), for
    /// writes that enqueue no events.
    pub fn units(&self) -> &WriteUnits {
        &self.units
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

    /// Adds events to `tx` (insert-if-absent on their ids), several a statement.
    pub async fn enqueue_all_in(
        &self,
        tx: &mut WriteTx,
        events: &[NewEvent],
    ) -> Result<(), StoreError> {
        self.store.enqueue_all_in(tx, events).await
    }

    /// Commits, then wakes this process's workers so the events do not wait a
    /// poll, and (coalesced) other nodes' workers.
    pub async fn commit(&self, tx: WriteTx) -> Result<(), StoreError> {
        tx.commit().await?;
        self.committed();
        crate::changes::notify();
        Ok(())
    }

    fn committed(&self) {
        self.wake.notify_one();
        self.peers.signal();
    }

    /// Enqueues events in a transaction of their own.
    pub async fn enqueue(&self, events: &[NewEvent]) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        self.enqueue_all_in(&mut tx, events).await?;
        self.commit(tx).await
    }
}
