//! Group commit: concurrent write units share one transaction and one durable
//! COMMIT (issue 9).
//!
//! A unit is a closure that does its writes in a [`WriteTx`]. One writer task takes
//! what is queued (at most [`GroupLimits::max_units`], waiting at most
//! [`GroupLimits::linger`] for more), opens one write transaction (`BEGIN
//! IMMEDIATE` on SQLite) and runs each unit inside its own `SAVEPOINT`: a unit that
//! returns an error is rolled back to its savepoint alone, and the others go on.
//! Every caller is answered only after the COMMIT has returned, so an `Ok` still
//! means "durable" (`synchronous=FULL` on SQLite); a failed COMMIT, or a failure
//! of the group's own statements, fails every unit of the group and none of them
//! is acknowledged. Under low load a group is one unit and nothing waits: groups
//! grow only while the previous COMMIT is in flight.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::error::StoreError;
use super::fault::StoreFault;
use super::ports::{Transactions, WriteTx};
use super::sql::SqlStore;

/// The future a unit's work returns; it borrows the group's transaction.
pub type UnitFuture<'a, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'a>>;

/// How large a group may grow and how long its first unit may wait for company.
#[derive(Clone, Copy, Debug)]
pub struct GroupLimits {
    pub max_units: usize,
    pub linger: Duration,
}

impl Default for GroupLimits {
    fn default() -> Self {
        GroupLimits {
            max_units: 256,
            linger: Duration::ZERO,
        }
    }
}

const SAVEPOINT: &str = "SAVEPOINT herald_unit";
const ROLLBACK_TO: &str = "ROLLBACK TO SAVEPOINT herald_unit";

/// Runs a unit's work in the group's transaction; `true` when it succeeded.
type Work = Box<
    dyn for<'a> FnOnce(&'a mut WriteTx) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> + Send,
>;
/// Answers a unit's caller with the group's outcome (`Err`: why it did not commit).
type Answer = Box<dyn FnOnce(Result<(), GroupFailure>) + Send>;

/// Why a group did not commit, and what class of failure that was.
#[derive(Clone, Debug)]
struct GroupFailure {
    why: String,
    fault: StoreFault,
}

impl GroupFailure {
    fn stopped(why: &str) -> Self {
        GroupFailure {
            why: why.to_string(),
            fault: StoreFault::Other,
        }
    }

    fn into_error(self) -> StoreError {
        StoreError::GroupCommit {
            why: self.why,
            fault: self.fault,
        }
    }
}

struct Unit {
    work: Work,
    answer: Answer,
}

/// The producers' side of one store's group commit (cheap to clone).
#[derive(Clone)]
pub struct GroupCommitter {
    queue: mpsc::Sender<Unit>,
}

impl std::fmt::Debug for GroupCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupCommitter")
    }
}

impl GroupCommitter {
    /// Starts the writer task on `store` (needs a Tokio runtime). The writer ends
    /// when every handle is dropped.
    pub fn start(store: SqlStore, limits: GroupLimits) -> Self {
        let limits = GroupLimits {
            max_units: limits.max_units.max(1),
            ..limits
        };
        // Room for a few groups: beyond that, producers wait (backpressure).
        let (queue, units) = mpsc::channel(limits.max_units * 4);
        tokio::spawn(writer(store, limits, units));
        GroupCommitter { queue }
    }

    /// Runs `work` in the next group and returns its result once the group has
    /// committed. An `Err` from `work` rolls back only `work`'s writes; a group
    /// that fails to commit fails every unit with [`StoreError::GroupCommit`].
    pub async fn run<T, E, F>(&self, work: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: for<'a> FnOnce(&'a mut WriteTx) -> UnitFuture<'a, T, E> + Send + 'static,
    {
        let slot: Arc<Mutex<Option<Result<T, E>>>> = Arc::new(Mutex::new(None));
        let (reply, replied) = oneshot::channel::<Result<T, E>>();
        let filled = slot.clone();
        let work: Work = Box::new(move |tx| {
            Box::pin(async move {
                let result = work(tx).await;
                let ok = result.is_ok();
                *filled.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
                ok
            })
        });
        let answer: Answer = Box::new(move |group| {
            let result = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            let _ = reply.send(match (result, group) {
                // Rolled back alone: its own error, whatever became of the group.
                (Some(Err(err)), _) => Err(err),
                (Some(Ok(value)), Ok(())) => Ok(value),
                (Some(Ok(_)), Err(failure)) | (None, Err(failure)) => {
                    Err(E::from(failure.into_error()))
                }
                (None, Ok(())) => Err(E::from(
                    GroupFailure::stopped("the unit was not run").into_error(),
                )),
            });
        });
        self.queue
            .send(Unit { work, answer })
            .await
            .map_err(|_| E::from(GroupFailure::stopped("the writer has stopped").into_error()))?;
        replied.await.map_err(|_| {
            E::from(
                GroupFailure::stopped("the group was abandoned before it committed").into_error(),
            )
        })?
    }
}

async fn writer(store: SqlStore, limits: GroupLimits, mut units: mpsc::Receiver<Unit>) {
    while let Some(first) = units.recv().await {
        let mut group = vec![first];
        let deadline = tokio::time::Instant::now() + limits.linger;
        while group.len() < limits.max_units {
            match units.try_recv() {
                Ok(unit) => group.push(unit),
                Err(mpsc::error::TryRecvError::Empty) if !limits.linger.is_zero() => {
                    match tokio::time::timeout_at(deadline, units.recv()).await {
                        Ok(Some(unit)) => group.push(unit),
                        _ => break,
                    }
                }
                Err(_) => break,
            }
        }
        // In a task of its own: a unit that panics abandons its group (every
        // caller of it gets an error), not the writer.
        let _ = tokio::spawn(commit_group(store.clone(), group)).await;
    }
}

async fn commit_group(store: SqlStore, group: Vec<Unit>) {
    let mut answers = Vec::with_capacity(group.len());
    let mut works = Vec::with_capacity(group.len());
    for unit in group {
        answers.push(unit.answer);
        works.push(unit.work);
    }
    let outcome = run_units(&store, works).await.map_err(|err| {
        tracing::warn!(error = %err, units = answers.len(), "a group commit failed; none of its units is acknowledged");
        // The class travels with it: a locked or lost store is an outage to every
        // caller of the group, not an anonymous 500.
        GroupFailure {
            why: err.to_string(),
            fault: err.fault(),
        }
    });
    for answer in answers {
        answer(outcome.clone());
    }
}

async fn run_units(store: &SqlStore, works: Vec<Work>) -> Result<(), StoreError> {
    let mut tx = store.begin_write().await?;
    // Savepoints nest and are never released: COMMIT ends them all, and a
    // statement saved is a round trip to the database's thread saved, which is
    // what a unit costs. A failed unit rolls back to its own (the innermost)
    // savepoint, which stays open and is where the next unit starts. A group is at
    // most `max_units` deep.
    let mut open = false;
    for work in works {
        if !open {
            sqlx::query(SAVEPOINT).execute(&mut *tx).await?;
        }
        if work(&mut tx).await {
            open = false;
        } else {
            sqlx::query(ROLLBACK_TO).execute(&mut *tx).await?;
            open = true;
        }
    }
    tx.commit().await?;
    Ok(())
}
