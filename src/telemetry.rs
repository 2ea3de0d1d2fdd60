//! Logs and OpenTelemetry traces (issue 24). Traces are off unless
//! `otlp_endpoint` is set; then the spans Herald makes under [`TRACE_TARGET`] (an
//! API request, a transition's commit, each delivery's claim, send and settle)
//! are exported as OTLP/HTTP protobuf by a batch processor on its own thread,
//! behind a bounded queue: a collector that is slow or down costs dropped spans
//! (counted), never a slower delivery.
//!
//! A W3C `traceparent` on an incoming request is the parent of its span; the
//! request's context is frozen with every event it owes ([`current_traceparent`]
//! into `NewEvent::trace_parent`), so the delivery, maybe minutes and a restart
//! later, continues the producer's trace, and the webhook carries its own
//! `traceparent` for the receiver to join. Event ids are span attributes, never
//! metric labels; payloads and secrets never become attributes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::LogFormat;

/// The target of the spans that become traces. Logs leave them out, so a
/// log line looks the same with tracing on or off, and with tracing off they
/// are never even built.
pub const TRACE_TARGET: &str = "herald_trace";

/// The W3C header naming a span's trace and parent.
pub const TRACEPARENT: &str = "traceparent";

/// The most spans waiting for export; past it new spans are dropped.
const MAX_QUEUED_SPANS: usize = 4096;
/// How long one export may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// What `serve` needs to export traces.
#[derive(Clone, Debug)]
pub struct TraceSettings {
    /// The collector's OTLP/HTTP traces URL (a bare origin gets `/v1/traces`).
    pub endpoint: String,
    /// The share of new traces kept, 0 to 1 (a request carrying a sampled
    /// `traceparent` is kept whatever it is).
    pub sampling: f64,
}

impl TraceSettings {
    /// A bad endpoint or sampling ratio, named.
    pub fn check(&self) -> Result<(), TelemetryError> {
        if !(0.0..=1.0).contains(&self.sampling) {
            return Err(TelemetryError::Sampling(self.sampling));
        }
        traces_url(&self.endpoint).map(|_| ())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("otlp_endpoint: {0}")]
    Endpoint(String),
    #[error("otlp_sampling: must be between 0 and 1, not {0}")]
    Sampling(f64),
}

impl TelemetryError {
    /// The setting to fix.
    pub fn setting(&self) -> &'static str {
        match self {
            TelemetryError::Endpoint(_) => "otlp_endpoint",
            TelemetryError::Sampling(_) => "otlp_sampling",
        }
    }
}

/// Spans lost on the way to the collector, in failed exports (the batch
/// processor's own queue-full drops are logged by it once, with a total at
/// exit). One process exports through one pipeline, so one count.
static DROPPED_SPANS: AtomicU64 = AtomicU64::new(0);

/// Spans lost so far (`herald_trace_spans_dropped_total`).
pub fn dropped_spans() -> u64 {
    DROPPED_SPANS.load(Ordering::Relaxed)
}

/// Traces being exported; flushed and stopped by [`Tracing::shutdown`].
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Exports what is queued (bounded by the export timeout) and stops.
    pub fn shutdown(self) {
        let _ = self.provider.shutdown();
    }
}

/// Installs the log subscriber (`RUST_LOG` filters it) and, with `traces`, the
/// OpenTelemetry layer; returns the exporter to shut down at exit.
pub fn init(
    format: LogFormat,
    traces: Option<&TraceSettings>,
) -> Result<Option<Tracing>, TelemetryError> {
    let logs_filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"))
        .add_directive(
            format!("{TRACE_TARGET}=off")
                .parse()
                .expect("a static directive"),
        );
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.with_filter(logs_filter).boxed(),
        LogFormat::Json => logs.json().with_filter(logs_filter).boxed(),
    };
    let Some(traces) = traces else {
        let _ = tracing_subscriber::registry().with(logs).try_init();
        return Ok(None);
    };
    let provider = provider(traces)?;
    // No source locations, thread names or busy/idle timings: attributes
    // nobody searches by, paid for on every span.
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("herald"))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target(TRACE_TARGET, tracing::Level::INFO),
        );
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
    Ok(Some(Tracing { provider }))
}

