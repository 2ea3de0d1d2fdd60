//! Whether a store is serving the outbox, as its workers and maintenance see it,
//! and how long they wait before asking again.
//!
//! A store outage (a Galera node that lost quorum, a database refusing
//! connections) makes every claim fail. Without care each worker would retry at
//! its poll rate and log every failure. Instead the callers back off (capped,
//! jittered: [`StoreBackoff`]) and report each result to the store's one
//! [`StoreHealth`], which logs only the change of state (`store unavailable` at
//! WARN with the error class, `store back` at INFO with how long it was out),
//! drives `herald_outbox_available{source}` and answers `/readyz`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

use super::metrics::Metrics;
use crate::store::{StoreError, StoreFault};

/// The first pause after a failure, and the longest: a store that comes back is
/// used again within this long.
pub const STORE_BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const STORE_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A lost commit race is retried after a short random pause, not backed off from.
const CONFLICT_PAUSE_MAX_MS: u64 = 25;

/// Capped exponential backoff with jitter over consecutive store failures.
pub struct StoreBackoff {
    current: ExponentialBackoff,
}

impl Default for StoreBackoff {
    fn default() -> Self {
        StoreBackoff {
            current: Self::builder().build(),
        }
    }
}

impl StoreBackoff {
    fn builder() -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(STORE_BACKOFF_MIN)
            .with_max_delay(STORE_BACKOFF_MAX)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
    }

    /// The pause before retrying after a failure of class `fault`.
    pub fn pause(&mut self, fault: StoreFault) -> Duration {
        if fault == StoreFault::Conflict {
            return Duration::from_millis(rand::random_range(1..=CONFLICT_PAUSE_MAX_MS));
        }
        self.current
            .next()
            .unwrap_or(STORE_BACKOFF_MAX)
            .min(STORE_BACKOFF_MAX)
    }

    /// After a success the next failure starts from the shortest pause again.
    pub fn reset(&mut self) {
        self.current = Self::builder().build();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing reported yet (the gauge stays 0 until the first answer).
    Unknown,
    Up,
    Down {
        since: Instant,
        fault: StoreFault,
        failures: u64,
    },
}

/// One store's availability, shared by every worker and the maintenance loop on it.
pub struct StoreHealth {
    metrics: Arc<Metrics>,
    /// The sources this store holds (their `herald_outbox_available` gauges).
    sources: Vec<&'static str>,
    state: Mutex<State>,
}

/// What `/readyz` says about a store that is out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    pub fault: StoreFault,
    pub for_how_long: Duration,
}

impl StoreHealth {
    pub fn new(metrics: Arc<Metrics>, sources: Vec<&'static str>) -> Arc<StoreHealth> {
        Arc::new(StoreHealth {
            metrics,
            sources,
            state: Mutex::new(State::Unknown),
        })
    }

    /// The sources this store holds (`jobs`, `approvals`, or both).
    pub fn sources(&self) -> &[&'static str] {
        &self.sources
    }

    fn set_gauges(&self, available: bool) {
        for source in &self.sources {
            self.metrics.set_available(source, available);
        }
    }

    /// The store answered a call made at `began`. An answer to a call made
    /// before the outage began says nothing of the store now (a query that
    /// finished as the server went down), so it does not end the outage: it
    /// would be logged as back, and the next failure as a second outage.
    pub fn succeeded(&self, began: Instant) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match *state {
            State::Up => return,
            State::Down { since, .. } if began < since => return,
            State::Down {
                since,
                fault,
                failures,
            } => tracing::info!(
                sources = ?self.sources,
                out_for_ms = since.elapsed().as_millis() as u64,
                failures,
                was = fault.as_str(),
                "store back"
            ),
            State::Unknown => {}
        }
        *state = State::Up;
        self.set_gauges(true);
    }

    /// The store failed a call; returns the failure's class. A lost commit race
    /// says nothing about availability; any other failure marks the store out.
    pub fn failed(&self, err: &StoreError) -> StoreFault {
        let fault = err.fault();
        if fault == StoreFault::Conflict {
            tracing::debug!(error = %err, "store call lost a commit race; retrying");
            return fault;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *state {
            State::Down {
                failures,
                fault: current,
                ..
            } => {
                *failures += 1;
                // The outage is reported by what fails now: a Galera node that
                // loses its quorum first times out waiting for its peers (1205),
                // then refuses with 1047 once it knows.
                *current = fault;
                tracing::debug!(error = %err, class = fault.as_str(), "store still unavailable");
            }
            other => {
                tracing::warn!(
                    sources = ?self.sources,
                    class = fault.as_str(),
                    error = %err,
                    "store unavailable; backing off until it answers again"
                );
                *other = State::Down {
                    since: Instant::now(),
                    fault,
                    failures: 1,
                };
                self.set_gauges(false);
            }
        }
        fault
    }

    /// The current outage, if the store is out.
    pub fn outage(&self) -> Option<Outage> {
        match *self.state.lock().unwrap_or_else(|p| p.into_inner()) {
            State::Down { since, fault, .. } => Some(Outage {
                fault,
                for_how_long: since.elapsed(),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> StoreError {
        StoreError::Database(sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )))
    }

    #[test]
    fn backoff_grows_to_its_cap_and_restarts_after_a_success() {
        let mut backoff = StoreBackoff::default();
        let pauses: Vec<Duration> = (0..12)
            .map(|_| backoff.pause(StoreFault::Unreachable))
            .collect();
        assert!(pauses[0] >= STORE_BACKOFF_MIN && pauses[0] <= STORE_BACKOFF_MIN * 2);
        assert!(pauses.iter().all(|p| *p <= STORE_BACKOFF_MAX));
        assert!(pauses[11] >= STORE_BACKOFF_MAX / 2, "{pauses:?}");
        backoff.reset();
        assert!(backoff.pause(StoreFault::NoQuorum) <= STORE_BACKOFF_MIN * 2);
        assert!(
            backoff.pause(StoreFault::Conflict) <= Duration::from_millis(CONFLICT_PAUSE_MAX_MS)
        );
    }

    #[test]
    fn an_outage_is_a_state_with_a_gauge() {
        let metrics = Arc::new(Metrics::new());
        metrics.declare("jobs", "callback");
        let health = StoreHealth::new(metrics.clone(), vec!["jobs"]);
        assert_eq!(health.outage(), None);
        health.succeeded(Instant::now());
        assert!(metrics
            .render()
            .contains("herald_outbox_available{source=\"jobs\"} 1"));
        let began_before = Instant::now();
        assert_eq!(health.failed(&refused()), StoreFault::Unreachable);
        health.failed(&refused());
        let outage = health.outage().expect("out");
        assert_eq!(outage.fault, StoreFault::Unreachable);
        assert!(metrics
            .render()
            .contains("herald_outbox_available{source=\"jobs\"} 0"));
        // A call made before the outage answered late: still out.
        health.succeeded(began_before);
        assert_eq!(health.outage().expect("still out").fault, outage.fault);
        health.succeeded(Instant::now());
        assert_eq!(health.outage(), None);
        assert!(metrics
            .render()
            .contains("herald_outbox_available{source=\"jobs\"} 1"));
    }

    #[test]
    fn an_outage_is_reported_by_what_fails_now() {
        let health = StoreHealth::new(Arc::new(Metrics::new()), vec!["jobs"]);
        health.failed(&refused());
        let now = health.failed(&StoreError::Corrupt("an unreadable row".into()));
        assert_eq!(now, StoreFault::Other);
        assert_eq!(health.outage().expect("still out").fault, StoreFault::Other);
    }
}
