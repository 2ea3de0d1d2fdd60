//! The worker pool: claims due events in bounded batches, runs their handlers with
//! bounded concurrency, renews leases while they run, and settles results in
//! batched, fenced transactions. On shutdown it stops claiming and drains.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::availability::{StoreBackoff, StoreHealth};
use super::destinations::{Admission, DestinationHealth};
use super::frontier::{ClaimFrontier, Reach};
use super::hand_off::{HandOff, Leased};
use super::handler::{Outcome, Registry};
use super::metrics::Metrics;
use super::model::{ClaimedEvent, FailedEvent, Settle, Settlement};
use crate::clock::OncePer;
use crate::store::ports::{ClaimRequest, Claimed, OutboxStore};
use crate::telemetry::{self, TRACE_TARGET};

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Names this worker in leases and the attempt log.
    pub holder: String,
    /// Events claimed per statement.
    pub batch_size: u32,
    /// Handlers running at once.
    pub concurrency: usize,
    /// How long to wait for work when nothing woke the worker.
    pub poll_interval: Duration,
    /// How long shutdown waits for in-flight work before leaving it to its leases.
    pub drain_deadline: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            holder: default_holder(),
            batch_size: 256,
            concurrency: 64,
            poll_interval: Duration::from_secs(1),
            drain_deadline: Duration::from_secs(30),
        }
    }
}

/// `host:pid:random`, unique per process start.
pub fn default_holder() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "herald".into());
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &nonce[..8])
}

/// How a drain ended.
#[derive(Debug, PartialEq, Eq)]
pub struct DrainReport {
    /// Whether every accepted event settled before the deadline.
    pub drained: bool,
}

/// Events in flight, by lease token and kind, for renewal.
type InFlight = Arc<Mutex<HashMap<(String, String), HashSet<String>>>>;

/// Takes one event out of the heartbeat's renewal (settled, or given back).
fn stop_renewing(
    map: &mut HashMap<(String, String), HashSet<String>>,
    lease_token: &str,
    kind: &str,
    event_id: &str,
) {
    let key = (lease_token.to_string(), kind.to_string());
    if let Some(ids) = map.get_mut(&key) {
        ids.remove(event_id);
        if ids.is_empty() {
            map.remove(&key);
        }
    }
}

/// A finished attempt and the slot it holds until its settlement is written.
struct Finished {
    settlement: Settlement,
    /// Whether the attempt says anything about its destination's health (a node
    /// that could not even send, for want of a secret, says nothing).
    tested_destination: bool,
    slot: OwnedSemaphorePermit,
    /// The delivery's span, ended once its settlement is written.
    span: tracing::Span,
}

pub struct Worker {
    store: Arc<dyn OutboxStore>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    config: WorkerConfig,
    wake: Arc<Notify>,
    /// Told about every claim's result: an outage is logged once and backed off from.
    health: Arc<StoreHealth>,
    /// Per-destination caps and breakers, when this worker's kinds send out.
    destinations: Option<Arc<DestinationHealth>>,
    /// When a claim next looks for expired leases ([`EXPIRED_LEASE_SCAN_EVERY`]).
    expired_scan: OncePer,
    /// Events leased to this worker as they were written (`hand_off`).
    hand_off: Option<Arc<HandOff>>,
}

/// How often a worker's claim also takes expired leases of redeliverable events.
/// A lease expires only when its holder died or stalled, after tens of seconds;
/// a second more before its event is taken again is nothing beside that, and
/// every claim in between is one statement fewer.
const EXPIRED_LEASE_SCAN_EVERY: Duration = Duration::from_secs(1);

/// How long the settler waits for more finished attempts to share a commit.
const SETTLE_LINGER: Duration = Duration::from_millis(2);

/// A batch that fails this many times in a row is settled one event at a time, so
/// one row the database refuses cannot sink the others.
const SETTLE_SPLIT_AFTER: u32 = 3;
/// Settlement batches written at once by one worker.
const SETTLES_AT_ONCE: usize = 4;
/// The longest pause between two settle attempts while the store is failing.
const SETTLE_MAX_BACKOFF: Duration = Duration::from_secs(2);