fn provider(traces: &TraceSettings) -> Result<SdkTracerProvider, TelemetryError> {
    traces.check()?;
    let endpoint = traces_url(&traces.endpoint)?;
    // The exporter's HTTP client is built here, before serve builds its own.
    crate::channels::install_crypto_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|err| TelemetryError::Endpoint(err.to_string()))?;
    let exporter = CountingExporter { inner: exporter };
    let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            opentelemetry_sdk::trace::BatchConfigBuilder::default()
                .with_max_queue_size(MAX_QUEUED_SPANS)
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            traces.sampling,
        ))))
        .with_resource(Resource::builder().with_service_name("herald").build())
        .build();
    Ok(provider)
}

/// `http://collector:4318` → `http://collector:4318/v1/traces`; a URL with a
/// path is taken as given.
fn traces_url(endpoint: &str) -> Result<String, TelemetryError> {
    let url = url::Url::parse(endpoint)
        .map_err(|err| TelemetryError::Endpoint(format!("{endpoint:?} is not a URL: {err}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(TelemetryError::Endpoint(format!(
            "{endpoint:?} must be an http or https URL"
        )));
    }
    if url.path() == "/" {
        Ok(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
    } else {
        Ok(endpoint.to_string())
    }
}

/// The OTLP exporter, counting the spans of every export that failed.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        if result.is_err() {
            DROPPED_SPANS.fetch_add(spans, Ordering::Relaxed);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

/// One header's value, as the propagator reads and writes it.
struct OneHeader<'a> {
    name: &'static str,
    value: Option<&'a str>,
}

impl Extractor for OneHeader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == self.name).then_some(self.value).flatten()
    }

    fn keys(&self) -> Vec<&str> {
        vec![self.name]
    }
}

struct Written(Option<String>);

impl Injector for Written {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACEPARENT {
            self.0 = Some(value);
        }
    }
}

/// The context a `traceparent` names (an empty one if it is absent or malformed).
pub fn context_of(traceparent: Option<&str>) -> Context {
    TraceContextPropagator::new().extract(&OneHeader {
        name: TRACEPARENT,
        value: traceparent,
    })
}

/// Makes `span` a child of the caller's span named by `traceparent`, if any.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    let parent = context_of(traceparent);
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// Links `span` to the span `traceparent` names (a batch serving many traces).
pub fn link_to(span: &tracing::Span, traceparent: Option<&str>) {
    let context = context_of(traceparent);
    let linked = context.span().span_context().clone();
    if linked.is_valid() {
        span.add_link(linked);
    }
}

/// The `traceparent` of the innermost traced span being run (traces on): what
/// an event freezes and a webhook carries. Read from the OpenTelemetry context
/// the layer activates on entering a traced span, since the current `tracing`
/// span may be an untraced one inside it (a log-only span).
pub fn current_traceparent() -> Option<String> {
    let context = Context::current();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut written = Written(None);
    TraceContextPropagator::new().inject_context(&context, &mut written);
    written.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_origin_gets_the_traces_path_and_bad_endpoints_are_refused() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example/custom/v1/traces").unwrap(),
            "https://otel.example/custom/v1/traces"
        );
        assert!(traces_url("collector:4318").is_err());
        assert!(traces_url("not a url").is_err());
    }

    #[test]
    fn a_traceparent_is_read_back_as_the_same_context() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = context_of(Some(header));
        let span = context.span();
        let span = span.span_context();
        assert!(span.is_valid());
        assert_eq!(
            span.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(!context_of(Some("00-garbage"))
            .span()
            .span_context()
            .is_valid());
        assert!(!context_of(None).span().span_context().is_valid());
    }
}
