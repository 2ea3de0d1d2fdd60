//! Sign-in throttling, with memory bounded whatever an attacker sends.
//!
//! Two limits, both counted **before** the password is checked, so parallel
//! guesses cannot all slip in while the count is still low:
//! - per (username, client address): after `max_failures` failures within the
//!   window, that pair is refused until the window has passed;
//! - per username, whatever the address: after `max_failures × USER_FACTOR`
//!   failures within the window, the user is slowed down rather than locked out —
//!   one attempt per slowdown interval (`login_slowdown_ms`, 5 s by default) is
//!   let through, so rotating addresses gains an attacker almost nothing while the
//!   real user can still sign in;
//! - per client address, whatever the username: after `address_limit` failures
//!   within the window (100 by default), the address is refused until the window
//!   has passed, so one client spraying random usernames cannot keep the password
//!   hasher busy. Successful sign-ins do not count, so a busy office behind one
//!   address is not refused for its users' own sign-ins.
//!
//! Keys are SHA-256 digests (fixed size, whatever the username's length) in maps
//! with a hard cap that evicts the oldest window first.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Most keys tracked per map; past it the oldest entry is evicted (O(1)).
pub const MAX_TRACKED_KEYS: usize = 100_000;
/// A user's limit across every address is this many times the per-address one.
pub const USER_FACTOR: u32 = 4;
/// Failed sign-ins one client address may make across all usernames in a window,
/// unless configured otherwise (`login_address_max_failures`).
pub const DEFAULT_ADDRESS_LIMIT: u32 = 100;

type Key = [u8; 32];

/// Why an attempt may not be made now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This user from this address failed too often: wait for the window.
    Address,
    /// This user failed too often from many addresses: slowed down.
    User,
    /// This address failed too often across usernames: wait for the window.
    Client,
}

/// A counted attempt; report its outcome with [`LoginThrottle::succeeded`].
#[derive(Debug)]
pub struct Attempt {
    pair: Key,
    user: Key,
    client: Key,
}

struct Entry {
    count: u32,
    since: Instant,
    /// For user entries past their limit: when the last slowed attempt went through.
    last_admitted: Option<Instant>,
}

/// A capped map of windows; `order` holds keys by first insertion for eviction.
struct Windows {
    entries: HashMap<Key, Entry>,
    order: VecDeque<Key>,
    cap: usize,
}

impl Windows {
    fn new(cap: usize) -> Self {
        Windows {
            entries: HashMap::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    /// The live entry of `key`, started afresh when its window has passed.
    fn entry(&mut self, key: Key, window: Duration, now: Instant) -> &mut Entry {
        if !self.entries.contains_key(&key) {
            while self.entries.len() >= self.cap {
                match self.order.pop_front() {
                    Some(old) => {
                        self.entries.remove(&old);
                    }
                    None => break,
                }
            }
            self.order.push_back(key);
        }
        let entry = self.entries.entry(key).or_insert(Entry {
            count: 0,
            since: now,
            last_admitted: None,
        });
        if now.duration_since(entry.since) >= window {
            *entry = Entry {
                count: 0,
                since: now,
                last_admitted: None,
            };
        }
        entry
    }

    /// Starts `key` clean; it keeps its place in the eviction order.
    fn reset(&mut self, key: &Key) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.count = 0;
        }
    }
}

struct State {
    pairs: Windows,
    users: Windows,
    clients: Windows,
}

pub struct LoginThrottle {
    max_failures: u32,
    address_limit: u32,
    window: Duration,
    slowdown: Duration,
    state: Mutex<State>,
}

/// The address an attempt is counted against: an IPv6 client by its /64 (one
/// host usually holds a whole /64, and could rotate through it), anything else as
/// given.
fn client_key(client: &str) -> String {
    match client.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                format!("{}/64", std::net::Ipv6Addr::from(prefix))
            }
        },
        _ => client.to_string(),
    }
}

fn digest(parts: &[&str]) -> Key {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize().into()
}

impl LoginThrottle {
    /// `slowdown`: once over its limit, a user is let through at most once per it.
    pub fn new(max_failures: u32, window: Duration, slowdown: Duration) -> Self {
        Self::with_capacity(max_failures, window, slowdown, MAX_TRACKED_KEYS)
    }

