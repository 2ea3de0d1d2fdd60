//! Coalesces concurrent requests into batches (issue 9).
//!
//! Callers [`Batcher::submit`] one item each and wait for its own answer. One
//! task takes what is queued (at most [`BatchLimits::max_items`]) and hands it to
//! the batch handler, with at most [`BatchLimits::max_in_flight`] batches running
//! at once: while they run, new items queue up and become the next batch. Under
//! low load a batch is one item and nothing waits for company; under load a batch
//! costs a few statements instead of a few per item.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

/// How large a batch may grow and how many run at once.
#[derive(Clone, Copy, Debug)]
pub struct BatchLimits {
    pub max_items: usize,
    pub max_in_flight: usize,
}

impl BatchLimits {
    /// For batches that are one write unit of the store: large enough that a
    /// batch costs a few statements instead of a few per item; several at once so
    /// the next fills while one commits.
    pub const STORE_WRITES: BatchLimits = BatchLimits {
        max_items: 256,
        max_in_flight: 4,
    };
}

/// The item's batch never answered: the handler panicked or the batcher stopped.
#[derive(Debug, thiserror::Error)]
#[error("the batch this request was part of ended without an answer")]
pub struct BatchLost;

/// What a batch handler returns: one output per item, in the items' order.
pub type BatchFuture<O> = Pin<Box<dyn Future<Output = Vec<O>> + Send>>;

struct Queued<I, O> {
    item: I,
    answer: oneshot::Sender<O>,
}

/// The submitting side (cheap to clone). The batching task ends when every
/// handle is dropped.
pub struct Batcher<I, O> {
    queue: mpsc::Sender<Queued<I, O>>,
    /// The most items one batch has held so far (0 before the first batch).
    largest: Arc<AtomicUsize>,
}

impl<I, O> Clone for Batcher<I, O> {
    fn clone(&self) -> Self {
        Batcher {
            queue: self.queue.clone(),
            largest: self.largest.clone(),
        }
    }
}

impl<I, O> std::fmt::Debug for Batcher<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Batcher")
    }
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the batching task (needs a Tokio runtime).
    pub fn start<H>(limits: BatchLimits, handler: H) -> Self
    where
        H: Fn(Vec<I>) -> BatchFuture<O> + Send + Sync + 'static,
    {
        let limits = BatchLimits {
            max_items: limits.max_items.max(1),
            max_in_flight: limits.max_in_flight.max(1),
        };
        // Room for a few batches: beyond that, callers wait (backpressure).
        let (queue, items) = mpsc::channel(limits.max_items * (limits.max_in_flight + 2));
        let largest = Arc::new(AtomicUsize::new(0));
        tokio::spawn(batch_loop(
            limits,
            Arc::new(handler),
            items,
            largest.clone(),
        ));
        Batcher { queue, largest }
    }

    /// The most items one batch has held so far: whether batching happened at all.
    pub fn largest_batch(&self) -> usize {
        self.largest.load(Ordering::Relaxed)
    }

    /// Queues `item` and returns its output once its batch is done.
    pub async fn submit(&self, item: I) -> Result<O, BatchLost> {
        let (answer, answered) = oneshot::channel();
        self.queue
            .send(Queued { item, answer })
            .await
            .map_err(|_| BatchLost)?;
        answered.await.map_err(|_| BatchLost)
    }
}

async fn batch_loop<I, O, H>(
    limits: BatchLimits,
    handler: Arc<H>,
    mut items: mpsc::Receiver<Queued<I, O>>,
    largest: Arc<AtomicUsize>,
) where
    I: Send + 'static,
    O: Send + 'static,
    H: Fn(Vec<I>) -> BatchFuture<O> + Send + Sync + 'static,
{
    let running = Arc::new(Semaphore::new(limits.max_in_flight));
    loop {
        // A free place first, then the items: while every place is taken, the
        // queue fills up and the next batch is larger.
        let Ok(place) = running.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = items.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < limits.max_items {
            match items.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        largest.fetch_max(batch.len(), Ordering::Relaxed);
        let handler = handler.clone();
        tokio::spawn(async move {
            let (inputs, answers): (Vec<I>, Vec<oneshot::Sender<O>>) =
                batch.into_iter().map(|q| (q.item, q.answer)).unzip();
            // Should the handler panic, the answers are dropped: every caller of
            // this batch gets `BatchLost`, and the loop goes on.
            let outputs = handler(inputs).await;
            for (answer, output) in answers.into_iter().zip(outputs) {
                let _ = answer.send(output);
            }
            drop(place);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn concurrent_items_share_batches_and_get_their_own_answers() {
        let batches = Arc::new(AtomicUsize::new(0));
        let counted = batches.clone();
        let batcher: Batcher<u32, u32> = Batcher::start(
            BatchLimits {
                max_items: 64,
                max_in_flight: 1,
            },
            move |items: Vec<u32>| {
                counted.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    items.into_iter().map(|i| i * 10).collect()
                })
            },
        );
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..200u32 {
            let b = batcher.clone();
            tasks.spawn(async move { (i, b.submit(i).await.unwrap()) });
        }
        while let Some(done) = tasks.join_next().await {
            let (i, out) = done.unwrap();
            assert_eq!(out, i * 10);
        }
        let n = batches.load(Ordering::SeqCst);
        // 200 items, at most 64 a batch: at least 4 batches, and far fewer than 200.
        assert!((4..50).contains(&n), "{n} batches");
    }

    #[tokio::test]
    async fn a_panicking_batch_loses_only_its_own_items() {
        let batcher: Batcher<u32, u32> = Batcher::start(
            BatchLimits {
                max_items: 1,
                max_in_flight: 1,
            },
            |items: Vec<u32>| {
                Box::pin(async move {
                    assert!(items[0] != 7, "seven panics");
                    items
                })
            },
        );
        assert!(batcher.submit(7).await.is_err());
        assert_eq!(batcher.submit(8).await.unwrap(), 8);
    }
}