fn now_ms() -> i64 {
    crate::clock::local_now_ms()
}

impl Worker {
    pub fn new(
        store: Arc<dyn OutboxStore>,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        config: WorkerConfig,
        wake: Arc<Notify>,
    ) -> Self {
        let health = StoreHealth::new(metrics.clone(), Vec::new());
        Worker {
            store,
            registry,
            metrics,
            config,
            wake,
            health,
            destinations: None,
            expired_scan: OncePer::new(EXPIRED_LEASE_SCAN_EVERY),
            hand_off: None,
        }
    }

    /// Also runs the events `hand_off` leases to this worker at their insert;
    /// its places are this worker's (made for its concurrency).
    pub fn with_hand_off(mut self, hand_off: Arc<HandOff>) -> Self {
        self.hand_off = Some(hand_off);
        self
    }

    /// Reports claim results to the store's shared health (gauges, `/readyz`).
    pub fn with_health(mut self, health: Arc<StoreHealth>) -> Self {
        self.health = health;
        self
    }

    /// Gates every claimed event on its destination's cap and breaker.
    pub fn with_destinations(mut self, health: Arc<DestinationHealth>) -> Self {
        self.destinations = Some(health);
        self
    }

    fn claim_request(&self, limit: u32, reach: Reach, metered: Vec<(String, u32)>) -> ClaimRequest {
        let kinds = self.registry.kinds();
        let lease_ms_by_kind = kinds
            .iter()
            .filter_map(|k| {
                self.registry
                    .policy(k)
                    .map(|p| (k.clone(), p.lease.as_millis() as i64))
            })
            .collect();
        ClaimRequest {
            lease_token: uuid::Uuid::new_v4().simple().to_string(),
            holder: self.config.holder.clone(),
            limit,
            kinds,
            lease_ms_by_kind,
            default_lease_ms: 60_000,
            due_within_ms: reach.window_ms,
            readmitted: reach.readmitted,
            metered,
            take_expired: self.expired_scan.due(),
        }
    }

    /// After this long every lease of a finished attempt has expired (the heartbeat
    /// renews them until they are settled): a settlement retried longer could only
    /// be refused by the fence.
    fn longest_lease(&self) -> Duration {
        self.registry
            .kinds()
            .iter()
            .filter_map(|k| self.registry.policy(k).map(|p| p.lease))
            .max()
            .unwrap_or(Duration::from_secs(60))
    }

