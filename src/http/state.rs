//! What every handler can reach.

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;

use crate::config::Settings;
use crate::outbox::metrics::Metrics;
use crate::service::accounts::AccountService;
use crate::service::approvals::ApprovalService;
use crate::service::deliveries::DeliveryService;
use crate::service::records::RecordService;
use crate::service::runs::RunService;
use crate::store::SqlStore;

/// The services and settings of one `herald serve`.
#[derive(Clone)]
pub struct AppState {
    pub leptos: LeptosOptions,
    pub store: SqlStore,
    pub runs: RunService,
    pub deliveries: DeliveryService,
    /// Destination breakers of every store (the approvals database's too, apart).
    pub destinations: crate::service::destinations::DestinationService,
    pub accounts: AccountService,
    pub records: RecordService,
    pub approvals: ApprovalService,
    pub metrics: Arc<Metrics>,
    pub settings: Arc<Settings>,
    /// The outbox stores' availability as their workers see it (`/readyz`).
    pub store_health: Vec<Arc<crate::outbox::availability::StoreHealth>>,
    /// Places for the console's live-update streams (`live_max_streams`).
    pub live_streams: Arc<tokio::sync::Semaphore>,
    /// Places for the producer API's requests (`api_max_requests_in_flight`).
    pub admission: super::admission::Admission,
    /// Cancelled when the server starts to stop: open live streams end then, so
    /// a graceful shutdown does not wait out their lifetime.
    pub stopping: tokio_util::sync::CancellationToken,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}
