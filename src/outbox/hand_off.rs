//! Events leased as they are written: when the committing node's worker has a
//! free place for an event, the event is inserted already `processing` under a
//! lease of that worker's, and handed to it in memory once its transaction has
//! committed. No claim statement runs for it: one row version fewer a webhook.
//!
//! Only events that a claim would take at once, and whose lost hand-off the
//! expired-lease scan recovers as it recovers any claim's, are leased so:
//! redeliverable, with an attempt to spare, unordered, due now, of a kind the
//! worker runs, to a destination that is closed and below its cap, while the
//! worker has no backlog (its last claim did not fill: events already due go
//! first, through claims). Should the
//! process die between the commit and the send, the lease expires and any
//! worker takes the event again, as after a crash mid-attempt.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::destinations::DestinationHealth;
use super::handler::Registry;
use super::metrics::Metrics;
use super::model::{ClaimedEvent, NewEvent};
use crate::store::ports::{EventLease, OutboxStore, WriteTx};
use crate::store::StoreError;

/// An event leased at its insert, with the worker place it holds.
pub struct Leased {
    pub event: ClaimedEvent,
    pub place: OwnedSemaphorePermit,
    /// Counted as waiting at its destination ([`DestinationHealth::reserve`]).
    pub counted: bool,
}

/// One worker pool's side of the hand-off: its places, its kinds, its queue.
pub struct HandOff {
    holder: String,
    registry: Arc<Registry>,
    places: Arc<Semaphore>,
    destinations: Option<Arc<DestinationHealth>>,
    metrics: Arc<Metrics>,
    queue: mpsc::UnboundedSender<Leased>,
    receiver: Mutex<Option<mpsc::UnboundedReceiver<Leased>>>,
    /// Set once the worker stops taking work: nothing is leased to it after.
    closed: AtomicBool,
    /// Set while the worker's last claim took all it asked for: more may be
    /// due, and new events wait behind them for claims instead of taking the
    /// places first.
    backlog: AtomicBool,
}

impl HandOff {
    /// `places`: the worker's concurrency, shared between its claims and this.
    pub fn new(
        holder: String,
        registry: Arc<Registry>,
        places: usize,
        destinations: Option<Arc<DestinationHealth>>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let (queue, receiver) = mpsc::unbounded_channel();
        Arc::new(HandOff {
            holder,
            registry,
            places: Arc::new(Semaphore::new(places.max(1))),
            destinations,
            metrics,
            queue,
            receiver: Mutex::new(Some(receiver)),
            closed: AtomicBool::new(false),
            backlog: AtomicBool::new(false),
        })
    }

    /// The worker's places (its claims take from the same ones).
    pub fn places(&self) -> Arc<Semaphore> {
        self.places.clone()
    }

    /// The queue of handed-off events; the worker takes it once.
    pub fn take_receiver(&self) -> Option<mpsc::UnboundedReceiver<Leased>> {
        self.receiver
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Says whether the worker's last claim left due events behind it.
    pub fn set_backlog(&self, behind: bool) {
        self.backlog.store(behind, Ordering::SeqCst);
    }

    /// No more leases at insert: the worker is draining.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether `event` may be leased at its insert, and for how long (ms).
    fn lease_ms_for(&self, event: &NewEvent) -> Option<i64> {
        if self.closed.load(Ordering::SeqCst)
            || self.backlog.load(Ordering::SeqCst)
            || !event.redeliverable
            || event.max_attempts < 2
            || event.lane.is_some()
            || event.delay_ms > 0
        {
            return None;
        }
        let policy = self.registry.policy(&event.kind)?;
        Some(policy.lease.as_millis() as i64)
    }

    /// A place of this worker's for `event`, and one at its destination when
    /// it has one: `(place, counted there)`.
    fn take_places(&self, event: &NewEvent) -> Option<(OwnedSemaphorePermit, bool)> {
        let place = self.places.clone().try_acquire_owned().ok()?;
        match (&self.destinations, event.destination.as_deref()) {
            (Some(health), Some(origin)) => health.reserve(origin).then_some((place, true)),
            _ => Some((place, false)),
        }
    }

    /// Gives back what [`HandOff::take_places`] took at `leased`'s destination
    /// (its worker place goes back as it is dropped).
    fn release(&self, leased: &Leased) {
        if let (true, Some(health), Some(origin)) = (
            leased.counted,
            &self.destinations,
            leased.event.destination.as_deref(),
        ) {
            health.unreserve(origin);
        }
    }
}

/// The events one write unit leased at insert, handed to their workers only
/// once the unit has committed ([`Offer::hand_off`]). Dropped instead (the
/// unit failed or rolled back), it gives their places back.
#[derive(Default)]
pub struct Offer {
    leased: Mutex<Vec<(Arc<HandOff>, Leased)>>,
    /// Whether some event was left `pending`, for a claim: only then do the
    /// workers need waking after the commit.
    left_pending: AtomicBool,
}

impl Offer {
    /// Whether the unit left an event for a claim (see [`Offer::left_pending`]).
    pub fn left_pending(&self) -> bool {
        self.left_pending.load(Ordering::SeqCst)
    }

