//! The overview's figures (issue 23, item 1), summed from the stores' per-minute
//! rollups (`store::rollups`): bars per minute (an hour) or per quarter hour (a
//! day), totals, latency percentiles from the rollups' buckets, the backlog and
//! the destinations failing most. Pure: the reads are [`DeliveryService`]'s.
//!
//! [`DeliveryService`]: super::deliveries::DeliveryService

use std::collections::{BTreeMap, BTreeSet};

use app::dto::{
    DestinationFailures, OverviewPoint, OverviewQuery, OverviewView, OverviewWindow, NO_DESTINATION,
};

use super::format_ms;
use crate::store::rollups::{
    earliest, floor_to, DeliveryMinute, RollupGrain, ALL, LATENCY_BOUNDS_MS, MINUTE_MS, QUARTER_MS,
};

/// Destinations listed, most failures first.
pub const TOP_DESTINATIONS: usize = 5;

/// The first minute the overview of `query` reads, given the store's clock.
pub fn since(query: &OverviewQuery, now_ms: i64) -> i64 {
    let bin = query.window.bin_minutes() * MINUTE_MS;
    let bins = query.window.minutes() / query.window.bin_minutes();
    floor_to(now_ms, bin) - (bins - 1) * bin
}

/// The rollups a window's bars are summed from: a day's quarter-hour bars from
/// the quarter-hour rollups (the store keeps them for that), an hour's from minutes.
pub fn grain(window: OverviewWindow) -> RollupGrain {
    if window.bin_minutes() * MINUTE_MS == QUARTER_MS {
        RollupGrain::QuarterHours
    } else {
        RollupGrain::Minutes
    }
}

