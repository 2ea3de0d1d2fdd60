//! Tells other nodes that events were committed, without slowing the commits.
//!
//! A `NOTIFY` inside a producer's transaction makes PostgreSQL take a global lock
//! at COMMIT and hold it across the WAL flush, which serialises every commit and
//! defeats PostgreSQL's own group commit (issue 9). Instead, a commit only marks
//! "something was committed", and one task sends the store's peer notice
//! ([`crate::store::Engine::peer_notice`]) from a pooled connection of its own, at
//! most once per [`MIN_GAP`]: a burst of commits costs one notice.
//!
//! A notice that is lost (the task is between notices when the process dies, or
//! the listener is reconnecting) only delays: every worker also polls.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;

use crate::store::ports::OutboxStore;

/// The least time between two notices.
pub const MIN_GAP: Duration = Duration::from_millis(5);

/// Coalesces commit signals into at most one peer notice per [`MIN_GAP`].
#[derive(Clone)]
pub struct PeerNotifier {
    store: Arc<dyn OutboxStore>,
    pending: Arc<Notify>,
    started: Arc<OnceLock<()>>,
}

impl PeerNotifier {
    pub fn new(store: Arc<dyn OutboxStore>) -> Self {
        PeerNotifier {
            store,
            pending: Arc::new(Notify::new()),
            started: Arc::new(OnceLock::new()),
        }
    }

    /// Marks that events were committed. The sending task starts on the first
    /// signal (inside the caller's Tokio runtime) and ends when the store has no
    /// peer notice or is closed.
    pub fn signal(&self) {
        self.started.get_or_init(|| {
            tokio::spawn(send_notices(self.store.clone(), self.pending.clone()));
        });
        // Stores one permit when the task is busy: many signals, one notice.
        self.pending.notify_one();
    }
}

async fn send_notices(store: Arc<dyn OutboxStore>, pending: Arc<Notify>) {
    loop {
        pending.notified().await;
        match store.notify_peers().await {
            Ok(true) => {}
            Ok(false) => return,
            Err(crate::store::StoreError::Database(sqlx::Error::PoolClosed)) => return,
            Err(err) => tracing::debug!(error = %err, "peer notice not sent; other nodes poll"),
        }
        tokio::time::sleep(MIN_GAP).await;
    }
}
