//! Per-destination health, so one slow or dead receiver cannot clog the rest:
//! an in-flight cap per destination origin and a circuit breaker per origin.
//!
//! An event's destination is the origin (`scheme://host:port`) of its frozen
//! payload's `url`, stored with the event at enqueue. Two ways keep a sick
//! destination's events from costing anything:
//!
//! * **Held back from the claim.** The worker leaves out of every claim the
//!   origins that are at their cap or behind an open breaker
//!   ([`DestinationHealth::avoid`]). That is why the cap costs nothing while a
//!   receiver hangs: its events stay `pending`, untouched, instead of being claimed
//!   and released again on every pass (which would spend the store's writes on
//!   the sick destination at the healthy ones' expense). A destination known to
//!   be fast is claimed a little ahead of its places ([`CLAIM_AHEAD`]), and a
//!   place freed at a full one is news to every worker ([`room_changes`]).
//! * **Waiting, then released unattempted.** One claim takes many events at
//!   once, so it can hand out more events of one origin than its cap has room
//!   for. Those wait in memory for a free place (briefly: [`CAP_WAIT`]); one that
//!   still finds none, or an event of an origin whose breaker opened meanwhile,
//!   is given back with [`Settle::Deferred`]: `pending` again, the claim's
//!   attempt returned, due shortly (cap) or at the probe time (breaker), and
//!   counted in `herald_outbox_claims_handed_back_total` by reason.
//! * **Metered.** A destination known to be slow ([`pace`]) would have most of
//!   such a claim handed back, so it is left out of the claim's walk and claimed
//!   apart, at most the places it frees in time ([`DestinationHealth::metered`]).
//!
//! The breaker: consecutive retryable failures are counted in each node's
//! memory; at the threshold the breaker opens, which is written to the shared
//! `destination_breakers` table together with pushing the origin's pending
//! events to the probe time. At the probe time exactly one node takes the
//! half-open probe (a conditional update); its success closes the breaker and
//! makes the waiting events due, its failure reopens it with a doubled wait. A
//! probe whose node died (or whose verdict was never written) is taken over by
//! any node once the probe's lease has passed. Every node adopts the table's state on each sync, so an operator's manual
//! close (or another node's opening) takes effect everywhere.
//!
//! [`room_changes`]: DestinationHealth::room_changes

use super::availability::{StoreBackoff, StoreHealth};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;
use super::model::{ClaimedEvent, Settle};
use super::pace::{self, Paces};
use crate::store::ports::{BreakerRecord, DestinationStore};

/// The label of destinations that are no configured route's: run callbacks.
pub const CALLBACK_LABEL: &str = "callback";

/// How long a claimed event waits in memory for a place under its destination's
/// cap before it is given back.
pub const CAP_WAIT: Duration = Duration::from_millis(1_000);

/// How long an event given back for lack of a place waits before it is due again.
const CAP_WAIT_MS: i64 = 250;

/// Destinations longer than this are not tracked (they fit no index key).
const MAX_DESTINATION_LEN: usize = 191;

/// The most origins one claim leaves out. Past it, a sick destination's events
/// may be claimed and given back unattempted (an open breaker has already pushed
/// its waiting events to the probe time): a claim's size never grows with the
/// number of sick destinations.
pub const MAX_AVOIDED: usize = 128;

/// The most destinations one claim meters (each is a statement of its own).
pub const MAX_METERED: usize = 8;

/// A metered destination's room counts the places its attempts in flight free
/// within this long: half of [`CAP_WAIT`], so its waiting events find one in time
/// while its latency wavers.
const METERED_WAIT: Duration = Duration::from_millis(500);

/// How far ahead of its places a fast destination is claimed: the events its
/// busy places send within this long may wait in memory, so the places do not run
/// dry while the worker makes its next claim (a claim takes milliseconds; under
/// a backlog, leaving the destination out until a place was free again idled its
/// places for a claim's length every few hundred events). Well inside
/// [`CAP_WAIT`], so no such event waits long enough to be handed back.
pub const CLAIM_AHEAD: Duration = Duration::from_millis(100);