    /// Runs until `shutdown` is cancelled, then drains.
    pub async fn run(self, shutdown: CancellationToken) -> DrainReport {
        let concurrency = self.config.concurrency.max(1);
        let slots = match &self.hand_off {
            Some(hand_off) => hand_off.places(),
            None => Arc::new(Semaphore::new(concurrency)),
        };
        let in_flight: InFlight = Arc::new(Mutex::new(HashMap::new()));
        let (finished_tx, finished_rx) = mpsc::channel::<Finished>(concurrency * 2);
        let mut frontier = ClaimFrontier::new();

        let settler = tokio::spawn(settle_loop(
            self.store.clone(),
            self.registry.clone(),
            self.metrics.clone(),
            in_flight.clone(),
            finished_rx,
            self.longest_lease(),
            LaneMoves {
                wake: self.wake.clone(),
                frontier_stale: frontier.staleness(),
            },
        ));
        let heartbeat_stop = CancellationToken::new();
        let heartbeat = tokio::spawn(heartbeat_loop(
            self.store.clone(),
            self.registry.clone(),
            in_flight.clone(),
            heartbeat_stop.clone(),
        ));

        let dispatcher = Dispatcher {
            registry: self.registry.clone(),
            metrics: self.metrics.clone(),
            holder: self.config.holder.clone(),
            destinations: self.destinations.clone(),
            in_flight: in_flight.clone(),
            finished: finished_tx.clone(),
        };
        let hand_off_stop = CancellationToken::new();
        let handed_off = self
            .hand_off
            .as_ref()
            .and_then(|h| h.take_receiver())
            .map(|queue| {
                tokio::spawn(run_handed_off(
                    dispatcher.clone(),
                    queue,
                    hand_off_stop.clone(),
                ))
            });

        let mut backoff = StoreBackoff::default();
        // Kept for the worker's life: room made while it claims is news when it idles.
        let mut room = self.destinations.as_ref().map(|h| h.room_changes());
        while !shutdown.is_cancelled() {
            // Wait for at least one free slot, then claim as many as are free.
            let first = tokio::select! {
                permit = slots.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => break },
                _ = shutdown.cancelled() => break,
            };
            // The claim asks for as many as are free now, but holds only this
            // first place while its statement runs: leases at insert share the
            // places and may take the others meanwhile (their events go out at
            // once). The claimed events wait for places that free after it.
            let free = slots.available_permits() + 1;
            let limit = free.min(self.config.batch_size as usize) as u32;
            let (avoid, metered) = match &self.destinations {
                Some(health) => (health.avoid(limit as usize), health.metered(limit as usize)),
                None => Default::default(),
            };
            // Metered destinations are claimed apart: the walk leaves them out too.
            let left_out: Vec<String> = avoid
                .iter()
                .chain(metered.iter().map(|(destination, _)| destination))
                .cloned()
                .collect();
            let began = Instant::now();
            let reach = frontier.reach(&left_out, began);
            let window_ms = reach.window_ms;
            let request = self.claim_request(limit, reach, metered);
            if !left_out.is_empty() {
                self.metrics.record_claim_leaving_out(window_ms.is_some());
            }
            let (claimed, counted, drained_due) =
                match self.store.claim_avoiding(&request, &avoid).await {
                    Ok(Claimed { events, cut_short }) => {
                        // A claim cut short met a failure (the store logged it):
                        // it is no sign the store is back.
                        if !cut_short {
                            self.health.succeeded(began);
                            backoff.reset();
                        }
                        // Fewer than asked for: nothing more is due now (unless a
                        // pick failed and others may be).
                        let drained = !cut_short && events.len() < limit as usize;
                        if let Some(hand_off) = &self.hand_off {
                            hand_off.set_backlog(!drained);
                        }
                        frontier.claimed(&left_out, window_ms, drained, began, Instant::now());
                        let counted = match &self.destinations {
                            Some(health) => health.took(&request.metered, &events),
                            None => vec![false; events.len()],
                        };
                        (events, counted, drained)
                    }
                    Err(err) => {
                        drop(first);
                        let pause = backoff.pause(self.health.failed(&err));
                        // Not woken early by commits: an unavailable store gets its pause.
                        tokio::select! {
                            _ = tokio::time::sleep(pause) => {},
                            _ = shutdown.cancelled() => {},
                        }
                        continue;
                    }
                };
            if claimed.is_empty() {
                drop(first);
                self.idle(room.as_mut().filter(|_| !left_out.is_empty()), &shutdown)
                    .await;
                continue;
            }
            // Renewed from now on, however long an event waits for its place.
            dispatcher.register(&claimed);
            let mut events = claimed.into_iter().zip(counted);
            if let Some((event, counted)) = events.next() {
                dispatcher.dispatch(event, first, counted);
            }
            let mut events = events.peekable();
            while events.peek().is_some() {
                let Ok(place) = slots.clone().try_acquire_owned() else {
                    break;
                };
                if let Some((event, counted)) = events.next() {
                    dispatcher.dispatch(event, place, counted);
                }
            }
            // The rest wait for the places leases at insert took during the
            // claim, as settlements free them.
            let waiting: Vec<(ClaimedEvent, bool)> = events.collect();
            if !waiting.is_empty() {
                self.dispatch_when_placed(&dispatcher, &slots, waiting, &shutdown)
                    .await;
            }
            // Nothing more is due now: claiming again at once would find nothing
            // and still take the store's write lock; the next commit wakes this
            // loop (a wake sent meanwhile is kept).
            if drained_due {
                self.idle(room.as_mut().filter(|_| !left_out.is_empty()), &shutdown)
                    .await;
            }
        }