    pub fn with_capacity(
        max_failures: u32,
        window: Duration,
        slowdown: Duration,
        cap: usize,
    ) -> Self {
        LoginThrottle {
            max_failures,
            address_limit: DEFAULT_ADDRESS_LIMIT,
            window,
            slowdown,
            state: Mutex::new(State {
                pairs: Windows::new(cap),
                users: Windows::new(cap),
                clients: Windows::new(cap),
            }),
        }
    }

    /// Failed sign-ins one client address may make across all usernames in a window.
    pub fn with_address_limit(mut self, limit: u32) -> Self {
        self.address_limit = limit;
        self
    }

    /// Counts an attempt as a failure up front (cleared by [`Self::succeeded`]), or
    /// refuses it. `username` must already be length-checked by the caller.
    pub fn begin(&self, username: &str, client: &str) -> Result<Attempt, Refusal> {
        let username = username.to_lowercase();
        let client = &client_key(client);
        let attempt = Attempt {
            pair: digest(&[&username, client]),
            user: digest(&[&username]),
            // A prefix keeps an address from ever sharing a key with a username.
            client: digest(&["client", client]),
        };
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let pair = state.pairs.entry(attempt.pair, self.window, now);
        if pair.count >= self.max_failures {
            return Err(Refusal::Address);
        }
        if state.clients.entry(attempt.client, self.window, now).count >= self.address_limit {
            return Err(Refusal::Client);
        }
        let user_limit = self.max_failures.saturating_mul(USER_FACTOR);
        let user = state.users.entry(attempt.user, self.window, now);
        if user.count >= user_limit {
            match user.last_admitted {
                Some(at) if now.duration_since(at) < self.slowdown => return Err(Refusal::User),
                _ => user.last_admitted = Some(now),
            }
        }
        user.count = user.count.saturating_add(1);
        state.pairs.entry(attempt.pair, self.window, now).count += 1;
        state.clients.entry(attempt.client, self.window, now).count += 1;
        Ok(attempt)
    }