/// How long a destination whose metered pick took all it was allowed stays
/// metered while idle (its attempts all ended before the next pick). Then it is
/// forgotten at the next sync, like any idle destination.
pub const BACKLOG_MEMORY: Duration = Duration::from_secs(1);

/// The destination a planner stores with an event sent to `url`: its origin
/// (`routes::origin`), unless that is too long to track.
pub fn destination_of(url: &str) -> Option<String> {
    crate::routes::origin(url).filter(|d| d.len() <= MAX_DESTINATION_LEN)
}

/// The settings of destination health.
#[derive(Clone, Debug)]
pub struct HealthConfig {
    /// Consecutive retryable failures that open a breaker.
    pub failures: u32,
    /// The first wait before a probe.
    pub open: Duration,
    /// The longest wait before a probe.
    pub max_open: Duration,
    /// In-flight cap of destinations no route sets one for.
    pub default_max_in_flight: usize,
    /// Configured routes by origin: (route name, in-flight cap).
    pub routes: HashMap<String, (String, usize)>,
    /// A half-open probe older than this is taken to be abandoned (its node died).
    pub stale_probe: Duration,
}

impl HealthConfig {
    /// The label and cap of an origin.
    fn policy(&self, origin: &str) -> (String, usize) {
        self.routes
            .get(origin)
            .cloned()
            .unwrap_or_else(|| (CALLBACK_LABEL.to_string(), self.default_max_in_flight))
    }

    /// Every label metrics may show.
    pub fn labels(&self) -> Vec<String> {
        let mut labels: Vec<String> = self.routes.values().map(|(l, _)| l.clone()).collect();
        labels.push(CALLBACK_LABEL.to_string());
        labels.sort();
        labels.dedup();
        labels
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Breaker {
    Closed,
    Open {
        probe_at: i64,
        open_ms: i64,
    },
    /// A probe is running (here when `here`, or on another node).
    HalfOpen {
        here: bool,
        open_ms: i64,
    },
}

#[derive(Debug)]
struct Destination {
    label: String,
    cap: usize,
    in_flight: usize,
    /// Claimed events waiting in memory for a place under the cap.
    waiting: usize,
    /// Wakes a waiting event when a place frees.
    place_freed: Arc<Notify>,
    failures: u32,
    breaker: Breaker,
    /// Until when it is kept (and metered) while idle: a metered pick took all it
    /// was allowed, so it may have more due.
    backlog_until: Option<Instant>,
}

impl Destination {
    /// Whether a metered pick filled its room lately ([`BACKLOG_MEMORY`]).
    fn has_backlog(&self) -> bool {
        self.backlog_until
            .is_some_and(|until| Instant::now() < until)
    }

    /// Opens this destination's breaker for `open_ms`: the change to share.
    fn open_for(&mut self, open_ms: i64) -> Change {
        self.breaker = Breaker::Open {
            probe_at: now_ms() + open_ms,
            open_ms,
        };
        Change::Open {
            label: self.label.clone(),
            failures: i64::from(self.failures),
            open_ms,
        }
    }
}

/// What the worker does with a claimed event.
#[derive(Debug)]
pub enum Admission {
    /// Send it; hand the ticket back with the attempt's settlement.
    Go(Ticket),
    /// Give it back unattempted, due after `delay_ms`.
    Wait { delay_ms: i64, reason: HandBack },
}

/// Why an event is given back unattempted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HandBack {
    /// Its destination had no free place in time.
    NoPlace,
    /// Its destination's breaker is open or probing.
    Breaker,
}

impl HandBack {
    /// Every reason, each declared at 0 for every kind.
    pub const ALL: [HandBack; 2] = [HandBack::NoPlace, HandBack::Breaker];

    /// Its label in `herald_outbox_claims_handed_back_total`.
    pub fn label(self) -> &'static str {
        match self {
            HandBack::NoPlace => "no_place",
            HandBack::Breaker => "breaker",
        }
    }
}

