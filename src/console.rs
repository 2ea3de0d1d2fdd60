//! The server's implementation of the console's port: server functions call the
//! same service layer as the JSON API.

use async_trait::async_trait;

use app::dto::{RunPage, RunQuery, Viewer};
use app::port::{ConsoleError, ConsolePort};

use crate::http::ApiError;
use crate::service::runs::RunService;
use crate::service::ServiceError;

pub struct Console {
    runs: RunService,
}

impl Console {
    pub fn new(runs: RunService) -> Self {
        Console { runs }
    }
}

fn console_error(err: ServiceError) -> ConsoleError {
    let api = ApiError::from(err);
    ConsoleError {
        status: api.status.as_u16(),
        message: api.message,
    }
}

#[async_trait]
impl ConsolePort for Console {
    async fn list_runs(
        &self,
        viewer: Option<&Viewer>,
        query: RunQuery,
    ) -> Result<RunPage, ConsoleError> {
        self.runs.list(viewer, query).await.map_err(console_error)
    }
}
