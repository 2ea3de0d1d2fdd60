//! A fixed set of threads for password hashing.
//!
//! argon2id takes ~19 MiB and a core per hash. On tokio's blocking pool, a burst of
//! sign-ins spreads hashes over hundreds of threads, and each thread's allocator
//! arena keeps its 19 MiB afterwards (hundreds of MiB resident). A few dedicated
//! threads bound both the CPU and the memory hashing can take; callers queue.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug, thiserror::Error)]
#[error("the password hashing threads are gone")]
pub struct PoolGone;

#[derive(Clone)]
pub struct HashingPool {
    jobs: mpsc::Sender<Job>,
}

impl HashingPool {
    /// Starts `threads` hashing threads (at least one); they end with the last handle.
    pub fn new(threads: usize) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
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
    ) -> Result<T, PoolGone> {
        let (done, result) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = done.send(work());
            }))
            .map_err(|_| PoolGone)?;
        result.await.map_err(|_| PoolGone)
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
}
