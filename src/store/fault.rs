//! What kind of failure a store error is. Callers react differently: a lost
//! commit race is retried at once, an unavailable store is backed off from and
//! reported (logs, `/metrics`, `/readyz`, HTTP 503), anything else is a refused
//! statement. The engine-specific codes behind each class live in
//! [`super::engine::fault_of`], which also classes a [`super::StoreError`].

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreFault {
    /// A concurrent transaction won: a deadlock, a serialization failure, or a
    /// Galera certification conflict found at COMMIT (1213). Retry.
    Conflict,
    /// Another session holds the lock the statement waited for, past its timeout:
    /// SQLite busy or locked, MySQL 1205 (lock wait timeout). Not a lost race: the
    /// store is locked out, for as long as that session holds on.
    Locked,
    /// The server cannot be reached: connection refused or lost, the pool timed out.
    Unreachable,
    /// A Galera node outside the primary component refuses reads and writes (1047).
    NoQuorum,
    /// The server answers but refuses work: shutting down, not accepting connections.
    Refusing,
    /// Anything else: a refused statement, a constraint, unreadable data.
    Other,
}

impl StoreFault {
    /// A fixed label for logs and messages (never an error text).
    pub fn as_str(self) -> &'static str {
        match self {
            StoreFault::Conflict => "conflict",
            StoreFault::Locked => "locked",
            StoreFault::Unreachable => "unreachable",
            StoreFault::NoQuorum => "no_quorum",
            StoreFault::Refusing => "refusing",
            StoreFault::Other => "error",
        }
    }

    /// What an API client is told when the store cannot serve its request.
    pub fn explain(self) -> &'static str {
        match self {
            StoreFault::Conflict => {
                "a concurrent transaction won the race (deadlock or Galera certification conflict)"
            }
            StoreFault::Locked => {
                "the database is locked by another session (a lock wait timed out)"
            }
            StoreFault::Unreachable => "the database cannot be reached",
            StoreFault::NoQuorum => {
                "the database node is not part of a primary component (Galera error 1047: quorum lost)"
            }
            StoreFault::Refusing => "the database is refusing connections",
            StoreFault::Other => "the database refused the statement",
        }
    }

    /// Whether the store as a whole is out (as opposed to one statement failing).
    pub fn is_outage(self) -> bool {
        matches!(
            self,
            StoreFault::Locked
                | StoreFault::Unreachable
                | StoreFault::NoQuorum
                | StoreFault::Refusing
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn transport_failures_are_outages() {
        let io = StoreError::Database(sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert_eq!(io.fault(), StoreFault::Unreachable);
        assert!(io.fault().is_outage());
        assert_eq!(
            StoreError::Database(sqlx::Error::PoolTimedOut).fault(),
            StoreFault::Unreachable
        );
        assert_eq!(StoreError::Corrupt("x".into()).fault(), StoreFault::Other);
        assert!(!StoreFault::Conflict.is_outage());
    }
}
