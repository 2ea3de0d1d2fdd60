//! Write units: a producer's writes as one unit that commits alone or in a
//! shared group. Run creations and the outbox's producers both go through it;
//! the outbox adds only the wake-up after commit.

use std::sync::Arc;

use super::error::StoreError;
use super::group_commit::{GroupCommitter, UnitFuture};
use super::ports::{Transactions, WriteTx};

/// Runs write units on one store (cheap to clone).
#[derive(Clone)]
pub struct WriteUnits {
    store: Arc<dyn Transactions>,
    /// Set where write units share transactions (`store::group_commit`).
    group: Option<GroupCommitter>,
}

impl WriteUnits {
    pub fn new(store: Arc<dyn Transactions>) -> Self {
        WriteUnits { store, group: None }
    }

    /// Runs units through `group` (same store as `store`).
    pub fn with_group_commit(mut self, group: GroupCommitter) -> Self {
        self.group = Some(group);
        self
    }

    /// Runs `work` in a write transaction and returns once that transaction has
    /// committed: shared with other units under group commit (an `Err` rolls back
    /// only this unit), else a transaction of its own.
    pub async fn run<T, E, F>(&self, work: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: for<'a> FnOnce(&'a mut WriteTx) -> UnitFuture<'a, T, E> + Send + 'static,
    {
        let value = match &self.group {
            Some(group) => group.run(work).await?,
            None => {
                let mut tx = self.store.begin_write().await?;
                let value = work(&mut tx).await?;
                tx.commit().await.map_err(StoreError::from)?;
                value
            }
        };
        crate::changes::notify();
        Ok(value)
    }
}
