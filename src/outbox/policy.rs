//! Retry policy per kind: attempts per automatic cycle, exponential backoff with
//! jitter and a cap, `Retry-After` honoured, and the lease duration.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Sending attempts allowed per automatic cycle (DESIGN: 6).
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub jitter: bool,
    /// How long a claim holds an event before another worker may take it over.
    pub lease: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            initial_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(600),
            jitter: true,
            lease: Duration::from_secs(60),
        }
    }
}

/// A `Retry-After` beyond this is treated as this: a receiver cannot park an event for days.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

impl RetryPolicy {
    /// The delay after the `cycle_attempt`-th failed attempt of a cycle (1-based):
    /// `initial · 2^(n-1)`, capped at `max_backoff`, plus up to the same again as
    /// jitter, never past `max_backoff`. A receiver's `Retry-After` is a floor.
    pub fn backoff(&self, cycle_attempt: u32, retry_after: Option<Duration>) -> Duration {
        let mut builder = ExponentialBuilder::default()
            .with_min_delay(self.initial_backoff)
            .with_max_delay(self.max_backoff)
            .with_factor(2.0)
            .without_max_times();
        if self.jitter {
            builder = builder.with_jitter();
        }
        let computed = builder
            .build()
            .nth(cycle_attempt.saturating_sub(1) as usize)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff);
        // Whole milliseconds: the store keeps times in milliseconds.
        let computed = Duration::from_millis((computed.as_secs_f64() * 1000.0).round() as u64);
        match retry_after {
            Some(asked) => computed.max(asked.min(MAX_RETRY_AFTER)),
            None => computed,
        }
    }

    /// Whether another attempt fits in the cycle after `cycle_attempts` attempts.
    pub fn has_attempts_left(&self, cycle_attempts: i64) -> bool {
        cycle_attempts < i64::from(self.max_attempts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(jitter: bool) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 6,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            jitter,
            lease: Duration::from_secs(30),
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = policy(false);
        let delays: Vec<u64> = (1..=6).map(|n| p.backoff(n, None).as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn jitter_stays_between_the_base_and_twice_it_under_the_cap() {
        let p = policy(true);
        for n in 1..=6u32 {
            let base = policy(false).backoff(n, None);
            for _ in 0..50 {
                let d = p.backoff(n, None);
                assert!(
                    d >= base && d <= (base * 2).min(p.max_backoff),
                    "attempt {n}: {d:?}"
                );
            }
        }
    }

    #[test]
    fn retry_after_is_a_floor_with_its_own_cap() {
        let p = policy(false);
        assert_eq!(
            p.backoff(1, Some(Duration::from_secs(30))),
            Duration::from_secs(30)
        );
        assert_eq!(
            p.backoff(4, Some(Duration::from_secs(2))),
            Duration::from_secs(8)
        );
        assert_eq!(
            p.backoff(1, Some(Duration::from_secs(86_400))),
            MAX_RETRY_AFTER
        );
    }

    #[test]
    fn six_attempts_per_cycle() {
        let p = policy(false);
        assert!(p.has_attempts_left(5));
        assert!(!p.has_attempts_left(6));
    }
}
