//! The durable outbox engine (DESIGN §2–§3): producers enqueue events in their own
//! transaction; workers claim them under leases, run the kind's handler, and settle
//! the result fenced by the lease. One engine, a typed handler per kind.

pub mod archive;
pub mod availability;
pub mod best_effort;
pub mod destinations;
pub mod frontier;
pub mod hand_off;
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
use hand_off::{HandOff, Offer};
use model::NewEvent;
use peer_notice::PeerNotifier;
use test_pause::TestPause;

/// The producer's side of one store's outbox.
#[derive(Clone)]
pub struct Outbox {
    store: Arc<dyn OutboxStore>,
    units: WriteUnits,
    wake: Arc<Notify>,
    peers: PeerNotifier,
    /// This node's workers that take events leased at their insert
    /// (`hand_off`); shared by every clone, filled as workers start.
    hand_offs: Arc<std::sync::RwLock<Vec<Arc<HandOff>>>>,
    /// Crash tests only: where a unit that leased events pauses after its
    /// commit, before the hand-off ([`HAND_OFF_PAUSE_ENV`]).
    hand_off_pause: Arc<Option<TestPause>>,
}

/// Test-only: `committed:<marker file>` pauses a unit that leased events
/// between its commit and their hand-off, so a test can SIGKILL it there.
pub const HAND_OFF_PAUSE_ENV: &str = "HERALD_TEST_PAUSE_HAND_OFF";

impl Outbox {
    pub fn new(store: Arc<dyn OutboxStore>, wake: Arc<Notify>) -> Self {
        Outbox {
            peers: PeerNotifier::new(store.clone()),
            units: WriteUnits::new(store.clone()),
            store,
            wake,
            hand_offs: Default::default(),
            hand_off_pause: Arc::new(TestPause::from_env(HAND_OFF_PAUSE_ENV)),
        }
    }

    /// Lets `hand_off`'s worker take this outbox's events at their insert.
    pub fn add_hand_off(&self, hand_off: Arc<HandOff>) {
        self.hand_offs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(hand_off);
    }

    /// Runs `work` as [`Outbox::write`] does, giving it an [`Offer`] to enqueue
    /// through ([`Outbox::enqueue_offering_in`]); the events it leased go to
    /// their workers once the unit has committed.
    pub async fn write_offering<T, E, F>(&self, work: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: for<'a> FnOnce(&'a mut WriteTx, Arc<Offer>) -> UnitFuture<'a, T, E> + Send + 'static,
    {
        let offer = Arc::new(Offer::default());
        let offered = offer.clone();
        let value = self.units.run(move |tx| work(tx, offered)).await?;
        // Events leased at insert need no claim: no worker here or on other
        // nodes is woken for them.
        if offer.left_pending() {
            self.committed();
        }
        if offer.holds_any() {
            TestPause::at(&self.hand_off_pause, "committed").await;
        }
        offer.hand_off();
        Ok(value)
    }

    /// Adds events to `tx` as [`Outbox::enqueue_all_in`] does, those a worker
    /// of this node has a free place for leased to it through `offer`.
    pub async fn enqueue_offering_in(
        &self,
        tx: &mut WriteTx,
        events: &[NewEvent],
        offer: &Offer,
    ) -> Result<(), StoreError> {
        let hand_offs = self
            .hand_offs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if hand_offs.is_empty() {
            offer.leave_pending();
            return self.enqueue_all_in(tx, events).await;
        }
        offer.enqueue_in(&*self.store, &hand_offs, tx, events).await
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