/// One admitted attempt to a destination (None: an event with no destination).
#[derive(Debug)]
pub struct Ticket {
    origin: Option<String>,
    probe: bool,
    admitted: Instant,
}

/// One look at a destination for a claimed event.
enum Decision {
    Go,
    WaitForPlace(Arc<Notify>),
    GiveBack(i64),
    Probe,
}

/// What an attempt says about its destination's health.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    /// It answered (delivered, or refused for good: the receiver is up).
    Alive,
    /// Worth a retry: a timeout, a refused connection, a 5xx, a 4xx SMTP reply.
    Failing,
    /// Nothing was sent (this node lacked a secret): no news of the destination.
    Untested,
}

fn verdict(settle: &Settle) -> Verdict {
    match settle {
        Settle::Retry { .. } | Settle::Failed { exhausted: true } => Verdict::Failing,
        _ => Verdict::Alive,
    }
}

fn now_ms() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64 / 1_000_000
}

/// A state change to write to the shared table (outside the lock).
enum Change {
    Open {
        label: String,
        failures: i64,
        open_ms: i64,
    },
    Close,
}

/// Health of every destination this process sends to.
pub struct DestinationHealth {
    config: HealthConfig,
    store: Arc<dyn DestinationStore>,
    metrics: Arc<Metrics>,
    destinations: Mutex<HashMap<String, Destination>>,
    /// How quickly each destination answers (kept past its idle moments).
    paces: Mutex<Paces>,
    /// Every label a breaker gauge was set for (a few: routes and `callback`).
    shown_labels: Mutex<std::collections::HashSet<String>>,
    /// Tells idle workers that a destination they left out of their claims has
    /// room again. A watch, not a `Notify`: every worker sharing these
    /// destinations hears it (one `notify_one` woke only one of them, often a
    /// worker of other kinds, and left the one with the backlog to its poll).
    room: watch::Sender<()>,
}

impl DestinationHealth {
    pub fn new(
        config: HealthConfig,
        store: Arc<dyn DestinationStore>,
        metrics: Arc<Metrics>,
    ) -> Self {
        for label in config.labels() {
            metrics.set_breaker_open(&label, false);
        }
        DestinationHealth {
            config,
            store,
            metrics,
            destinations: Mutex::new(HashMap::new()),
            paces: Mutex::new(Paces::default()),
            shown_labels: Mutex::new(Default::default()),
            room: watch::Sender::new(()),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Destination>) -> T) -> T {
        f(&mut self.destinations.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn entry<'a>(
        &self,
        map: &'a mut HashMap<String, Destination>,
        origin: &str,
    ) -> &'a mut Destination {
        map.entry(origin.to_string()).or_insert_with(|| {
            let (label, cap) = self.config.policy(origin);
            Destination {
                label,
                cap,
                in_flight: 0,
                waiting: 0,
                place_freed: Arc::new(Notify::new()),
                failures: 0,
                breaker: Breaker::Closed,
                backlog_until: None,
            }
        })
    }

