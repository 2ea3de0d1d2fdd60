//! A bound on the producer API's requests in flight (`api_max_requests_in_flight`).
//!
//! When producers send faster than the store commits, every request beyond what
//! it can take waits: an open-loop producer then opens a connection for each
//! one it cannot send on an idle connection, and Herald held thousands of them
//! with their buffers (RSS past 1 GB in the 1,500 runs/s soak on PostgreSQL).
//! Past the bound a request is refused at once, before its body is read or a
//! store is touched: `503` with `Retry-After`, so nothing is recorded and a
//! retry (with its `Idempotency-Key`) is safe. The console, health probes and
//! metrics are outside the bound, so operators can still see and act.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus::{IntCounter, IntGauge};
use tokio::sync::Semaphore;

use super::error::ApiError;
use crate::clock::OncePer;
use crate::outbox::metrics::OnGauge;

/// How often a refusal is logged while refusals go on (the counter has them all).
const REFUSAL_REPORT_EVERY: Duration = Duration::from_secs(60);

/// Places for the producer API's requests; cheap to clone.
#[derive(Clone)]
pub struct Admission {
    /// `None`: no bound (the setting is 0).
    places: Option<Arc<Semaphore>>,
    max: usize,
    gauges: AdmissionGauges,
    report: Arc<OncePer>,
}

/// What the bound reports to Prometheus.
#[derive(Clone)]
pub struct AdmissionGauges {
    pub in_flight: IntGauge,
    pub refused: IntCounter,
}

impl Admission {
    /// At most `max` requests at once; 0 for no bound.
    pub fn new(max: usize, gauges: AdmissionGauges) -> Self {
        let places = (max > 0).then(|| Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))));
        Admission {
            places,
            max,
            gauges,
            report: Arc::new(OncePer::new(REFUSAL_REPORT_EVERY)),
        }
    }

    fn refusal(&self) -> Response {
        self.gauges.refused.inc();
        if self.report.due() {
            tracing::warn!(
                max_requests_in_flight = self.max,
                "API requests refused with 503: every place is taken (api_max_requests_in_flight)"
            );
        }
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            format!(
                "this server is answering as many API requests as it takes at once ({}, api_max_requests_in_flight); \
                 nothing of this request was recorded: retry after Retry-After seconds",
                self.max
            ),
        )
        .into_response()
    }
}

/// Runs `request` if a place is free, else refuses it at once.
pub async fn admit(State(admission): State<Admission>, request: Request, next: Next) -> Response {
    let _place = match &admission.places {
        Some(places) => match places.clone().try_acquire_owned() {
            Ok(place) => Some(place),
            Err(_) => return admission.refusal(),
        },
        None => None,
    };
    // Counted with or without a bound: the gauge says what a bound would meet.
    let _counted = OnGauge::count(&admission.gauges.in_flight);
    next.run(request).await
}
