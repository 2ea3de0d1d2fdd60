//! What a run creation writes (issue 9): concurrent creations are batched into
//! one write unit — their new run types in one statement, the runs in a few
//! multi-row inserts — so a batch of a hundred shares one commit. Each caller
//! gets its own run; a store failure fails every creation of the batch (a lost
//! race only the contested one).

use std::sync::Arc;

use super::{write_batched, ServiceError};
use crate::batcher::{BatchLimits, Batcher};
use crate::store::ports::{NewRun, Run, RunRepository};
use crate::store::{StoreError, WriteUnits};

pub type CreationOutcome = Result<Run, ServiceError>;

/// Writes run creations, batched.
#[derive(Clone)]
pub struct CreationWriter {
    repo: Arc<dyn RunRepository>,
    /// A creation enqueues no events: it runs as a plain write unit (sharing
    /// group commit with transitions) and wakes no workers.
    units: WriteUnits,
}

impl CreationWriter {
    pub fn new(repo: Arc<dyn RunRepository>, units: WriteUnits) -> Self {
        CreationWriter { repo, units }
    }

    /// Starts the batcher that feeds this writer (needs a Tokio runtime).
    pub fn start(self) -> Batcher<NewRun, CreationOutcome> {
        Batcher::start(BatchLimits::STORE_WRITES, move |runs| {
            let writer = self.clone();
            Box::pin(async move { writer.write_batch(runs).await })
        })
    }

    /// One write unit for the whole batch (`service::write_batched`).
    async fn write_batch(self, runs: Vec<NewRun>) -> Vec<CreationOutcome> {
        write_batched(runs, |runs| self.write_unit(runs)).await
    }

    async fn write_unit(&self, runs: Vec<NewRun>) -> Result<Vec<CreationOutcome>, StoreError> {
        let repo = self.repo.clone();
        let created = self
            .units
            .run(move |tx| Box::pin(async move { repo.create_runs_in(tx, &runs).await }))
            .await?;
        Ok(created.into_iter().map(Ok).collect())
    }
}