    /// Origins a claim of `limit` events should leave out now: full (their
    /// places taken, and for a fast destination also what those send within
    /// [`CLAIM_AHEAD`]), or behind a breaker that is open (before its probe time)
    /// or half-open.
    /// At most [`MAX_AVOIDED`]: full ones first (they hold worker places), then
    /// half-open, then open ones.
    pub fn avoid(&self, limit: usize) -> Vec<String> {
        let now = now_ms();
        // (origin, cap, places taken and events waiting) of closed destinations at
        // their cap: full unless fast enough to be claimed ahead.
        let mut at_cap: Vec<(String, usize, usize)> = Vec::new();
        let mut avoided: Vec<(u8, String)> = self.with(|map| {
            map.iter()
                .filter(|(origin, _)| origin.len() <= MAX_DESTINATION_LEN)
                .filter_map(|(origin, d)| {
                    let rank = match d.breaker {
                        Breaker::Closed if d.in_flight + d.waiting >= d.cap => {
                            at_cap.push((origin.clone(), d.cap, d.in_flight + d.waiting));
                            return None;
                        }
                        Breaker::Closed => return None,
                        Breaker::HalfOpen { .. } => 1,
                        Breaker::Open { probe_at, .. } if now < probe_at => 2,
                        Breaker::Open { .. } => return None,
                    };
                    Some((rank, origin.clone()))
                })
                .collect()
        });
        if !at_cap.is_empty() {
            let paces = self.paces.lock().unwrap_or_else(|p| p.into_inner());
            for (origin, cap, taken) in at_cap {
                let ahead = match paces.latency(&origin) {
                    // Metered ones are claimed apart, at their room, never ahead.
                    Some(latency) if takes_whole(cap, latency, limit) => {
                        pace::turnover(cap, latency, CLAIM_AHEAD)
                    }
                    _ => 0,
                };
                if taken >= cap.saturating_add(ahead) {
                    avoided.push((0, origin));
                }
            }
        }
        if avoided.len() > MAX_AVOIDED {
            avoided.sort_unstable();
            avoided.truncate(MAX_AVOIDED);
        }
        avoided.into_iter().map(|(_, origin)| origin).collect()
    }

    /// Destinations a claim of `limit` events should take apart, each at most its
    /// room ([`pace::room`]): busy ones with a free place, whose pace is known and
    /// too slow to take `limit` events within [`CAP_WAIT`] even at their cap (a
    /// claim could otherwise take events that would wait it out and be handed
    /// back). A fast destination is never metered: its claims stay one statement.
    /// Smallest room first, at most [`MAX_METERED`]. Idle destinations are
    /// metered only shortly after a full metered pick ([`BACKLOG_MEMORY`]): a
    /// claim spends a statement on each.
    pub fn metered(&self, limit: usize) -> Vec<(String, u32)> {
        let busy: Vec<(String, usize, usize, usize)> = self.with(|map| {
            map.iter()
                .filter(|(origin, d)| {
                    origin.len() <= MAX_DESTINATION_LEN
                        && d.breaker == Breaker::Closed
                        && d.in_flight + d.waiting < d.cap
                        && (d.in_flight + d.waiting > 0 || d.has_backlog())
                })
                .map(|(origin, d)| (origin.clone(), d.cap, d.in_flight + d.waiting, d.in_flight))
                .collect()
        });
        if busy.is_empty() {
            return Vec::new();
        }
        let paces = self.paces.lock().unwrap_or_else(|p| p.into_inner());
        let mut metered: Vec<(usize, String)> = busy
            .into_iter()
            .filter_map(|(origin, cap, taken, in_flight)| {
                let latency = paces.latency(&origin)?;
                if takes_whole(cap, latency, limit) {
                    return None;
                }
                let room = pace::room(cap - taken, in_flight, latency, METERED_WAIT);
                Some((room.min(limit), origin))
            })
            .collect();
        metered.sort_unstable();
        metered.truncate(MAX_METERED);
        metered
            .into_iter()
            .map(|(room, origin)| (origin, room as u32))
            .collect()
    }

    /// Counts an event for `origin` leased at its insert (`outbox::hand_off`) as
    /// waiting for a place, when a claim would take it now: its breaker closed,
    /// and a place free under its cap (or, for a fast destination, one freed
    /// within [`CLAIM_AHEAD`]). `true`: counted (pass it to [`admit`] as
    /// `counted`, or undo it with [`unreserve`]).
    ///
    /// [`admit`]: DestinationHealth::admit
    /// [`unreserve`]: DestinationHealth::unreserve
    pub fn reserve(&self, origin: &str) -> bool {
        let latency = self
            .paces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .latency(origin);
        self.with(|map| {
            let d = self.entry(map, origin);
            if d.breaker != Breaker::Closed {
                return false;
            }
            let room = match latency {
                Some(latency) if takes_whole(d.cap, latency, 1) => d
                    .cap
                    .saturating_add(pace::turnover(d.cap, latency, CLAIM_AHEAD)),
                _ => d.cap,
            };
            if d.in_flight + d.waiting >= room {
                return false;
            }
            d.waiting += 1;
            true
        })
    }