    /// Whether the unit leased any event (not yet handed off).
    pub fn holds_any(&self) -> bool {
        !self
            .leased
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Records that events went in `pending` (enqueued without a lease).
    pub(super) fn leave_pending(&self) {
        self.left_pending.store(true, Ordering::SeqCst);
    }

    /// Hands every leased event to its worker: call only after the commit.
    pub fn hand_off(&self) {
        let leased = std::mem::take(&mut *self.leased.lock().unwrap_or_else(|p| p.into_inner()));
        for (to, leased) in leased {
            to.metrics.record_handed_off(&leased.event.kind);
            // A worker gone since (shutdown): the lease expires and any worker
            // takes the event again.
            if let Err(unsent) = to.queue.send(leased) {
                to.release(&unsent.0);
            }
        }
    }

    /// Inserts `events` in `tx`: those a worker of `hand_offs` has a free place
    /// for leased to it, the rest `pending`.
    pub(super) async fn enqueue_in(
        &self,
        store: &dyn OutboxStore,
        hand_offs: &[Arc<HandOff>],
        tx: &mut WriteTx,
        events: &[NewEvent],
    ) -> Result<(), StoreError> {
        let mut pending: Vec<NewEvent> = Vec::new();
        // Per worker and lease length: the events leased, by their lease.
        let mut leases: Vec<(Arc<HandOff>, EventLease, Vec<NewEvent>)> = Vec::new();
        let mut ids = std::collections::HashSet::new();
        {
            // Kept here from the start: should the unit fail, dropping the
            // offer gives their places back.
            let mut leased = self.leased.lock().unwrap_or_else(|p| p.into_inner());
            for event in events {
                // An id twice in one write: the second is dropped by the insert.
                let first = ids.insert(event.event_id.as_str());
                let taken = first
                    .then(|| {
                        hand_offs.iter().find_map(|to| {
                            let lease_ms = to.lease_ms_for(event)?;
                            let places = to.take_places(event)?;
                            Some((to, lease_ms, places))
                        })
                    })
                    .flatten();
                let Some((to, lease_ms, (place, counted))) = taken else {
                    pending.push(event.clone());
                    continue;
                };
                let at = leases
                    .iter()
                    .position(|(t, l, _)| Arc::ptr_eq(t, to) && l.lease_ms == lease_ms)
                    .unwrap_or_else(|| {
                        leases.push((
                            to.clone(),
                            EventLease {
                                token: uuid::Uuid::new_v4().simple().to_string(),
                                holder: to.holder.clone(),
                                lease_ms,
                            },
                            Vec::new(),
                        ));
                        leases.len() - 1
                    });
                let (_, lease, rows) = &mut leases[at];
                rows.push(event.clone());
                leased.push((
                    to.clone(),
                    Leased {
                        event: claimed(event.clone(), &lease.token),
                        place,
                        counted,
                    },
                ));
            }
        }
        if !pending.is_empty() {
            self.leave_pending();
            store.enqueue_all_in(tx, &pending).await?;
        }
        for (to, lease, rows) in leases {
            // Every one inserted, or none kept leased: an event that already
            // existed is not this lease's, and which one it was is not known.
            if store.enqueue_leased_in(tx, &rows, &lease).await? {
                continue;
            }
            self.leave_pending();
            let mut leased = self.leased.lock().unwrap_or_else(|p| p.into_inner());
            leased.retain(|(_, l)| {
                let ours = l.event.lease_token == lease.token;
                if ours {
                    to.release(l);
                }
                !ours
            });
        }
        Ok(())
    }
}

impl Drop for Offer {
    /// Not handed off (the unit failed or rolled back): their places go back.
    fn drop(&mut self) {
        let leased = std::mem::take(self.leased.get_mut().unwrap_or_else(|p| p.into_inner()));
        for (to, leased) in leased {
            to.release(&leased);
        }
    }
}

/// The event as a claim would have handed it over: its first attempt, leased.
fn claimed(event: NewEvent, lease_token: &str) -> ClaimedEvent {
    ClaimedEvent {
        event_id: event.event_id,
        source: event.source.as_str().to_string(),
        kind: event.kind,
        parent_type: event.parent_type,
        parent_id: event.parent_id,
        payload: event.payload,
        redeliverable: event.redeliverable,
        attempts: 1,
        cycle: 1,
        cycle_attempts: 1,
        max_attempts: i64::from(event.max_attempts.max(1)),
        lease_token: lease_token.to_string(),
        destination: event.destination,
        trace_parent: event.trace_parent,
        lane: None,
    }
}
