//! Change notices for the console's live pages (issue 23, item 5): this process
//! says *that* something changed (a producer's write unit committed, a batch of
//! deliveries settled), never *what*: an open page refetches what it shows.
//!
//! Process-wide, like the log subscriber: every store of this process feeds it
//! and every open stream reads it. A notice is a counter bump on a watch channel
//! (readers see the latest, never a queue): one short lock and a wake-up of the
//! waiting streams per write, small beside its COMMIT, and a slow reader holds
//! nothing. Not announced: changes made by another node, and those written
//! outside a write unit (an operator's retry shows when its delivery settles, a
//! lease sweep's when the page's 30-second safety refresh comes); the pages'
//! slow poll catches them.

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