    /// Undoes a [`reserve`], or the count [`took`] made, of an event that was
    /// not handed over (its write failed, its worker stopped first).
    ///
    /// [`reserve`]: DestinationHealth::reserve
    /// [`took`]: DestinationHealth::took
    pub fn unreserve(&self, origin: &str) {
        self.with(|map| {
            if let Some(d) = map.get_mut(origin) {
                d.waiting = d.waiting.saturating_sub(1);
            }
            forget_if_idle(map, origin);
        });
    }

    /// Changes each time a place frees at a destination with no event waiting
    /// for it in memory; a worker keeps one receiver for its life, so a change
    /// made while it was claiming is still news when it next goes idle.
    pub fn room_changes(&self) -> watch::Receiver<()> {
        self.room.subscribe()
    }

    /// How many destinations this node holds state for (idle healthy ones are
    /// forgotten).
    pub fn tracked(&self) -> usize {
        self.with(|map| map.len())
    }

    /// Records a claim made with `metered` that took `claimed`; says, for each
    /// claimed event, whether it was counted (pass that to [`admit`]). An event
    /// of a metered destination counts as waiting for a place under its cap from
    /// now, not only once its [`admit`] runs (in a task of its own): the next
    /// claim, made meanwhile, must see the places it will take, or it meters
    /// again from the same free places. (Others are counted by [`admit`]: a fast
    /// destination's events find their places before the next claim is made, and
    /// counting them from the claim left it out of claims it had room for.)
    /// A metered destination that got all it was allowed may have more due: it is
    /// kept and metered while idle for [`BACKLOG_MEMORY`] after. (A short pick
    /// proves nothing: another claim loop, of other kinds, shares this state.)
    ///
    /// [`admit`]: DestinationHealth::admit
    pub fn took(&self, metered: &[(String, u32)], claimed: &[ClaimedEvent]) -> Vec<bool> {
        self.with(|map| {
            let mut taken: HashMap<&str, u32> = HashMap::new();
            let counted = claimed
                .iter()
                .map(|event| {
                    let Some(origin) = event.destination.as_deref() else {
                        return false;
                    };
                    if !metered.iter().any(|(m, _)| m == origin) {
                        return false;
                    }
                    self.entry(map, origin).waiting += 1;
                    *taken.entry(origin).or_default() += 1;
                    true
                })
                .collect();
            for (origin, room) in metered {
                if taken.get(origin.as_str()).is_some_and(|n| n >= room) {
                    if let Some(d) = map.get_mut(origin) {
                        d.backlog_until = Some(Instant::now() + BACKLOG_MEMORY);
                    }
                }
            }
            counted
        })
    }