        // Drain: no new claims nor leases at insert; wait for every accepted
        // event to settle.
        if let Some(hand_off) = &self.hand_off {
            hand_off.close();
        }
        let drained = tokio::time::timeout(
            self.config.drain_deadline,
            slots.acquire_many(concurrency as u32),
        )
        .await
        .is_ok();
        if !drained {
            tracing::warn!(
                "drain deadline passed with work in flight; its leases will expire and another worker will recover it"
            );
        }
        hand_off_stop.cancel();
        if let Some(handed_off) = handed_off {
            let _ = handed_off.await;
        }
        drop(dispatcher);
        drop(finished_tx);
        if drained {
            let _ = settler.await;
        } else {
            settler.abort();
        }
        heartbeat_stop.cancel();
        let _ = heartbeat.await;
        DrainReport { drained }
    }

    /// Dispatches claimed `events` once places for all of them are free. The
    /// claim waits first in line: no lease at insert takes a place before it
    /// has them all. Should the worker stop meanwhile, the events are given
    /// back unattempted, due at once for any worker.
    async fn dispatch_when_placed(
        &self,
        dispatcher: &Dispatcher,
        slots: &Arc<Semaphore>,
        events: Vec<(ClaimedEvent, bool)>,
        shutdown: &CancellationToken,
    ) {
        let wanted = u32::try_from(events.len()).unwrap_or(u32::MAX);
        let places = tokio::select! {
            places = slots.clone().acquire_many_owned(wanted) => places.ok(),
            _ = shutdown.cancelled() => None,
        };
        let Some(mut places) = places else {
            dispatcher.forget(&events);
            let given_back: Vec<Settlement> = events
                .iter()
                .map(|(event, _)| deferral(&self.config.holder, event, 0))
                .collect();
            if let Err(err) = self.store.settle(&given_back).await {
                tracing::warn!(error = %err, events = given_back.len(),
                    "stopping: claimed events that had no place yet could not be given back; their leases will expire and another worker will take them");
            }
            return;
        };
        for (event, counted) in events {
            let Some(place) = places.split(1) else { break };
            dispatcher.dispatch(event, place, counted);
        }
    }

    /// Waits for a reason to claim again: a commit's wake, room at a destination
    /// the last claim left out (`room`: only then can a place freed anywhere give
    /// this worker something to claim), the poll interval or shutdown.
    async fn idle(&self, room: Option<&mut watch::Receiver<()>>, shutdown: &CancellationToken) {
        let room = async {
            let heard = match room {
                Some(changes) => changes.changed().await.is_ok(),
                None => false,
            };
            // (A closed channel cannot say anything again: only the poll remains.)
            if !heard {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = self.wake.notified() => {},
            _ = room => {},
            _ = tokio::time::sleep(self.config.poll_interval) => {},
            _ = shutdown.cancelled() => {},
        }
    }
}

/// Starts the attempts of events this worker holds leases on, each in a task
/// of its own, however they came (a claim, or a lease at insert).
#[derive(Clone)]
struct Dispatcher {
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    holder: String,
    destinations: Option<Arc<DestinationHealth>>,
    in_flight: InFlight,
    finished: mpsc::Sender<Finished>,
}

impl Dispatcher {
    /// Puts `events` under the heartbeat's renewal.
    fn register(&self, events: &[ClaimedEvent]) {
        let mut map = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        for event in events {
            map.entry((event.lease_token.clone(), event.kind.clone()))
                .or_default()
                .insert(event.event_id.clone());
        }
    }