/// The overview of `query` from each store's rows (from [`since`]): counts add
/// up over stores; each store's backlog is its own newest sample.
pub fn summarise(
    query: OverviewQuery,
    stores: &[Vec<DeliveryMinute>],
    now_ms: i64,
    unavailable: Vec<String>,
) -> OverviewView {
    let bin = query.window.bin_minutes() * MINUTE_MS;
    let start = since(&query, now_ms);
    let bins = (query.window.minutes() / query.window.bin_minutes()) as usize;
    let in_window: Vec<(usize, &DeliveryMinute)> = stores
        .iter()
        .enumerate()
        .flat_map(|(store, rows)| rows.iter().map(move |m| (store, m)))
        .filter(|(_, m)| m.minute >= start)
        .collect();
    let sources: BTreeSet<String> = in_window
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m.source != ALL)
        .map(|m| m.source.clone())
        .collect();
    let kinds: BTreeSet<String> = in_window
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m.kind != ALL && query.source.as_ref().is_none_or(|s| *s == m.source))
        .map(|m| m.kind.clone())
        .collect();
    let filtered = query.source.is_some() || query.kind.is_some();
    let chosen = |m: &DeliveryMinute| {
        query.source.as_ref().is_none_or(|s| *s == m.source)
            && query.kind.as_ref().is_none_or(|k| *k == m.kind)
    };
    // Backlog: the store-wide samples unfiltered, else the chosen kinds' own.
    let is_backlog = |m: &DeliveryMinute| {
        m.status == "pending"
            && if filtered {
                m.source != ALL && chosen(m)
            } else {
                m.source == ALL
            }
    };

    let mut points: Vec<OverviewPoint> = (0..bins)
        .map(|i| {
            let start_ms = start + i as i64 * bin;
            OverviewPoint {
                start_ms,
                label: clock_label(start_ms),
                ..Default::default()
            }
        })
        .collect();
    let mut point_latency = vec![vec![0i64; LATENCY_BOUNDS_MS.len() + 1]; bins];
    let mut total_latency = vec![0i64; LATENCY_BOUNDS_MS.len() + 1];
    // Per store and minute: the backlog sampled, and its oldest commit time.
    let mut backlog_by_minute: BTreeMap<(usize, i64), (i64, Option<i64>)> = BTreeMap::new();
    let mut failing: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut view = OverviewView::default();
    for &(store, m) in &in_window {
        let at = ((m.minute - start) / bin) as usize;
        let Some(point) = points.get_mut(at) else {
            continue;
        };
        if is_backlog(m) {
            let entry = backlog_by_minute.entry((store, m.minute)).or_default();
            entry.0 += m.deliveries;
            entry.1 = earliest(entry.1, m.oldest_at);
            continue;
        }
        if m.source == ALL || !chosen(m) {
            continue;
        }
        match m.status.as_str() {
            "completed" => {
                point.completed += m.deliveries;
                view.completed += m.deliveries;
                for (i, n) in m.latency.iter().enumerate().take(total_latency.len()) {
                    point_latency[at][i] += n;
                    total_latency[i] += n;
                }
            }
            "failed" | "uncertain" => {
                let failed = m.status == "failed";
                if failed {
                    point.failed += m.deliveries;
                    view.failed += m.deliveries;
                } else {
                    point.uncertain += m.deliveries;
                    view.uncertain += m.deliveries;
                }
                let name = if m.destination.is_empty() {
                    NO_DESTINATION.to_string()
                } else {
                    m.destination.clone()
                };
                let entry = failing.entry(name).or_default();
                if failed {
                    entry.0 += m.deliveries;
                } else {
                    entry.1 += m.deliveries;
                }
            }
            "skipped" => view.skipped += m.deliveries,
            _ => {}
        }
    }
    for (point, buckets) in points.iter_mut().zip(&point_latency) {
        point.p50_ms = percentile(buckets, 0.50);
        point.p99_ms = percentile(buckets, 0.99);
    }
    // A bar's backlog is the most each store had in it (a quarter hour of a
    // day's chart stands for its peak, not for whichever minute came last),
    // added up over the stores. A day's quarter rows already hold each source
    // and kind's peak, so a chosen source's bar adds its kinds' peaks.
    let mut peaks: BTreeMap<(usize, usize), i64> = BTreeMap::new();
    for ((store, minute), (backlog, _)) in &backlog_by_minute {
        let peak = peaks
            .entry((*store, ((minute - start) / bin) as usize))
            .or_default();
        *peak = (*peak).max(*backlog);
    }
    for ((_, at), peak) in peaks {
        if let Some(point) = points.get_mut(at) {
            point.backlog += peak;
        }
    }
    // Each store's newest sample is its backlog now (stores recount at their
    // own moments); none in the window means no recount yet (or for a day).
    let mut newest: Option<i64> = None;
    for store in 0..stores.len() {
        let latest = in_window
            .iter()
            .filter(|(s, m)| *s == store && m.status == "pending" && m.source == ALL)
            .map(|(_, m)| m.minute)
            .max();
        let Some(latest) = latest else { continue };
        let (backlog, oldest) = backlog_by_minute
            .get(&(store, latest))
            .copied()
            .unwrap_or_default();
        view.backlog += backlog;
        if let Some(at) = oldest {
            let waited = (now_ms - at).max(0);
            view.oldest_pending_ms = Some(view.oldest_pending_ms.map_or(waited, |w| w.max(waited)));
        }
        newest = newest.max(Some(latest));
    }
    view.as_of = newest.map(clock_label);
    let mut destinations: Vec<DestinationFailures> = failing
        .into_iter()
        .map(|(destination, (failed, uncertain))| DestinationFailures {
            destination,
            failed,
            uncertain,
        })
        .collect();
    destinations.sort_by(|a, b| {
        (b.failed + b.uncertain)
            .cmp(&(a.failed + a.uncertain))
            .then_with(|| a.destination.cmp(&b.destination))
    });
    destinations.truncate(TOP_DESTINATIONS);
    view.p50_ms = percentile(&total_latency, 0.50);
    view.p99_ms = percentile(&total_latency, 0.99);
    view.points = points;
    view.destinations = destinations;
    view.sources = sources.into_iter().collect();
    view.kinds = kinds.into_iter().collect();
    view.query = query;
    view.unavailable = unavailable;
    view
}

/// `HH:MM` (UTC) of an epoch-ms time.
fn clock_label(ms: i64) -> String {
    format_ms(ms).get(11..16).unwrap_or("").to_string()
}