    /// Whether `event` may be sent now; `counted`: as [`took`] said of it.
    ///
    /// [`took`]: DestinationHealth::took
    pub async fn admit(&self, event: &ClaimedEvent, counted: bool) -> Admission {
        let Some(origin) = event.destination.clone() else {
            return Admission::Go(Ticket {
                origin: None,
                probe: false,
                admitted: Instant::now(),
            });
        };
        let give_up = tokio::time::Instant::now() + CAP_WAIT;
        // Counted as waiting since its claim ([`took`]), or not yet.
        let mut waited = counted;
        loop {
            let now = now_ms();
            let decision = self.with(|map| {
                let d = self.entry(map, &origin);
                if waited {
                    d.waiting = d.waiting.saturating_sub(1);
                }
                match d.breaker {
                    Breaker::Closed if d.in_flight < d.cap => {
                        d.in_flight += 1;
                        Decision::Go
                    }
                    Breaker::Closed => {
                        d.waiting += 1;
                        Decision::WaitForPlace(d.place_freed.clone())
                    }
                    Breaker::Open { probe_at, .. } if now < probe_at => {
                        Decision::GiveBack(probe_at - now)
                    }
                    Breaker::Open { .. } => Decision::Probe,
                    // The probe decides soon; a closing probe makes waiting events due.
                    Breaker::HalfOpen { open_ms, .. } => Decision::GiveBack(open_ms.min(1_000)),
                }
            });
            match decision {
                Decision::Go => {
                    return Admission::Go(Ticket {
                        origin: Some(origin),
                        probe: false,
                        admitted: Instant::now(),
                    })
                }
                Decision::GiveBack(delay_ms) => {
                    return Admission::Wait {
                        delay_ms,
                        reason: HandBack::Breaker,
                    }
                }
                Decision::Probe => break,
                Decision::WaitForPlace(freed) => {
                    waited = true;
                    if tokio::time::timeout_at(give_up, freed.notified())
                        .await
                        .is_err()
                    {
                        self.with(|map| {
                            let d = self.entry(map, &origin);
                            d.waiting = d.waiting.saturating_sub(1);
                        });
                        // (Should its breaker have opened meanwhile, the store
                        // makes it wait for the probe instead.)
                        return Admission::Wait {
                            delay_ms: CAP_WAIT_MS,
                            reason: HandBack::NoPlace,
                        };
                    }
                }
            }
        }
        // The probe time has come: one node, one event, takes the probe.
        let stale = self.config.stale_probe.as_millis() as i64;
        let took = match self.store.start_probe(&origin, stale).await {
            Ok(took) => took,
            Err(err) => {
                tracing::warn!(error = %err, "could not take a breaker probe; waiting");
                false
            }
        };
        self.with(|map| {
            let d = self.entry(map, &origin);
            match (took, d.breaker) {
                (true, Breaker::Open { open_ms, .. } | Breaker::HalfOpen { open_ms, .. }) => {
                    d.breaker = Breaker::HalfOpen {
                        here: true,
                        open_ms,
                    };
                    d.in_flight += 1;
                    Admission::Go(Ticket {
                        origin: Some(origin.clone()),
                        probe: true,
                        admitted: Instant::now(),
                    })
                }
                (_, Breaker::Open { open_ms, .. }) => {
                    // Another node probes; wait for its verdict.
                    d.breaker = Breaker::HalfOpen {
                        here: false,
                        open_ms,
                    };
                    Admission::Wait {
                        delay_ms: open_ms.min(1_000),
                        reason: HandBack::Breaker,
                    }
                }
                // The state moved on meanwhile (closed by an operator or a probe).
                _ => Admission::Wait {
                    delay_ms: CAP_WAIT_MS,
                    reason: HandBack::Breaker,
                },
            }
        })
    }

    /// Records an admitted attempt's settlement: counts failures, opens, closes.
    /// (A retry settled while the breaker is open waits for the probe: the store
    /// sees to that when it writes the retry.)
    pub async fn finished(&self, ticket: Ticket, settle: &Settle, tested_destination: bool) {
        let Some(origin) = ticket.origin else {
            return;
        };
        let verdict = if tested_destination {
            self.paces
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(&origin, ticket.admitted.elapsed());
            verdict(settle)
        } else {
            Verdict::Untested
        };
        let max_open = self.config.max_open.as_millis() as i64;
        let change = self.with(|map| {
            let change = self.judge(map, &origin, ticket.probe, verdict, max_open);
            forget_if_idle(map, &origin);
            change
        });
        let written = match change {
            None => return,
            Some(Change::Open {
                label,
                failures,
                open_ms,
            }) => {
                tracing::warn!(route = %label, failures, wait_ms = open_ms,
                    "destination breaker open: its events wait for a probe without spending attempts");
                self.store
                    .open_breaker(&origin, &label, failures, open_ms)
                    .await
                    .map(|_| ())
            }
            Some(Change::Close) => {
                tracing::info!("destination breaker closed by a successful probe");
                self.store.close_breaker(&origin, None).await.map(|_| ())
            }
        };
        if let Err(err) = written {
            tracing::warn!(error = %err, "could not record a breaker change; the next sync restores the shared state");
        }
        self.publish_local();
    }

