//! The port the server implements for the console's server functions.

use async_trait::async_trait;

use crate::dto::{RunPage, RunQuery, Viewer};

/// A failure the console can show: an HTTP-like status and a human message.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConsoleError {
    pub status: u16,
    pub message: String,
}

#[async_trait]
pub trait ConsolePort: Send + Sync + 'static {
    async fn list_runs(
        &self,
        viewer: Option<&Viewer>,
        query: RunQuery,
    ) -> Result<RunPage, ConsoleError>;
}
