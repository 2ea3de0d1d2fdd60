//! A handler that panics mid-attempt, with the real worker on SQLite: it may have
//! sent part of its effect, so a kind that cannot be resent safely ends
//! `uncertain` (never resent automatically); a redeliverable one is retried.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use herald::outbox::handler::{Handler, Outcome, Registry};
use herald::outbox::metrics::Metrics;
use herald::outbox::model::{ClaimedEvent, NewEvent, Source};
use herald::outbox::policy::RetryPolicy;
use herald::outbox::worker::{Worker, WorkerConfig};
use herald::store::ports::OutboxStore;
use herald::store::ports::Transactions;
use herald::store::Engine;
use testkit::{wait_for, TestDb};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use vocab::DeliveryStatus;

/// Panics on every call, counting them.
struct Crashes(AtomicUsize);

#[async_trait]
impl Handler for Crashes {
    async fn handle(&self, _event: &ClaimedEvent) -> Outcome {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("the handler blew up halfway");
    }
}

fn event(id: &str, redeliverable: bool) -> NewEvent {
    NewEvent {
        event_id: id.into(),
        source: Source::Jobs,
        kind: "crashy".into(),
        parent_type: "run".into(),
        parent_id: "run-crash".into(),
        payload: "{}".into(),
        redeliverable,
        max_attempts: 3,
        delay_ms: 0,
        destination: None,
        trace_parent: None,
        lane: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashed_handler_of_a_non_redeliverable_kind_ends_uncertain_and_is_not_resent() {
    let db = TestDb::new(Engine::Sqlite).await;
    let store = db.store().await;
    let mut tx = store.begin_write().await.unwrap();
    store
        .enqueue_in(&mut tx, &event("chat-like", false))
        .await
        .unwrap();
    store
        .enqueue_in(&mut tx, &event("webhook-like", true))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let handler = Arc::new(Crashes(AtomicUsize::new(0)));
    let mut registry = Registry::new();
    let policy = RetryPolicy {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        jitter: false,
        ..RetryPolicy::default()
    };
    registry.register("crashy", Source::Jobs, policy, handler.clone());
    let worker = Worker::new(
        Arc::new(store.clone()),
        Arc::new(registry),
        Arc::new(Metrics::new()),
        WorkerConfig {
            poll_interval: Duration::from_millis(20),
            ..WorkerConfig::default()
        },
        Arc::new(Notify::new()),
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));

    let status = |id: &'static str| {
        let store = store.clone();
        async move { store.get_event(id).await.unwrap().unwrap() }
    };
    wait_for("both settled", Duration::from_secs(10), async || {
        status("chat-like").await.status == DeliveryStatus::Uncertain
            && status("webhook-like").await.status == DeliveryStatus::Failed
    })
    .await;
    stop.cancel();
    running.await.unwrap();

    let chat = status("chat-like").await;
    assert_eq!(chat.attempts, 1, "an uncertain effect is never resent");
    assert!(chat.last_error.unwrap().contains("crashed"));
    let webhook = status("webhook-like").await;
    assert_eq!(webhook.attempts, 3, "a redeliverable kind is retried");
    assert_eq!(handler.0.load(Ordering::SeqCst), 4);
    store.close().await;
    db.drop_db().await;
}