    /// Counts an attempt's verdict against `origin`: the breaker change it causes.
    fn judge(
        &self,
        map: &mut HashMap<String, Destination>,
        origin: &str,
        probe: bool,
        verdict: Verdict,
        max_open: i64,
    ) -> Option<Change> {
        let d = self.entry(map, origin);
        d.in_flight = d.in_flight.saturating_sub(1);
        // The place goes to an event waiting in memory, else to the next claim.
        if d.waiting > 0 {
            d.place_freed.notify_one();
        } else {
            self.room.send_replace(());
        }
        match (probe, verdict, d.breaker) {
            (true, Verdict::Alive, _) => {
                d.breaker = Breaker::Closed;
                d.failures = 0;
                Some(Change::Close)
            }
            (
                true,
                Verdict::Failing,
                Breaker::HalfOpen { open_ms, .. } | Breaker::Open { open_ms, .. },
            ) => {
                let open_ms = (open_ms * 2).min(max_open.max(open_ms));
                Some(d.open_for(open_ms))
            }
            // A probe that could not be sent tested nothing: the breaker waits
            // for the next probe as it was, its wait not doubled.
            (
                true,
                Verdict::Untested,
                Breaker::HalfOpen { open_ms, .. } | Breaker::Open { open_ms, .. },
            ) => Some(d.open_for(open_ms)),
            (false, Verdict::Alive, Breaker::Closed) => {
                d.failures = 0;
                None
            }
            (false, Verdict::Failing, Breaker::Closed) => {
                d.failures += 1;
                if d.failures < self.config.failures {
                    return None;
                }
                let open_ms = self.config.open.as_millis() as i64;
                Some(d.open_for(open_ms))
            }
            // Attempts that started before the breaker opened tell nothing new.
            _ => None,
        }
    }

    /// Adopts the shared table's state (other nodes' openings, operators' closes).
    pub async fn sync(&self) -> Result<(), crate::store::StoreError> {
        // Only the sick rows: a local breaker whose row is not among them was
        // closed (by a probe elsewhere or an operator).
        let rows = self.store.unclosed_breakers().await?;
        let stale_ms = self.config.stale_probe.as_millis() as i64;
        let now = now_ms();
        self.with(|map| {
            let unclosed: std::collections::HashSet<&str> =
                rows.iter().map(|r| r.destination.as_str()).collect();
            let origins: Vec<String> = map.keys().cloned().collect();
            for origin in origins {
                let Some(d) = map.get_mut(&origin) else {
                    continue;
                };
                if unclosed.contains(origin.as_str()) {
                    continue;
                }
                // Closed: keep a local probe's own bookkeeping until it ends.
                if !matches!(
                    d.breaker,
                    Breaker::Closed | Breaker::HalfOpen { here: true, .. }
                ) {
                    d.breaker = Breaker::Closed;
                    d.failures = 0;
                }
                forget_if_idle(map, &origin);
            }
            for row in &rows {
                let d = self.entry(map, &row.destination);
                d.breaker = match (row.state.as_str(), d.breaker) {
                    ("open", _) => Breaker::Open {
                        probe_at: row.probe_at.unwrap_or(0),
                        open_ms: row.open_ms,
                    },
                    // A probe older than its lease was abandoned (its node died, or
                    // its verdict was never written): it is due again, here as on
                    // every node, and `start_probe` lets one of them take it over.
                    ("half_open", _) if now >= row.updated_at + stale_ms => Breaker::Open {
                        probe_at: row.updated_at + stale_ms,
                        open_ms: row.open_ms,
                    },
                    ("half_open", Breaker::HalfOpen { here, .. }) => Breaker::HalfOpen {
                        here,
                        open_ms: row.open_ms,
                    },
                    ("half_open", _) => Breaker::HalfOpen {
                        here: false,
                        open_ms: row.open_ms,
                    },
                    // (Only unclosed rows are read.)
                    _ => d.breaker,
                };
            }
        });
        // The gauges follow the shared table: what every node and the console see.
        // A label shown open before (a route since removed from the config
        // included) reads 0 once its breakers have closed.
        let mut shown = self.shown_labels.lock().unwrap_or_else(|p| p.into_inner());
        let mut open: HashMap<String, bool> = self
            .config
            .labels()
            .into_iter()
            .chain(shown.iter().cloned())
            .map(|l| (l, false))
            .collect();
        for row in &rows {
            *open.entry(row.route.clone()).or_default() |= row.state != "closed";
        }
        for (label, is_open) in open {
            self.metrics.set_breaker_open(&label, is_open);
            shown.insert(label);
        }
        Ok(())
    }

