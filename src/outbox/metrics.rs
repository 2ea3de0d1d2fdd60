//! Prometheus metrics for the outbox. Labels are fixed, low-cardinality sets
//! (source, kind, status, outcome): never an event id, tenant, recipient or payload.

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use super::destinations::HandBack;
use super::model::{OutboxStats, StatsRow, SETTLED_STATES};

pub struct Metrics {
    registry: Registry,
    available: IntGaugeVec,
    durable: IntGaugeVec,
    events: IntGaugeVec,
    oldest_pending_age: GaugeVec,
    blocked_lanes: IntGaugeVec,
    oldest_blocked_lane: GaugeVec,
    expired_leases: IntGaugeVec,
    attempts: IntCounterVec,
    exhausted: IntCounterVec,
    uncertain_sweeps: IntCounterVec,
    handler_latency: HistogramVec,
    replay_attempts: IntCounterVec,
    replay_exhausted: IntCounterVec,
    breaker_open: IntGaugeVec,
    retention_removed: IntCounterVec,
    retention_oldest: GaugeVec,
    retention_catching_up: IntGaugeVec,
    trace_spans_dropped: prometheus::IntCounter,
    claims_handed_back: IntCounterVec,
    leased_at_insert: IntCounterVec,
    claims_leaving_out: IntCounterVec,
    http_connections_open: prometheus::IntGauge,
    http_connections_max: prometheus::IntGauge,
    http_connections_closed_idle: prometheus::IntCounter,
    api_requests_in_flight: prometheus::IntGauge,
    api_requests_in_flight_max: prometheus::IntGauge,
    api_requests_refused: prometheus::IntCounter,
    /// Every family's name, series or not yet (what alert rules and dashboards
    /// may name).
    families: Vec<String>,
    /// The kinds each source holds: its gauges exist from start-up, and a source's
    /// gauges never show another source's kinds, even when both share a database.
    declared:
        std::sync::Mutex<std::collections::BTreeMap<String, std::collections::BTreeSet<String>>>,
}