/// The `q` quantile of bucketed latencies, interpolated within its bucket (as
/// Prometheus's `histogram_quantile` does); `None` without any.
pub fn percentile(buckets: &[i64], q: f64) -> Option<i64> {
    let total: i64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut seen = 0i64;
    for (i, n) in buckets.iter().enumerate() {
        if *n > 0 && (seen + n) as f64 >= rank {
            let lower = if i == 0 { 0 } else { LATENCY_BOUNDS_MS[i - 1] };
            let Some(upper) = LATENCY_BOUNDS_MS.get(i) else {
                // Past the last bound: all that can be said is "at least".
                return Some(lower);
            };
            let within = ((rank - seen as f64) / *n as f64).clamp(0.0, 1.0);
            return Some(lower + ((upper - lower) as f64 * within).round() as i64);
        }
        seen += n;
    }
    LATENCY_BOUNDS_MS.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::dto::OverviewWindow;

    fn row(minute: i64, source: &str, kind: &str, status: &str, n: i64) -> DeliveryMinute {
        DeliveryMinute {
            minute,
            source: source.into(),
            kind: kind.into(),
            status: status.into(),
            destination: String::new(),
            deliveries: n,
            latency: Vec::new(),
            oldest_at: None,
        }
    }

    #[test]
    fn each_store_s_backlog_is_its_own_newest_sample() {
        let now = 100 * 60 * MINUTE_MS + 30_000;
        let query = OverviewQuery::default();
        let current = now - now % MINUTE_MS;
        let sample = |minute: i64, n: i64, oldest: i64| {
            let mut m = row(minute, ALL, ALL, "pending", n);
            m.oldest_at = Some(oldest);
            m
        };
        // The jobs store has recounted this minute; the approvals store not yet.
        let jobs = vec![
            sample(current - MINUTE_MS, 3, now - 9_000),
            sample(current, 5, now - 1_000),
        ];
        let approvals = vec![sample(current - MINUTE_MS, 2, now - 60_000)];
        let view = summarise(query, &[jobs, approvals], now, Vec::new());
        assert_eq!(view.backlog, 5 + 2, "neither store's is left out");
        assert_eq!(
            view.oldest_pending_ms,
            Some(60_000),
            "the longest wait of either"
        );
        let last = view.points.len() - 1;
        assert_eq!(view.points[last - 1].backlog, 3 + 2);
        assert_eq!(view.points[last].backlog, 5);
    }

    #[test]
    fn percentiles_interpolate_within_their_bucket() {
        let mut buckets = vec![0; LATENCY_BOUNDS_MS.len() + 1];
        assert_eq!(percentile(&buckets, 0.5), None);
        // 100 deliveries between 10 and 25 ms.
        buckets[1] = 100;
        assert_eq!(percentile(&buckets, 0.5), Some(18));
        assert_eq!(percentile(&buckets, 0.99), Some(25));
        // One very slow one among them moves p99 no further than its bucket.
        buckets[LATENCY_BOUNDS_MS.len()] = 1;
        assert_eq!(percentile(&buckets, 0.999), Some(3_600_000));
    }

    #[test]
    fn an_hour_has_sixty_bars_and_counts_only_the_chosen_kind() {
        let now = 100 * 60 * MINUTE_MS + 30_000;
        let query = OverviewQuery {
            window: OverviewWindow::Hour,
            source: None,
            kind: Some("callback".into()),
        };
        let first = since(&query, now);
        assert_eq!(first, (100 * 60 - 59) * MINUTE_MS);
        let mut failed = row(first + MINUTE_MS, "jobs", "callback", "failed", 2);
        failed.destination = "http://a.example".into();
        let minutes = vec![
            row(first - MINUTE_MS, "jobs", "callback", "completed", 99),
            row(first, "jobs", "callback", "completed", 3),
            row(first, "jobs", "chat", "completed", 7),
            failed,
            row(first, ALL, ALL, "pending", 9),
            row(first, "jobs", "callback", "pending", 4),
        ];
        let view = summarise(query, &[minutes], now, Vec::new());
        assert_eq!(view.points.len(), 60);
        assert_eq!(view.points[0].completed, 3);
        assert_eq!(view.points[1].failed, 2);
        assert_eq!((view.completed, view.failed), (3, 2));
        assert_eq!(view.points[0].backlog, 4, "the kind's own backlog");
        assert_eq!(view.kinds, vec!["callback".to_string(), "chat".to_string()]);
        assert_eq!(view.destinations[0].destination, "http://a.example");
    }
}
