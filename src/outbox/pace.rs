//! How quickly each destination answers, and how many of its events a claim may
//! take without any of them waiting out [`CAP_WAIT`] to be handed back.
//!
//! One claim takes up to a batch of due events in `next_attempt_at` order. For a
//! destination that answers in milliseconds, events beyond its free places find
//! one within moments. For a slow one (a receiver answering after a second, at
//! its cap of 16), a claim that takes 200 of its events sends one, holds the rest
//! in memory for a second and hands nearly all of them back: a write each, twice,
//! for nothing. So a destination whose pace is known and slow is *metered*: it is
//! left out of the claim's walk and claimed apart, at most its [`room`].
//!
//! The pace is remembered past a destination's idle moments
//! ([`DestinationHealth`] forgets idle destinations), so a slow receiver that
//! goes quiet and busy again is metered from its first busy claim on.
//!
//! [`CAP_WAIT`]: super::destinations::CAP_WAIT
//! [`DestinationHealth`]: super::destinations::DestinationHealth

use std::collections::HashMap;
use std::time::Duration;

/// Destinations whose pace is remembered; past it one is forgotten to make room
/// (memory follows the destinations in use, not every one ever seen).
const MAX_REMEMBERED: usize = 1_024;

/// The weight of the newest attempt in a destination's smoothed latency.
const SMOOTHING: f64 = 0.2;

/// Each destination's smoothed attempt latency.
#[derive(Debug, Default)]
pub struct Paces {
    latency_ms: HashMap<String, f64>,
}

impl Paces {
    /// Records one attempt to `origin` that took `took`, from admission to result.
    pub fn record(&mut self, origin: &str, took: Duration) {
        let ms = took.as_secs_f64() * 1_000.0;
        if let Some(latency) = self.latency_ms.get_mut(origin) {
            *latency += SMOOTHING * (ms - *latency);
            return;
        }
        if self.latency_ms.len() >= MAX_REMEMBERED {
            if let Some(any) = self.latency_ms.keys().next().cloned() {
                self.latency_ms.remove(&any);
            }
        }
        self.latency_ms.insert(origin.to_string(), ms);
    }

    /// `origin`'s smoothed attempt latency, once one attempt has been measured.
    pub fn latency(&self, origin: &str) -> Option<Duration> {
        self.latency_ms
            .get(origin)
            .map(|ms| Duration::from_secs_f64(ms / 1_000.0))
    }
}

/// How many attempts `places` busy places answering in about `latency` end
/// within `within` (each place turns over `within / latency` times).
pub fn turnover(places: usize, latency: Duration, within: Duration) -> usize {
    // Below a millisecond a destination frees places faster than any claim.
    let turns = within.as_secs_f64() / latency.as_secs_f64().max(0.001);
    (places as f64 * turns).min(1e9) as usize
}

/// How many events a claim may take for a destination with `free` places and
/// `in_flight` attempts answering in about `latency`: the free places, plus the
/// places the attempts in flight free within `within`. Events beyond the free
/// places wait in memory for those, so `within` is kept well inside `CAP_WAIT`.
pub fn room(free: usize, in_flight: usize, latency: Duration, within: Duration) -> usize {
    free.saturating_add(turnover(in_flight, latency, within))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_at_its_cap_turns_its_places_over_as_fast_as_it_answers() {
        let second = Duration::from_secs(1);
        assert_eq!(turnover(16, Duration::from_secs(1), second), 16);
        assert_eq!(turnover(16, Duration::from_millis(10), second), 1_600);
        assert_eq!(turnover(0, Duration::from_millis(10), second), 0);
    }

    #[test]
    fn the_room_of_a_slow_destination_is_its_free_places_and_what_frees_in_time() {
        let half_second = Duration::from_millis(500);
        // At its cap of 16 but one, answering after a second: 1 free now, 7 by then.
        assert_eq!(room(1, 15, Duration::from_secs(1), half_second), 8);
        // Nothing in flight: only the free places.
        assert_eq!(room(16, 0, Duration::from_secs(1), half_second), 16);
        // Answering in 5 ms, 15 in flight free 1,500 places in half a second.
        assert_eq!(room(1, 15, Duration::from_millis(5), half_second), 1_501);
        // A latency of zero does not divide by zero.
        assert!(room(1, 15, Duration::ZERO, half_second) > 1_000);
    }

    #[test]
    fn latency_is_smoothed_and_remembered_for_a_bounded_number_of_destinations() {
        let mut paces = Paces::default();
        assert_eq!(paces.latency("https://a.test"), None);
        paces.record("https://a.test", Duration::from_millis(100));
        assert_eq!(
            paces.latency("https://a.test"),
            Some(Duration::from_millis(100))
        );
        // One attempt of 600 ms moves it a fifth of the way.
        paces.record("https://a.test", Duration::from_millis(600));
        let smoothed = paces.latency("https://a.test").unwrap().as_secs_f64();
        assert!((smoothed - 0.2).abs() < 1e-9, "{smoothed}");
        for i in 0..MAX_REMEMBERED + 10 {
            paces.record(&format!("https://{i}.test"), Duration::from_millis(1));
        }
        assert_eq!(paces.latency_ms.len(), MAX_REMEMBERED);
    }
}