fn must<T>(result: prometheus::Result<T>) -> T {
    // Metric definitions are static; a failure here is a programming error.
    result.expect("static metric definition")
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let available = must(IntGaugeVec::new(
            Opts::new(
                "herald_outbox_available",
                "1 when the source's durable outbox is reachable, 0 when not",
            ),
            &["source"],
        ));
        // Set once at start-up, for every source: unlike `available`, which is 0
        // until the first report, its 0 is a statement (no durable outbox here).
        let durable = must(IntGaugeVec::new(
            Opts::new(
                "herald_outbox_durable",
                "1 when the source's store keeps a durable outbox, 0 on a store without one (memory://)",
            ),
            &["source"],
        ));
        let events = must(IntGaugeVec::new(
            Opts::new("herald_outbox_events", "Outbox events by status"),
            &["source", "kind", "status"],
        ));
        let oldest_pending_age = must(GaugeVec::new(
            Opts::new(
                "herald_outbox_oldest_pending_age_seconds",
                "Age of the oldest pending event",
            ),
            &["source", "kind"],
        ));
        let blocked_lanes = must(IntGaugeVec::new(
            Opts::new(
                "herald_blocked_lanes",
                "Ordered lanes whose head is failed or uncertain, waiting for an operator",
            ),
            &["source", "kind"],
        ));
        let oldest_blocked_lane = must(GaugeVec::new(
            Opts::new(
                "herald_oldest_blocked_lane_seconds",
                "How long the longest-blocked ordered lane has waited for an operator",
            ),
            &["source", "kind"],
        ));
        let expired_leases = must(IntGaugeVec::new(
            Opts::new(
                "herald_outbox_expired_leases",
                "In-flight events whose lease has expired",
            ),
            &["source", "kind"],
        ));
        let attempts = must(IntCounterVec::new(
            Opts::new(
                "herald_outbox_attempts_total",
                "Delivery attempts by kind and outcome",
            ),
            &["kind", "outcome"],
        ));
        let exhausted = must(IntCounterVec::new(
            Opts::new(
                "herald_outbox_exhausted_total",
                "Events that ended failed (retries exhausted or permanent error)",
            ),
            &["kind"],
        ));
        let uncertain_sweeps = must(IntCounterVec::new(
            Opts::new(
                "herald_outbox_uncertain_total",
                "Events marked uncertain by the maintenance sweep",
            ),
            &["kind"],
        ));
        let handler_latency = must(HistogramVec::new(
            HistogramOpts::new(
                "herald_outbox_handler_duration_seconds",
                "Time a handler took for one attempt",
            )
            .buckets(vec![
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            &["kind"],
        ));
        let replay_attempts = must(IntCounterVec::new(
            Opts::new(
                "herald_approval_action_replay_attempts_total",
                "Approval lifecycle FieldUpdate replay attempts by lifecycle event and outcome",
            ),
            &["lifecycle_event", "outcome"],
        ));
        let replay_exhausted = must(IntCounterVec::new(
            Opts::new(
                "herald_approval_action_replay_exhausted_total",
                "Approval lifecycle FieldUpdate replays that ended failed",
            ),
            &["lifecycle_event"],
        ));
        let breaker_open = must(IntGaugeVec::new(
            Opts::new(
                "herald_destination_breaker_open",
                "1 while a destination of the route has an open (or half-open) circuit breaker",
            ),
            &["route"],
        ));
        let retention_removed = must(IntCounterVec::new(
            Opts::new(
                "herald_retention_rows_removed_total",
                "Rows the retention pass removed (archived first when archive_dir is set), per store and table",
            ),
            &["store", "table"],
        ));
        let retention_oldest = must(GaugeVec::new(
            Opts::new(
                "herald_retention_oldest_retained_seconds",
                "Age of the oldest event retained in a settled state (the first due among them, by its last change), per store",
            ),
            &["store", "status"],
        ));
        let retention_catching_up = must(IntGaugeVec::new(
            Opts::new(
                "herald_retention_catching_up",
                "1 while a retention pass's last full chunk held rows more than two retention.interval past their retention, so it rests 1x the chunk's time between chunks instead of 3x, per store",
            ),
            &["store"],
        ));
        let trace_spans_dropped = must(prometheus::IntCounter::new(
            "herald_trace_spans_dropped_total",
            "Spans that never reached the OpenTelemetry collector (failed exports)",
        ));
        let claims_handed_back = must(IntCounterVec::new(
            Opts::new(
                "herald_outbox_claims_handed_back_total",
                "Claimed events given back unattempted, per kind and reason (no_place: its destination had no free place in time; breaker: its destination's breaker was open).",
            ),
            &["kind", "reason"],
        ));
        let leased_at_insert = must(IntCounterVec::new(
            Opts::new(
                "herald_outbox_leased_at_insert_total",
                "Events leased to this node's worker as they were written and handed to it once committed, with no claim, per kind.",
            ),
            &["kind"],
        ));
        let claims_leaving_out = must(IntCounterVec::new(
            Opts::new(
                "herald_outbox_claims_leaving_out_total",
                "Claims that left busy destinations out, by how far back they looked (full: every due event; window: only events due since a claim that took every other one).",
            ),
            &["walk"],
        ));
        for walk in ["full", "window"] {
            claims_leaving_out.with_label_values(&[walk]);
        }
        let http_connections_open = must(prometheus::IntGauge::new(
            "herald_http_connections_open",
            "Client connections this server holds open.",
        ));
        let http_connections_max = must(prometheus::IntGauge::new(
            "herald_http_connections_max",
            "Client connections this server holds open at most (http_max_connections); past it new ones wait in the listen backlog.",
        ));
        let http_connections_closed_idle = must(prometheus::IntCounter::new(
            "herald_http_connections_closed_idle_total",
            "Client connections closed because nothing was read from or written to them for http_idle_timeout_secs.",
        ));
        let api_requests_in_flight = must(prometheus::IntGauge::new(
            "herald_http_api_requests_in_flight",
            "Producer API requests (/api/v1) being served now.",
        ));
        let api_requests_in_flight_max = must(prometheus::IntGauge::new(
            "herald_http_api_requests_in_flight_max",
            "Producer API requests served at once at most (api_max_requests_in_flight; 0: no bound); past it a request is refused with 503.",
        ));
        let api_requests_refused = must(prometheus::IntCounter::new(
            "herald_http_api_requests_refused_total",
            "Producer API requests refused with 503 because every place was taken (nothing of them was recorded).",
        ));
        let mut families = Vec::new();
        for collector in [
            Box::new(trace_spans_dropped.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(http_connections_open.clone()),
            Box::new(http_connections_max.clone()),
            Box::new(http_connections_closed_idle.clone()),
            Box::new(api_requests_in_flight.clone()),
            Box::new(api_requests_in_flight_max.clone()),
            Box::new(api_requests_refused.clone()),
            Box::new(claims_handed_back.clone()),
            Box::new(leased_at_insert.clone()),
            Box::new(claims_leaving_out.clone()),
            Box::new(breaker_open.clone()),
            Box::new(retention_removed.clone()),
            Box::new(retention_oldest.clone()),
            Box::new(retention_catching_up.clone()),
            Box::new(replay_attempts.clone()),
            Box::new(replay_exhausted.clone()),
            Box::new(available.clone()),
            Box::new(durable.clone()),
            Box::new(events.clone()),
            Box::new(oldest_pending_age.clone()),
            Box::new(blocked_lanes.clone()),
            Box::new(oldest_blocked_lane.clone()),
            Box::new(expired_leases.clone()),
            Box::new(attempts.clone()),
            Box::new(exhausted.clone()),
            Box::new(uncertain_sweeps.clone()),
            Box::new(handler_latency.clone()),
        ] {
            families.extend(collector.desc().iter().map(|d| d.fq_name.clone()));
            must(registry.register(collector));
        }
        Metrics {
            registry,
            available,
            durable,
            events,
            oldest_pending_age,
            blocked_lanes,
            oldest_blocked_lane,
            expired_leases,
            attempts,
            exhausted,
            uncertain_sweeps,
            handler_latency,
            replay_attempts,
            replay_exhausted,
            breaker_open,
            retention_removed,
            retention_oldest,
            retention_catching_up,
            trace_spans_dropped,
            claims_handed_back,
            leased_at_insert,
            claims_leaving_out,
            http_connections_open,
            http_connections_max,
            http_connections_closed_idle,
            api_requests_in_flight,
            api_requests_in_flight_max,
            api_requests_refused,
            families,
            declared: Default::default(),
        }
    }

    /// The gauge of client connections held open (kept by the listener), its
    /// bound set to `max`.
    pub fn http_connections(&self, max: usize) -> prometheus::IntGauge {
        self.http_connections_max.set(max as i64);
        self.http_connections_open.clone()
    }

    /// The count of client connections closed for being idle (kept by the listener).
    pub fn http_connections_closed_idle(&self) -> prometheus::IntCounter {
        self.http_connections_closed_idle.clone()
    }

    /// The producer API bound's gauges, its maximum (`max`, 0 for none) set.
    pub fn api_admission(&self, max: usize) -> crate::http::AdmissionGauges {
        self.api_requests_in_flight_max.set(max as i64);
        crate::http::AdmissionGauges {
            in_flight: self.api_requests_in_flight.clone(),
            refused: self.api_requests_refused.clone(),
        }
    }

    /// The name of every metric family this process exports.
    pub fn families(&self) -> &[String] {
        &self.families
    }

    /// Declares that `source` holds `kind`: every gauge of the pair exists from now
    /// on (at 0 until counted), and the source reports unavailable until its first
    /// maintenance pass.
    pub fn declare(&self, source: &str, kind: &str) {
        self.declared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(source.to_string())
            .or_default()
            .insert(kind.to_string());
        for status in vocab::DeliveryStatus::ALL {
            self.events
                .with_label_values(&[source, kind, status.as_str()])
                .set(0);
        }
        self.oldest_pending_age
            .with_label_values(&[source, kind])
            .set(0.0);
        self.expired_leases
            .with_label_values(&[source, kind])
            .set(0);
        self.blocked_lanes.with_label_values(&[source, kind]).set(0);
        self.oldest_blocked_lane
            .with_label_values(&[source, kind])
            .set(0.0);
        self.available.with_label_values(&[source]);
        // Counters exist at 0 from the start: Prometheus's increase() sees no
        // rise in a series whose first sample is already 1, so an alert on the
        // first failure would never fire.
        self.exhausted.with_label_values(&[kind]);
        self.uncertain_sweeps.with_label_values(&[kind]);
        self.leased_at_insert.with_label_values(&[kind]);
        for reason in HandBack::ALL {
            self.claims_handed_back
                .with_label_values(&[kind, reason.label()]);
        }
        if kind == vocab::approvals::kinds::FIELD_UPDATE {
            self.replay_exhausted
                .with_label_values(&[vocab::approvals::LifecycleEvent::Recall.label()]);
        }
    }

    pub fn record_replay_attempt(&self, lifecycle_event: &str, outcome: &str) {
        self.replay_attempts
            .with_label_values(&[lifecycle_event, outcome])
            .inc();
    }

    pub fn record_replay_exhausted(&self, lifecycle_event: &str) {
        self.replay_exhausted
            .with_label_values(&[lifecycle_event])
            .inc();
    }

    /// `store` names a store by its sources; `table` is one of Herald's tables.
    pub fn record_retention_removed(&self, store: &str, table: &str, rows: u64) {
        self.retention_removed
            .with_label_values(&[store, table])
            .inc_by(rows);
    }

    /// The age (ms) of the oldest retained event per settled state.
    pub fn set_oldest_retained(&self, store: &str, ages: &[(vocab::DeliveryStatus, i64)]) {
        for (status, ms) in ages {
            self.retention_oldest
                .with_label_values(&[store, status.as_str()])
                .set(*ms as f64 / 1000.0);
        }
    }

    /// Whether `store`'s retention pass is catching up (see
    /// [`super::retention`]'s pace).
    pub fn set_retention_catching_up(&self, store: &str, catching_up: bool) {
        self.retention_catching_up
            .with_label_values(&[store])
            .set(i64::from(catching_up));
    }

    /// `route` is a configured route name or `callback`: never a URL or tenant.
    pub fn set_breaker_open(&self, route: &str, open: bool) {
        self.breaker_open
            .with_label_values(&[route])
            .set(i64::from(open));
    }

    /// Whether `source`'s store keeps a durable outbox (said once, at start-up).
    pub fn set_durable(&self, source: &str, durable: bool) {
        self.durable
            .with_label_values(&[source])
            .set(i64::from(durable));
    }

    pub fn set_available(&self, source: &str, available: bool) {
        self.available
            .with_label_values(&[source])
            .set(i64::from(available));
    }

    pub fn record_attempt(&self, kind: &str, outcome: &str, seconds: f64) {
        self.attempts.with_label_values(&[kind, outcome]).inc();
        self.handler_latency
            .with_label_values(&[kind])
            .observe(seconds);
    }

    /// A claimed event given back unattempted, and why.
    pub fn record_handed_back(&self, kind: &str, reason: HandBack) {
        self.claims_handed_back
            .with_label_values(&[kind, reason.label()])
            .inc();
    }

    /// An event leased at its insert and handed to its worker (`hand_off`).
    pub fn record_handed_off(&self, kind: &str) {
        self.leased_at_insert.with_label_values(&[kind]).inc();
    }

    /// Counts a claim that left destinations out: `windowed` when it looked only
    /// at a window of recent events (`outbox::frontier`).
    pub fn record_claim_leaving_out(&self, windowed: bool) {
        let walk = if windowed { "window" } else { "full" };
        self.claims_leaving_out.with_label_values(&[walk]).inc();
    }

    pub fn record_exhausted(&self, kind: &str) {
        self.exhausted.with_label_values(&[kind]).inc();
    }

    pub fn record_swept_uncertain(&self, kind: &str) {
        self.uncertain_sweeps.with_label_values(&[kind]).inc();
    }

    /// Replaces the gauges of one source with fresh counts.
    pub fn refresh(&self, source: &str, stats: &OutboxStats, now_ms: i64) {
        use std::collections::HashMap;
        let mut oldest: HashMap<&str, i64> = HashMap::new();
        let mut expired: HashMap<&str, i64> = HashMap::new();
        let statuses = vocab::DeliveryStatus::ALL;
        let declared = self
            .declared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(source)
            .cloned()
            .unwrap_or_default();
        // Only this source's kinds: declared ones, and any found under this source.
        let kinds: std::collections::BTreeSet<&str> = declared
            .iter()
            .map(String::as_str)
            .chain(
                stats
                    .rows
                    .iter()
                    .filter(|r| r.source == source)
                    .map(|r| r.kind.as_str()),
            )
            .collect();
        // States not counted this time keep their last value.
        let counted = |status: &str| stats.settled_counted || !SETTLED_STATES.contains(&status);
        for kind in &kinds {
            for status in statuses.iter().filter(|s| counted(s.as_str())) {
                self.events
                    .with_label_values(&[source, kind, status.as_str()])
                    .set(0);
            }
        }
        // Settled counts carry no source: they belong to the source declaring the kind.
        let ours = |r: &&StatsRow| {
            r.source == source || (r.source.is_empty() && declared.contains(&r.kind))
        };
        for row in stats.rows.iter().filter(ours) {
            self.events
                .with_label_values(&[source, &row.kind, &row.status])
                .set(row.count);
            if let Some(created) = row.oldest_pending_created_at {
                let entry = oldest.entry(&row.kind).or_insert(created);
                *entry = (*entry).min(created);
            }
            *expired.entry(&row.kind).or_default() += row.expired_leases;
        }
        for kind in kinds {
            let age = oldest
                .get(kind)
                .map(|created| ((now_ms - created).max(0)) as f64 / 1000.0)
                .unwrap_or(0.0);
            self.oldest_pending_age
                .with_label_values(&[source, kind])
                .set(age);
            self.expired_leases
                .with_label_values(&[source, kind])
                .set(expired.get(kind).copied().unwrap_or(0));
            let blocked = stats
                .blocked_lanes
                .iter()
                .find(|b| b.source == source && b.kind == kind);
            self.blocked_lanes
                .with_label_values(&[source, kind])
                .set(blocked.map_or(0, |b| b.lanes));
            let waited = blocked
                .and_then(|b| b.oldest_blocked_at)
                .map_or(0.0, |at| ((now_ms - at).max(0)) as f64 / 1000.0);
            self.oldest_blocked_lane
                .with_label_values(&[source, kind])
                .set(waited);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        // The exporter counts on its own thread; catch up before each scrape.
        let dropped = crate::telemetry::dropped_spans();
        let shown = self.trace_spans_dropped.get();
        if dropped > shown {
            self.trace_spans_dropped.inc_by(dropped - shown);
        }
        let mut buffer = Vec::new();
        let encoder = TextEncoder::new();
        if encoder
            .encode(&self.registry.gather(), &mut buffer)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(buffer).unwrap_or_default()
    }
}

/// One on `gauge` for as long as it lives, counted down however its owner ends
/// (a connection closed, a request whose client hung up).
#[derive(Debug)]
pub struct OnGauge(prometheus::IntGauge);

impl OnGauge {
    pub fn count(gauge: &prometheus::IntGauge) -> Self {
        gauge.inc();
        OnGauge(gauge.clone())
    }
}

impl Drop for OnGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `herald_…` name in `text`.
    fn names_in(text: &str) -> Vec<&str> {
        let mut names = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("herald_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(tail.len());
            names.push(&tail[..end]);
            rest = &tail[end..];
        }
        names
    }

    /// The alert rules and the dashboard name only families Herald exports (a
    /// histogram's `_bucket`, `_sum` and `_count` included): a renamed metric
    /// cannot leave an alert or a panel silently watching nothing.
    #[test]
    fn alert_rules_and_the_dashboard_name_only_exported_metrics() {
        let metrics = Metrics::new();
        let exported = |name: &str| {
            std::iter::once(name)
                .chain(
                    ["_bucket", "_sum", "_count"]
                        .iter()
                        .filter_map(|suffix| name.strip_suffix(suffix)),
                )
                .any(|family| metrics.families().iter().any(|f| f == family))
        };
        for (file, text) in [
            (
                "docs/prometheus/herald-rules.yml",
                include_str!("../../docs/prometheus/herald-rules.yml"),
            ),
            (
                "docs/grafana/herald.json",
                include_str!("../../docs/grafana/herald.json"),
            ),
        ] {
            let names = names_in(text);
            assert!(names.len() >= 8, "{file}: {names:?}");
            for name in names {
                assert!(
                    exported(name),
                    "{file} names {name}, which Herald does not export"
                );
            }
        }
        assert!(!exported("herald_outbox_event"), "a near miss is caught");
    }
}
