//! API tokens recently found valid, kept for a moment so that a producer's every
//! request is not a store lookup (at thousands of requests a second, the lookup
//! was more than half of the statements PostgreSQL ran).
//!
//! Only valid tokens are kept, by the hash of their secret (never the secret).
//! A revocation made through this process empties the cache before it is
//! answered, so the token is refused from the next request here; another node
//! refuses it once its entry expires, at most `ttl` later.

use std::sync::Mutex;
use std::time::Duration;

use moka::sync::Cache;
use vocab::Viewer;

/// More tokens than any deployment hands out; past it the least used go first.
const MAX_ENTRIES: u64 = 10_000;

pub struct TokenCache {
    /// `None`: caching is off (`ttl` 0), every request looks its token up.
    found: Option<Cache<String, Viewer>>,
    /// Revocations so far. A lookup that began before one must not put back the
    /// token it may have revoked: entries are put and the cache emptied under
    /// this lock, so a put compares the count its lookup began with.
    revocations: Mutex<u64>,
}

/// Where a lookup began: what [`TokenCache::keep`] compares against.
#[derive(Clone, Copy, Debug)]
pub struct LookupStart(u64);

impl TokenCache {
    pub fn new(ttl: Duration) -> Self {
        let found = (!ttl.is_zero()).then(|| {
            Cache::builder()
                .max_capacity(MAX_ENTRIES)
                .time_to_live(ttl)
                .build()
        });
        TokenCache {
            found,
            revocations: Mutex::new(0),
        }
    }

    /// The viewer of a token found valid less than `ttl` ago.
    pub fn get(&self, secret_hash: &str) -> Option<Viewer> {
        self.found.as_ref()?.get(secret_hash)
    }

    /// Call before looking a token up in the store.
    pub fn lookup_start(&self) -> LookupStart {
        LookupStart(*self.lock())
    }

    /// Keeps a token the store found valid, unless a revocation came since its
    /// lookup began.
    pub fn keep(&self, start: LookupStart, secret_hash: String, viewer: Viewer) {
        let Some(found) = &self.found else { return };
        let revocations = self.lock();
        if *revocations == start.0 {
            found.insert(secret_hash, viewer);
        }
    }

    /// A token was revoked: forget every kept one (revocations are rare, and the
    /// cache knows tokens by hash, not by id).
    pub fn revoked(&self) {
        let mut revocations = self.lock();
        *revocations += 1;
        if let Some(found) = &self.found {
            found.invalidate_all();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        // The counter is consistent whatever a panicking holder did.
        self.revocations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocab::Role;

    fn viewer() -> Viewer {
        Viewer {
            name: "token:deploy".into(),
            role: Role::Operator,
        }
    }

    #[test]
    fn a_kept_token_is_found_until_its_time_is_up() {
        let ttl = Duration::from_millis(200);
        let cache = TokenCache::new(ttl);
        let start = cache.lookup_start();
        cache.keep(start, "hash-1".into(), viewer());
        let kept = std::time::Instant::now();
        assert_eq!(cache.get("hash-1"), Some(viewer()));
        assert_eq!(cache.get("hash-2"), None);
        while cache.get("hash-1").is_some() {
            assert!(kept.elapsed() < Duration::from_secs(5), "never expired");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(kept.elapsed() >= ttl, "expired after {:?}", kept.elapsed());
    }

    #[test]
    fn a_revocation_forgets_every_token_and_refuses_lookups_that_began_before_it() {
        let cache = TokenCache::new(Duration::from_secs(60));
        cache.keep(cache.lookup_start(), "hash-1".into(), viewer());
        // A lookup that read the token as valid before the revocation committed.
        let before = cache.lookup_start();
        cache.revoked();
        assert_eq!(cache.get("hash-1"), None, "forgotten at once");
        cache.keep(before, "hash-1".into(), viewer());
        assert_eq!(
            cache.get("hash-1"),
            None,
            "not put back by a lookup from before"
        );
        // A lookup begun after the revocation is kept again.
        cache.keep(cache.lookup_start(), "hash-1".into(), viewer());
        assert_eq!(cache.get("hash-1"), Some(viewer()));
    }

    #[test]
    fn a_zero_ttl_keeps_nothing() {
        let cache = TokenCache::new(Duration::ZERO);
        cache.keep(cache.lookup_start(), "hash-1".into(), viewer());
        assert_eq!(cache.get("hash-1"), None);
    }
}