    /// Between syncs, this node's own openings show at once.
    fn publish_local(&self) {
        let open: Vec<String> = self.with(|map| {
            map.values()
                .filter(|d| d.breaker != Breaker::Closed)
                .map(|d| d.label.clone())
                .collect()
        });
        for label in open {
            self.metrics.set_breaker_open(&label, true);
        }
    }

    /// Syncs every `every` until `stop`. Failures go to the store's health, which
    /// logs an outage once (`store unavailable`), not on every sync.
    pub async fn run_sync(
        self: Arc<Self>,
        every: Duration,
        store_health: Arc<StoreHealth>,
        stop: CancellationToken,
    ) {
        // While the store fails, syncs back off like every other loop on it.
        let mut backoff = StoreBackoff::default();
        loop {
            let began = Instant::now();
            let pause = match self.sync().await {
                Ok(()) => {
                    store_health.succeeded(began);
                    backoff.reset();
                    every
                }
                Err(err) => {
                    let fault = store_health.failed(&err);
                    if !fault.is_outage() {
                        tracing::warn!(error = %err, "could not read the destination breakers; keeping the last state");
                    }
                    every.max(backoff.pause(fault))
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {},
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// Whether a destination answering in about `latency` takes a claim of `limit`
/// of its events within [`CAP_WAIT`] at its `cap`: none of them would be handed
/// back, so it is claimed whole (not metered), and ahead of its places.
fn takes_whole(cap: usize, latency: Duration, limit: usize) -> bool {
    pace::turnover(cap, latency, CAP_WAIT) >= limit
}

/// Drops `origin`'s state when it holds nothing worth keeping: a closed breaker,
/// no failures counted, nothing in flight or waiting. Its next event starts it
/// afresh, so memory follows the destinations in use, not every one ever seen.
fn forget_if_idle(map: &mut HashMap<String, Destination>, origin: &str) {
    if map.get(origin).is_some_and(|d| {
        d.breaker == Breaker::Closed
            && d.failures == 0
            && d.in_flight == 0
            && d.waiting == 0
            && !d.has_backlog()
    }) {
        map.remove(origin);
    }
}

/// The breakers an operator sees: open and half-open ones first.
pub fn open_first(mut rows: Vec<BreakerRecord>) -> Vec<BreakerRecord> {
    rows.sort_by_key(|r| (r.state == "closed", r.route.clone()));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_origins_short_enough_to_track() {
        assert_eq!(
            destination_of("https://hooks.example.com/a?key=secret").as_deref(),
            Some("https://hooks.example.com")
        );
        assert_eq!(
            destination_of("smtps://m.example.com:2465").as_deref(),
            Some("smtps://m.example.com:2465")
        );
        assert_eq!(destination_of("not a url"), None);
        let long_host = format!(
            "https://{}.example.com/x",
            vec!["a".repeat(60); 4].join(".")
        );
        assert_eq!(destination_of(&long_host), None);
    }

    #[test]
    fn retryable_settlements_count_against_a_destination() {
        assert_eq!(verdict(&Settle::Retry { delay_ms: 5 }), Verdict::Failing);
        assert_eq!(
            verdict(&Settle::Failed { exhausted: true }),
            Verdict::Failing
        );
        assert_eq!(
            verdict(&Settle::Failed { exhausted: false }),
            Verdict::Alive
        );
        assert_eq!(verdict(&Settle::Completed), Verdict::Alive);
    }
}