    /// The attempt's password was right: its address pair starts clean again. The
    /// user-wide count keeps the attempt, so a correct guess buys an attacker nothing.
    pub fn succeeded(&self, attempt: &Attempt) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.pairs.reset(&attempt.pair);
        if let Some(user) = state.users.entries.get_mut(&attempt.user) {
            user.count = user.count.saturating_sub(1);
        }
        if let Some(client) = state.clients.entries.get_mut(&attempt.client) {
            client.count = client.count.saturating_sub(1);
        }
    }

    /// The attempt's password was never checked (the hasher was busy, the store
    /// failed): every count it took is given back, as if it had not been made.
    pub fn abandoned(&self, attempt: &Attempt) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let State {
            pairs,
            users,
            clients,
        } = &mut *state;
        for (windows, key) in [
            (pairs, &attempt.pair),
            (users, &attempt.user),
            (clients, &attempt.client),
        ] {
            if let Some(entry) = windows.entries.get_mut(key) {
                entry.count = entry.count.saturating_sub(1);
            }
        }
    }

    /// How many keys are tracked (for tests of the memory bound).
    pub fn tracked(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.pairs.entries.len() + state.users.entries.len() + state.clients.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOWDOWN: Duration = Duration::from_secs(600);

    #[test]
    fn refuses_after_max_failures_until_the_window_passes() {
        // A window no pause between three calls can outlast.
        let throttle = LoginThrottle::new(2, Duration::from_secs(1), SLOWDOWN);
        assert!(throttle.begin("ada", "1.2.3.4").is_ok());
        assert!(throttle.begin("Ada", "1.2.3.4").is_ok());
        assert_eq!(
            throttle.begin("ada", "1.2.3.4").unwrap_err(),
            Refusal::Address
        );
        assert!(
            throttle.begin("ada", "5.6.7.8").is_ok(),
            "other clients are unaffected"
        );
        std::thread::sleep(Duration::from_millis(1_100));
        assert!(throttle.begin("ada", "1.2.3.4").is_ok());
    }

    #[test]
    fn attempts_are_counted_before_verification() {
        // Parallel guesses: every `begin` counts at once, before any outcome is known.
        let throttle = LoginThrottle::new(5, Duration::from_secs(60), SLOWDOWN);
        let admitted = (0..200)
            .filter(|_| throttle.begin("ada", "1.2.3.4").is_ok())
            .count();
        assert_eq!(admitted, 5);
    }

    #[test]
    fn success_clears_the_address_pair() {
        let throttle = LoginThrottle::new(2, Duration::from_secs(60), SLOWDOWN);
        let first = throttle.begin("bob", "c").unwrap();
        throttle.succeeded(&first);
        throttle.begin("bob", "c").unwrap();
        assert!(throttle.begin("bob", "c").is_ok());
    }

    #[test]
    fn rotating_addresses_is_slowed_down_per_user_not_locked_out() {
        let throttle = LoginThrottle::new(2, Duration::from_secs(60), SLOWDOWN);
        let limit = 2 * USER_FACTOR as usize;
        let admitted = (0..1000)
            .filter(|i| {
                throttle
                    .begin("carol", &format!("10.0.{}.{}", i / 250, i % 250))
                    .is_ok()
            })
            .count();
        // The user limit, plus the one slowed attempt let through right away.
        assert_eq!(admitted, limit + 1);
        assert_eq!(
            throttle.begin("carol", "192.0.2.1").unwrap_err(),
            Refusal::User
        );
        assert!(
            throttle.begin("dave", "10.0.0.1").is_ok(),
            "other users are unaffected"
        );
    }

    #[test]
    fn one_address_spraying_usernames_is_refused_past_its_limit() {
        let throttle =
            LoginThrottle::new(5, Duration::from_secs(60), SLOWDOWN).with_address_limit(20);
        let admitted = (0..500)
            .filter(|i| throttle.begin(&format!("user{i}"), "1.2.3.4").is_ok())
            .count();
        assert_eq!(admitted, 20, "the address limit, across usernames");
        assert_eq!(
            throttle.begin("someone-new", "1.2.3.4").unwrap_err(),
            Refusal::Client
        );
        assert!(
            throttle.begin("someone-new", "5.6.7.8").is_ok(),
            "other addresses are unaffected"
        );
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64() {
        let throttle =
            LoginThrottle::new(5, Duration::from_secs(60), SLOWDOWN).with_address_limit(3);
        for host in ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::9"] {
            throttle.begin(&format!("u-{host}"), host).unwrap();
        }
        assert_eq!(
            throttle.begin("u-next", "2001:db8:1:2::77").unwrap_err(),
            Refusal::Client,
            "the same /64"
        );
        assert!(
            throttle.begin("u-other", "2001:db8:1:3::1").is_ok(),
            "another /64"
        );
        assert_eq!(client_key("::ffff:192.0.2.7"), "192.0.2.7");
    }

    #[test]
    fn an_abandoned_attempt_is_given_back() {
        let throttle =
            LoginThrottle::new(2, Duration::from_secs(60), SLOWDOWN).with_address_limit(2);
        for _ in 0..10 {
            let attempt = throttle.begin("ada", "1.2.3.4").unwrap();
            throttle.abandoned(&attempt);
        }
        throttle.begin("ada", "1.2.3.4").unwrap();
        throttle.begin("ada", "1.2.3.4").unwrap();
        assert_eq!(
            throttle.begin("ada", "1.2.3.4").unwrap_err(),
            Refusal::Address,
            "only the checked attempts counted"
        );
    }

    #[test]
    fn successful_sign_ins_do_not_use_up_an_address() {
        let throttle =
            LoginThrottle::new(5, Duration::from_secs(60), SLOWDOWN).with_address_limit(3);
        for i in 0..50 {
            let attempt = throttle
                .begin(&format!("colleague{i}"), "10.1.1.1")
                .unwrap();
            throttle.succeeded(&attempt);
        }
        assert!(throttle.begin("late", "10.1.1.1").is_ok());
    }

    #[test]
    fn memory_is_capped_and_the_oldest_evicted() {
        let throttle = LoginThrottle::with_capacity(5, Duration::from_secs(600), SLOWDOWN, 1000)
            .with_address_limit(u32::MAX);
        let long = "x".repeat(4096);
        for i in 0..10_000 {
            let _ = throttle.begin(&format!("{long}{i}"), "1.2.3.4");
        }
        assert!(throttle.tracked() <= 3000, "{}", throttle.tracked());
        // The newest are kept: the last user is still counted.
        let last = format!("{long}9999");
        for _ in 0..4 {
            throttle.begin(&last, "1.2.3.4").unwrap();
        }
        assert_eq!(
            throttle.begin(&last, "1.2.3.4").unwrap_err(),
            Refusal::Address
        );
    }
}
