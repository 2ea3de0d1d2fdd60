//! Failed-login throttling: after `max_failures` failures for one username and client
//! address within the window, further attempts are refused until the window passes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct LoginThrottle {
    max_failures: u32,
    window: Duration,
    failures: Mutex<HashMap<String, (u32, Instant)>>,
}

/// Entries beyond this are pruned so an attacker cannot grow memory without bound.
const MAX_TRACKED_KEYS: usize = 100_000;

impl LoginThrottle {
    pub fn new(max_failures: u32, window: Duration) -> Self {
        LoginThrottle {
            max_failures,
            window,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn key(username: &str, client: &str) -> String {
        format!("{}\u{0}{client}", username.to_lowercase())
    }

    /// Whether another attempt may be made now.
    pub fn allows(&self, username: &str, client: &str) -> bool {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        match failures.get(&Self::key(username, client)) {
            Some((count, since)) if since.elapsed() < self.window => *count < self.max_failures,
            Some(_) => {
                failures.remove(&Self::key(username, client));
                true
            }
            None => true,
        }
    }

    pub fn record_failure(&self, username: &str, client: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= MAX_TRACKED_KEYS {
            let window = self.window;
            failures.retain(|_, (_, since)| since.elapsed() < window);
        }
        let entry = failures
            .entry(Self::key(username, client))
            .or_insert((0, Instant::now()));
        if entry.1.elapsed() >= self.window {
            *entry = (0, Instant::now());
        }
        entry.0 += 1;
    }

    pub fn record_success(&self, username: &str, client: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.remove(&Self::key(username, client));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_after_max_failures_until_the_window_passes() {
        let throttle = LoginThrottle::new(2, Duration::from_millis(200));
        assert!(throttle.allows("ada", "1.2.3.4"));
        throttle.record_failure("ada", "1.2.3.4");
        assert!(throttle.allows("ada", "1.2.3.4"));
        throttle.record_failure("Ada", "1.2.3.4");
        assert!(!throttle.allows("ada", "1.2.3.4"));
        assert!(
            throttle.allows("ada", "5.6.7.8"),
            "other clients are unaffected"
        );
        std::thread::sleep(Duration::from_millis(250));
        assert!(throttle.allows("ada", "1.2.3.4"));
    }

    #[test]
    fn success_clears_failures() {
        let throttle = LoginThrottle::new(2, Duration::from_secs(60));
        throttle.record_failure("bob", "c");
        throttle.record_success("bob", "c");
        throttle.record_failure("bob", "c");
        assert!(throttle.allows("bob", "c"));
    }
}
