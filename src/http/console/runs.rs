//! The server's implementation of the console's port: server functions call the
//! same service layer as the JSON API, where every permission is checked.

use async_trait::async_trait;

use app::dto::{
    AuditPage, BlockedLanes, BreakerClosed, BreakerList, BulkOutcome, BulkPreview, ConfigNotice,
    DeliveryPage, DeliveryQuery, DeliveryView, FailureGroups, OverviewQuery, OverviewView,
    RetryCommand, RunPage, RunQuery, RunView, SearchAnswer, SkipCommand,
};

use app::port::{ConsoleError, ConsolePort};
use vocab::Viewer;

use std::sync::Arc;

use crate::config::Settings;
use crate::http::error::console_error;
use crate::service::deliveries::{DeliveryService, RetryRequest};
use crate::service::destinations::DestinationService;
use crate::service::runs::RunService;
use crate::service::ServiceError;

/// Audit rows per console page.
const AUDIT_PAGE: u32 = 50;

pub struct Console {
    runs: RunService,
    deliveries: DeliveryService,
    destinations: Option<DestinationService>,
    settings: Arc<Settings>,
}

impl Console {
    pub fn new(runs: RunService, deliveries: DeliveryService, settings: Arc<Settings>) -> Self {
        Console {
            runs,
            deliveries,
            destinations: None,
            settings,
        }
    }

    /// The destination breakers the Deliveries page shows.
    pub fn with_destinations(mut self, destinations: DestinationService) -> Self {
        self.destinations = Some(destinations);
        self
    }

    fn destinations(&self) -> Result<&DestinationService, ConsoleError> {
        self.destinations.as_ref().ok_or_else(|| ConsoleError {
            status: 501,
            message: "destination health is not available here".into(),
        })
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

    async fn run_view(&self, viewer: Option<&Viewer>, id: &str) -> Result<RunView, ConsoleError> {
        self.runs.view(viewer, id).await.map_err(console_error)
    }

    async fn config_notices(
        &self,
        viewer: Option<&Viewer>,
    ) -> Result<Vec<ConfigNotice>, ConsoleError> {
        if viewer.is_none() {
            return Err(console_error(ServiceError::Unauthenticated));
        }
        Ok(crate::config_check::config_notices(&self.settings))
    }

    async fn retry_delivery(
        &self,
        viewer: Option<&Viewer>,
        command: RetryCommand,
    ) -> Result<DeliveryView, ConsoleError> {
        let request = RetryRequest {
            kind: command.kind,
            expected_status: command.expected_status,
            expected_cycle: Some(command.expected_cycle),
            allow_uncertain: command.allow_uncertain,
        };
        self.deliveries
            .retry(viewer, &command.event_id, request)
            .await
            .map_err(console_error)
    }

    async fn list_deliveries(
        &self,
        viewer: Option<&Viewer>,
        query: DeliveryQuery,
    ) -> Result<DeliveryPage, ConsoleError> {
        self.deliveries
            .list(viewer, query)
            .await
            .map_err(console_error)
    }

    async fn failure_groups(&self, viewer: Option<&Viewer>) -> Result<FailureGroups, ConsoleError> {
        self.deliveries
            .failure_groups(viewer)
            .await
            .map_err(console_error)
    }

    async fn overview(
        &self,
        viewer: Option<&Viewer>,
        query: OverviewQuery,
    ) -> Result<OverviewView, ConsoleError> {
        self.deliveries
            .overview(viewer, query)
            .await
            .map_err(console_error)
    }

    async fn bulk_preview(
        &self,
        viewer: Option<&Viewer>,
        query: DeliveryQuery,
    ) -> Result<BulkPreview, ConsoleError> {
        self.deliveries
            .bulk_preview(viewer, query)
            .await
            .map_err(console_error)
    }

    async fn bulk_retry(
        &self,
        viewer: Option<&Viewer>,
        query: DeliveryQuery,
        allow_uncertain: bool,
    ) -> Result<BulkOutcome, ConsoleError> {
        self.deliveries
            .bulk_retry(viewer, query, allow_uncertain)
            .await
            .map_err(console_error)
    }

    async fn audit(
        &self,
        viewer: Option<&Viewer>,
        after: Option<String>,
    ) -> Result<AuditPage, ConsoleError> {
        self.deliveries
            .audit(viewer, after, AUDIT_PAGE)
            .await
            .map_err(console_error)
    }

    async fn find_by_id(
        &self,
        viewer: Option<&Viewer>,
        q: String,
    ) -> Result<SearchAnswer, ConsoleError> {
        self.deliveries
            .find_by_id(viewer, &q)
            .await
            .map_err(console_error)
    }

    async fn breakers(&self, viewer: Option<&Viewer>) -> Result<BreakerList, ConsoleError> {
        self.destinations()?
            .breakers(viewer)
            .await
            .map_err(console_error)
    }

    async fn close_breaker(
        &self,
        viewer: Option<&Viewer>,
        destination: String,
    ) -> Result<BreakerClosed, ConsoleError> {
        self.destinations()?
            .close(viewer, &destination)
            .await
            .map_err(console_error)
    }

    async fn blocked_lanes(&self, viewer: Option<&Viewer>) -> Result<BlockedLanes, ConsoleError> {
        self.deliveries
            .blocked_lanes(viewer)
            .await
            .map_err(console_error)
    }

    async fn skip_delivery(
        &self,
        viewer: Option<&Viewer>,
        event_id: String,
        command: SkipCommand,
    ) -> Result<DeliveryView, ConsoleError> {
        self.deliveries
            .skip(viewer, &event_id, command)
            .await
            .map_err(console_error)
    }
}