    /// Takes `events`, which this worker will not attempt, out of the
    /// heartbeat's renewal and out of their destinations' count.
    fn forget(&self, events: &[(ClaimedEvent, bool)]) {
        let mut map = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        for (event, counted) in events {
            stop_renewing(&mut map, &event.lease_token, &event.kind, &event.event_id);
            if let (true, Some(health), Some(origin)) =
                (*counted, &self.destinations, event.destination.as_deref())
            {
                health.unreserve(origin);
            }
        }
    }

    /// Runs `event`'s attempt in `permit`'s place; `counted`: as
    /// [`DestinationHealth::took`] said of it.
    fn dispatch(&self, event: ClaimedEvent, permit: OwnedSemaphorePermit, counted: bool) {
        let registry = self.registry.clone();
        let tx = self.finished.clone();
        let holder = self.holder.clone();
        let metrics = self.metrics.clone();
        let destinations = self.destinations.clone();
        let span = delivery_span(&event);
        tokio::spawn(
            async move {
                let finished = match destinations {
                    None => run_one(&registry, &metrics, &holder, event, permit).await,
                    Some(health) => match health
                        .admit(&event, counted)
                        .instrument(tracing::info_span!(target: TRACE_TARGET, "claim"))
                        .await
                    {
                        Admission::Go(ticket) => {
                            let finished =
                                run_one(&registry, &metrics, &holder, event, permit).await;
                            health
                                .finished(
                                    ticket,
                                    &finished.settlement.settle,
                                    finished.tested_destination,
                                )
                                .await;
                            finished
                        }
                        Admission::Wait { delay_ms, reason } => {
                            metrics.record_handed_back(&event.kind, reason);
                            deferred(&holder, event, delay_ms, permit)
                        }
                    },
                };
                let _ = tx.send(finished).await;
            }
            .instrument(span),
        );
    }
}

/// Runs the events leased to this worker at their insert until `stop` (after
/// the drain: each holds one of the places the drain waits for).
async fn run_handed_off(
    dispatcher: Dispatcher,
    mut queue: mpsc::UnboundedReceiver<Leased>,
    stop: CancellationToken,
) {
    loop {
        let leased = tokio::select! {
            leased = queue.recv() => match leased {
                Some(leased) => leased,
                None => return,
            },
            _ = stop.cancelled() => return,
        };
        dispatcher.register(std::slice::from_ref(&leased.event));
        dispatcher.dispatch(leased.event, leased.place, leased.counted);
    }
}

/// The outcome of an attempt whose handler panicked. It may have sent part of the
/// effect before it crashed: a kind that cannot be resent safely becomes
/// `uncertain` (an operator checks), a redeliverable one is retried.
fn crashed(event: &ClaimedEvent) -> Outcome {
    let error = "the handler crashed during the attempt".to_string();
    if event.redeliverable {
        Outcome::Retryable {
            error,
            status_code: None,
            retry_after: None,
        }
    } else {
        Outcome::Uncertain {
            error,
            status_code: None,
        }
    }
}

/// An event given back unattempted (its destination is busy or resting).
fn deferred(
    holder: &str,
    event: ClaimedEvent,
    delay_ms: i64,
    permit: OwnedSemaphorePermit,
) -> Finished {
    Finished {
        settlement: deferral(holder, &event, delay_ms),
        tested_destination: false,
        slot: permit,
        span: tracing::Span::current(),
    }
}

/// The settlement that gives `event` back unattempted, due after `delay_ms`.
fn deferral(holder: &str, event: &ClaimedEvent, delay_ms: i64) -> Settlement {
    let at = now_ms();
    Settlement {
        status_code: None,
        error: None,
        event_id: event.event_id.clone(),
        kind: event.kind.clone(),
        lease_token: event.lease_token.clone(),
        attempt: event.attempts,
        cycle: event.cycle,
        worker: holder.to_string(),
        started_at_ms: at,
        finished_at_ms: at,
        settle: Settle::Deferred { delay_ms },
        dead_letter_event: None,
        laned: event.lane.is_some(),
    }
}

