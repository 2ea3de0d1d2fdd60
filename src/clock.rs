//! The process's local wall clock. Leases, due times and expiry are never compared
//! against it: they use the store's clock (`Engine::now_ms`), so nodes with skewed
//! clocks agree. It only stamps what this process observed (attempt start and
//! finish times in the attempt log).
//!
//! Test-only: `HERALD_TEST_CLOCK_SKEW_MS=<signed ms>` shifts this clock, so a test
//! can run a node whose clock is wrong and show that it still never takes a live
//! lease. Never set it in production.
//!
//! [`format_ms`] writes any stored instant (milliseconds) for people and JSON;
//! [`OncePer`] lets something happen at most once an interval (a pass, a log line).

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const TEST_SKEW_ENV: &str = "HERALD_TEST_CLOCK_SKEW_MS";

fn skew_ms() -> i64 {
    static SKEW: OnceLock<i64> = OnceLock::new();
    *SKEW.get_or_init(|| {
        std::env::var(TEST_SKEW_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    })
}

/// Epoch milliseconds by this process's clock (shifted by the test skew, if set).
pub fn local_now_ms() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64 / 1_000_000 + skew_ms()
}

/// Formats store milliseconds as RFC 3339 UTC.
pub fn format_ms(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// Says yes at most once every `every` (by the monotonic clock): a pass that is
/// due once an interval, or a condition that lasts (every place taken) logged
/// once a minute rather than once per request it touches.
#[derive(Debug)]
pub struct OncePer {
    every: Duration,
    last: Mutex<Option<Instant>>,
}

impl OncePer {
    pub const fn new(every: Duration) -> Self {
        OncePer {
            every,
            last: Mutex::new(None),
        }
    }

    /// Whether it is due now (and, if so, not again for `every`).
    pub fn due(&self) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|at| at.elapsed() < self.every) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_says_yes_once_per_interval() {
        let gate = OncePer::new(Duration::from_millis(200));
        assert!(gate.due());
        assert!(!gate.due(), "again at once");
        std::thread::sleep(Duration::from_millis(250));
        assert!(gate.due(), "after the interval");
        assert!(!gate.due());
    }
}
