//! What a run creation writes (issue 9): concurrent creations are batched into
//! one write unit — their new run types in one statement, the runs in a few
//! multi-row inserts — so a batch of a hundred shares one commit. Each caller
//! gets its own run; a store failure fails every creation of the batch.

use std::sync::Arc;

use super::ServiceError;
use crate::batcher::{BatchLimits, Batcher};
use crate::outbox::Outbox;
use crate::store::ports::{NewRun, Run, RunRepository};
use crate::store::{StoreError, StoreFault};

pub type CreationOutcome = Result<Run, ServiceError>;

/// Writes run creations, batched.
#[derive(Clone)]
pub struct CreationWriter {
    repo: Arc<dyn RunRepository>,
    outbox: Outbox,
}

impl CreationWriter {
    pub fn new(repo: Arc<dyn RunRepository>, outbox: Outbox) -> Self {
        CreationWriter { repo, outbox }
    }

    /// Starts the batcher that feeds this writer (needs a Tokio runtime).
    pub fn start(self) -> Batcher<NewRun, CreationOutcome> {
        Batcher::start(BatchLimits::STORE_WRITES, move |runs| {
            let writer = self.clone();
            Box::pin(async move { writer.write_batch(runs).await })
        })
    }

    async fn write_batch(self, runs: Vec<NewRun>) -> Vec<CreationOutcome> {
        let n = runs.len();
        match self.write_unit(runs.clone()).await {
            Ok(created) if created.len() == n => created.into_iter().map(Ok).collect(),
            Ok(_) => (0..n)
                .map(|_| Err(ServiceError::Internal("a created run was lost".into())))
                .collect(),
            // A lost race is about one row: each creation is tried again alone.
            Err(err) if n > 1 && err.fault() == StoreFault::Conflict => {
                let mut outcomes = Vec::with_capacity(n);
                for run in runs {
                    outcomes.push(match self.write_unit(vec![run]).await {
                        Ok(mut one) => one
                            .pop()
                            .ok_or_else(|| ServiceError::Internal("a created run was lost".into())),
                        Err(err) => Err(err.into()),
                    });
                }
                outcomes
            }
            Err(err) => {
                let err = ServiceError::from(err);
                (0..n).map(|_| Err(err.clone())).collect()
            }
        }
    }

    async fn write_unit(&self, runs: Vec<NewRun>) -> Result<Vec<Run>, StoreError> {
        let repo = self.repo.clone();
        self.outbox
            .write(move |tx| Box::pin(async move { repo.create_runs_in(tx, &runs).await }))
            .await
    }
}