async fn run_one(
    registry: &Registry,
    metrics: &Metrics,
    holder: &str,
    event: ClaimedEvent,
    permit: OwnedSemaphorePermit,
) -> Finished {
    let started_at_ms = now_ms();
    let started = Instant::now();
    let (outcome, settle) = match registry.get(&event.kind) {
        Some(registration) => {
            let handler = registration.handler.clone();
            let claimed = event.clone();
            // A panicking handler is a failed attempt, not a dead worker.
            let send = tracing::info_span!(target: TRACE_TARGET, "send", otel.kind = "client");
            let sending = async move { handler.handle(&claimed).await }.instrument(send);
            let outcome = match tokio::spawn(sending).await {
                Ok(outcome) => outcome,
                Err(join) => {
                    tracing::error!(event_id = %event.event_id, kind = %event.kind, error = %join, "a handler crashed");
                    crashed(&event)
                }
            };
            let settle = outcome.settle(&event, &registration.policy);
            (outcome, settle)
        }
        None => {
            let outcome = Outcome::Permanent {
                error: format!("no handler for kind {:?}", event.kind),
                status_code: None,
            };
            (outcome, Settle::Failed { exhausted: false })
        }
    };
    metrics.record_attempt(
        &event.kind,
        settle.outcome_label(),
        started.elapsed().as_secs_f64(),
    );
    let dead_letter_event = match (&settle, registry.dead_letter_notifier()) {
        (Settle::Failed { .. }, Some(notify)) => notify(&FailedEvent {
            event_id: event.event_id.clone(),
            kind: event.kind.clone(),
            parent_type: event.parent_type.clone(),
            parent_id: event.parent_id.clone(),
            error: outcome.error().unwrap_or("failed").to_string(),
            cycle: event.cycle,
        }),
        _ => None,
    };
    Finished {
        settlement: Settlement {
            status_code: outcome.status_code(),
            error: outcome.error().map(str::to_string),
            event_id: event.event_id,
            kind: event.kind,
            lease_token: event.lease_token,
            attempt: event.attempts,
            cycle: event.cycle,
            worker: holder.to_string(),
            started_at_ms,
            finished_at_ms: now_ms(),
            settle,
            dead_letter_event,
            laned: event.lane.is_some(),
        },
        tested_destination: outcome.tested_destination(),
        slot: permit,
        span: tracing::Span::current(),
    }
}

/// A claimed event's span, continuing the trace of the request that owed it:
/// claim (its destination's place), send and settle are its children.
fn delivery_span(event: &ClaimedEvent) -> tracing::Span {
    let span = tracing::info_span!(
        target: TRACE_TARGET,
        "delivery",
        herald.event_id = %event.event_id,
        herald.kind = %event.kind,
        herald.attempt = event.attempts,
        herald.cycle = event.cycle,
    );
    telemetry::continue_trace(&span, event.trace_parent.as_deref());
    span
}

/// Settles finished attempts in batches: whatever has arrived is written together.
async fn settle_loop(
    store: Arc<dyn OutboxStore>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    in_flight: InFlight,
    mut finished: mpsc::Receiver<Finished>,
    give_up_after: Duration,
    lane_moves: LaneMoves,
) {
    const MAX_BATCH: usize = 512;
    // Dropped (the loop aborted at a drain deadline), it aborts the writes too.
    let mut writing = tokio::task::JoinSet::new();
    while let Some(first) = finished.recv().await {
        let mut batch = vec![first];
        let linger_until = tokio::time::Instant::now() + SETTLE_LINGER;
        while batch.len() < MAX_BATCH {
            match finished.try_recv() {
                Ok(more) => batch.push(more),
                // A moment's wait lets a claimed batch settle in one commit instead of many.
                Err(_) if tokio::time::Instant::now() < linger_until => {
                    match tokio::time::timeout_at(linger_until, finished.recv()).await {
                        Ok(Some(more)) => batch.push(more),
                        _ => break,
                    }
                }
                Err(_) => break,
            }
        }
        // Batches are written side by side (a few at once), so one the store keeps
        // refusing, retried for as long as its leases live, never holds up the
        // settlements that finish after it.
        while writing.len() >= SETTLES_AT_ONCE {
            let _ = writing.join_next().await;
        }
        while writing.try_join_next().is_some() {}
        writing.spawn(settle_batch(
            store.clone(),
            registry.clone(),
            metrics.clone(),
            in_flight.clone(),
            batch,
            give_up_after,
            lane_moves.clone(),
        ));
    }
    while writing.join_next().await.is_some() {}
}

