//! A fixed set of threads for password hashing.
//!
//! argon2id takes ~19 MiB and a core per hash. On tokio's blocking pool, a burst of
//! sign-ins spreads hashes over hundreds of threads, and each thread's allocator
//! arena keeps its 19 MiB afterwards (hundreds of MiB resident). A few dedicated
//! threads bound both the CPU and the memory hashing can take; callers queue, in a
//! queue of bounded length ([`QUEUE_PER_THREAD`] jobs a thread): past it a caller
//! is told at once that hashing is busy, and a queued job whose caller has gone
//! (its request dropped) is never run.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

/// Jobs that may wait per hashing thread (at ~50 ms a hash, about 1.5 s of work).
pub const QUEUE_PER_THREAD: usize = 32;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PoolError {
    #[error("the password hashing threads are gone")]
    Gone,
    #[error("too many password checks are waiting; retry in a moment")]
    Busy,
}

#[derive(Clone)]
pub struct HashingPool {
    jobs: mpsc::SyncSender<Job>,
}

impl HashingPool {
    /// Starts `threads` hashing threads (at least one); they end with the last handle.
    pub fn new(threads: usize) -> Self {
        Self::with_queue(threads, threads.max(1) * QUEUE_PER_THREAD)
    }

    /// Starts `threads` hashing threads with room for `queue` waiting jobs.
    pub fn with_queue(threads: usize, queue: usize) -> Self {
        let (jobs, queue) = mpsc::sync_channel::<Job>(queue);
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..threads.max(1) {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("herald-hash-{i}"))
                .spawn(move || loop {
                    let job = match queue.lock() {
                        Ok(queue) => queue.recv(),
                        Err(_) => return,
                    };
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                })
                .expect("spawn a password hashing thread");
        }
        HashingPool { jobs }
    }

    /// One thread per core: hashing may use the machine, never more.
    pub fn per_core() -> Self {
        Self::new(std::thread::available_parallelism().map_or(2, |n| n.get()))
    }

    /// Runs `work` on a hashing thread and waits for its result.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PoolError> {
        let (done, result) = tokio::sync::oneshot::channel();
        self.jobs
            .try_send(Box::new(move || {
                // The caller gave up (its client went away): spend nothing on it.
                if done.is_closed() {
                    return;
                }
                let _ = done.send(work());
            }))
            .map_err(|err| match err {
                mpsc::TrySendError::Full(_) => PoolError::Busy,
                mpsc::TrySendError::Disconnected(_) => PoolError::Gone,
            })?;
        result.await.map_err(|_| PoolError::Gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_work_on_its_own_threads_and_returns_the_result() {
        let pool = HashingPool::new(2);
        let name = pool
            .run(|| std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert!(name.unwrap().starts_with("herald-hash-"));
        let sum: u64 = pool.run(|| (1..=10u64).sum()).await.unwrap();
        assert_eq!(sum, 55);
    }

    /// Holds the pool's one thread with a job until `release` is sent, returning
    /// once the thread is running it (not merely queued).
    async fn hold_the_thread(
        pool: &HashingPool,
    ) -> (
        std::sync::mpsc::Sender<()>,
        tokio::task::JoinHandle<Result<bool, PoolError>>,
    ) {
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, running) = std::sync::mpsc::channel::<()>();
        let blocker = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run(move || {
                    let _ = started.send(());
                    held.recv().is_ok()
                })
                .await
            })
        };
        while running.try_recv().is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        (release, blocker)
    }

    #[tokio::test]
    async fn a_full_queue_answers_busy_at_once_and_abandoned_jobs_never_run() {
        let pool = HashingPool::with_queue(1, 2);
        let (release, blocker) = hold_the_thread(&pool).await;
        // The thread is held: fill the queue to its bound.
        while pool.jobs.try_send(Box::new(|| {})).is_ok() {}
        // The queue (2) is full now: the next caller is refused, not queued.
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = ran.clone();
        let refused = pool
            .run(move || counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
            .await;
        assert_eq!(refused, Err(PoolError::Busy));
        release.send(()).unwrap();
        assert_eq!(blocker.await.unwrap(), Ok(true));

        // Let the queue drain (the fillers run first), then hold the thread again.
        while pool.run(|| ()).await == Err(PoolError::Busy) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let (release, blocker) = hold_the_thread(&pool).await;
        // A caller that gives up before its turn: its job is skipped.
        let counted = ran.clone();
        let abandoned = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run(move || counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
                    .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        abandoned.abort();
        let _ = abandoned.await;
        release.send(()).unwrap();
        assert_eq!(blocker.await.unwrap(), Ok(true));
        // Anything queued after the abandoned job ran after it: wait for one.
        assert_eq!(pool.run(|| 7).await, Ok(7));
        assert_eq!(
            ran.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "no abandoned work ran"
        );
    }
}
