//! Change notices for the console's live pages (issue 23, item 5): this process
//! says *that* something changed (a write unit committed, a delivery settled, an
//! operator retried), never *what*: an open page refetches what it shows.
//!
//! Process-wide, like the log subscriber: every store of this process feeds it
//! and every open stream reads it. A notice is a counter bump on a watch channel
//! (readers see the latest, never a queue), so the hot paths pay a lock-free-ish
//! increment and a slow reader holds nothing. Changes made by another node are
//! not seen here; the page's slow safety poll catches them.

use std::sync::LazyLock;

use tokio::sync::watch;

static FEED: LazyLock<watch::Sender<u64>> = LazyLock::new(|| watch::channel(0).0);

/// Something this process owns changed.
pub fn notify() {
    FEED.send_modify(|n| *n = n.wrapping_add(1));
}

/// A reader of the notices from now on.
pub fn subscribe() -> watch::Receiver<u64> {
    FEED.subscribe()
}