/// What a lane's head done tells the claim loop.
#[derive(Clone)]
struct LaneMoves {
    /// Its next event may go now, not at the next poll.
    wake: Arc<Notify>,
    /// And it may be stamped long before any claim's window (`outbox::frontier`).
    frontier_stale: Arc<AtomicBool>,
}

impl LaneMoves {
    fn moved(&self) {
        self.frontier_stale.store(true, Ordering::Release);
        self.wake.notify_one();
    }
}

/// Writes one batch of settlements (`settle_resiliently`), then frees its slots,
/// forgets its leases and records what each settlement means.
async fn settle_batch(
    store: Arc<dyn OutboxStore>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    in_flight: InFlight,
    batch: Vec<Finished>,
    give_up_after: Duration,
    lane_moves: LaneMoves,
) {
    // Each delivery's settle span lasts as long as the batch's write.
    let settling: Vec<tracing::Span> = batch
        .iter()
        .map(|f| {
            tracing::info_span!(target: TRACE_TARGET, parent: &f.span, "settle",
                herald.outcome = f.settlement.settle.outcome_label())
        })
        .collect();
    // Slots are freed only once the batch is written (at the end of this task).
    let (settlements, _slots): (Vec<Settlement>, Vec<OwnedSemaphorePermit>) =
        batch.into_iter().map(|f| (f.settlement, f.slot)).unzip();
    let accepted = settle_resiliently(store.as_ref(), &settlements, give_up_after).await;
    drop(settling);
    if accepted.iter().any(|ok| *ok) {
        crate::changes::notify();
    }
    // A lane's head done lets its next event go now, not at the next poll.
    let lane_moved = settlements
        .iter()
        .zip(&accepted)
        .any(|(s, ok)| *ok && s.releases_lane());
    if lane_moved {
        lane_moves.moved();
    }
    {
        let mut map = in_flight.lock().unwrap_or_else(|p| p.into_inner());
        for s in &settlements {
            stop_renewing(&mut map, &s.lease_token, &s.kind, &s.event_id);
        }
    }
    for (s, ok) in settlements.iter().zip(accepted) {
        if !ok {
            tracing::warn!(event_id = %s.event_id, kind = %s.kind,
                "lease lost before the result was recorded; result dropped");
            continue;
        }
        if matches!(s.settle, Settle::Deferred { .. }) {
            continue;
        }
        if let Some(registration) = registry.get(&s.kind) {
            registration.handler.settled(s, &metrics);
        }
        if let Settle::Failed { exhausted } = s.settle {
            metrics.record_exhausted(&s.kind);
            tracing::error!(
                event_id = %s.event_id,
                kind = %s.kind,
                attempts = s.attempt,
                exhausted,
                error = s.error.as_deref().unwrap_or(""),
                "OPERATOR_ALERT: event failed and was dead-lettered; retry it from the console once the cause is fixed"
            );
        }
    }
}

/// Writes `batch`, retrying through store failures (a failover, a lost commit race)
/// for as long as its leases can be alive, with a capped backoff. A batch that keeps
/// failing is split and each event settled on its own, so one row the database
/// refuses cannot drop the rest. Returns which settlements were accepted; one that
/// could not be written counts as not accepted (its lease expires and the event is
/// recovered).
async fn settle_resiliently(
    store: &dyn OutboxStore,
    batch: &[Settlement],
    give_up_after: Duration,
) -> Vec<bool> {
    let deadline = tokio::time::Instant::now() + give_up_after;
    let mut failures = 0u32;
    loop {
        match store.settle(batch).await {
            Ok(accepted) => return accepted,
            Err(err) => {
                failures += 1;
                tracing::warn!(error = %err, attempt = failures, events = batch.len(), "settling failed; retrying");
            }
        }
        if batch.len() > 1 && failures >= SETTLE_SPLIT_AFTER {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::error!(
                events = batch.len(),
                "could not settle; the leases have expired and the events will be recovered"
            );
            return vec![false; batch.len()];
        }
        tokio::time::sleep(settle_backoff(failures)).await;
    }
    // Each event on its own, in rounds. Once one settles the store is up: the
    // events still failing are refused for themselves and are given up after a few
    // rounds; while none settles the store is down and all are retried until the
    // deadline.
    let mut accepted: Vec<Option<bool>> = vec![None; batch.len()];
    let mut store_up = false;
    let mut round = 0u32;
    loop {
        round += 1;
        let mut last_error = None;
        for (i, one) in batch.chunks(1).enumerate() {
            if accepted[i].is_some() {
                continue;
            }
            match store.settle(one).await {
                Ok(result) => {
                    store_up = true;
                    accepted[i] = Some(result.first().copied().unwrap_or(false));
                }
                Err(err) => last_error = Some(err),
            }
        }
        let unsettled = accepted.iter().filter(|a| a.is_none()).count();
        if let Some(err) = last_error {
            tracing::warn!(error = %err, events = unsettled, round, "settling events one by one failed; retrying");
        }
        if unsettled == 0 {
            break;
        }
        if (store_up && round >= SETTLE_SPLIT_AFTER) || tokio::time::Instant::now() >= deadline {
            tracing::error!(
                events = unsettled,
                "could not settle; the events will be recovered once their leases expire"
            );
            break;
        }
        tokio::time::sleep(settle_backoff(round)).await;
    }
    accepted.into_iter().map(|a| a.unwrap_or(false)).collect()
}

fn settle_backoff(failures: u32) -> Duration {
    (Duration::from_millis(50) * 2u32.saturating_pow(failures.min(8))).min(SETTLE_MAX_BACKOFF)
}

/// Renews the leases of running handlers at a third of each kind's lease.
async fn heartbeat_loop(
    store: Arc<dyn OutboxStore>,
    registry: Arc<Registry>,
    in_flight: InFlight,
    stop: CancellationToken,
) {
    let shortest = registry
        .kinds()
        .iter()
        .filter_map(|k| registry.policy(k).map(|p| p.lease))
        .min()
        .unwrap_or(Duration::from_secs(60));
    let period = (shortest / 3).max(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {},
            _ = stop.cancelled() => return,
        }
        let held: Vec<((String, String), Vec<String>)> = {
            let map = in_flight.lock().unwrap_or_else(|p| p.into_inner());
            map.iter()
                .map(|(k, ids)| (k.clone(), ids.iter().cloned().collect()))
                .collect()
        };
        for ((token, kind), ids) in held {
            let lease_ms = registry
                .policy(&kind)
                .map(|p| p.lease.as_millis() as i64)
                .unwrap_or(60_000);
            match store.renew(&token, &ids, lease_ms).await {
                Ok(renewed) if (renewed as usize) < ids.len() => {
                    // Events that settled since the snapshot are not lost leases.
                    let still_running = {
                        let map = in_flight.lock().unwrap_or_else(|p| p.into_inner());
                        map.get(&(token.clone(), kind.clone()))
                            .map(|running| ids.iter().filter(|id| running.contains(*id)).count())
                            .unwrap_or(0)
                    };
                    if (renewed as usize) < still_running {
                        tracing::warn!(kind = %kind, lost = still_running - renewed as usize,
                            "some leases were lost while their handlers ran");
                    }
                }
                Ok(_) => {}
                // Racing another node's claim is retried at the next beat.
                Err(err) if err.fault() == crate::store::StoreFault::Conflict => {
                    tracing::debug!(error = %err, "lease renewal lost a race; renewing next beat")
                }
                Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
            }
        }
    }
}
