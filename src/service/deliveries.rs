//! Deliveries (outbox events) as operators see them: redacted views for readers,
//! counts by state for a page of runs, attempt timelines, the outbox listing of the
//! admin API, the audit trail, and the one manual-retry entry point (a
//! compare-and-set, audited) that the JSON API, the admin API and the console share.

use std::collections::HashMap;
use std::sync::Arc;

use app::dto::{
    AttemptView, AuditPage, BulkOutcome, BulkPreview, DeliveryCounts, DeliveryDetail, DeliveryPage,
    DeliveryQuery, DeliveryView, FailureGroups, OverviewQuery, OverviewView,
};

use serde::Deserialize;
use vocab::{DeliveryStatus, Permission, Viewer};

use super::delivery_views::{
    attempt_view, audit_entry, filter_of, merge_newest_first, non_empty, view,
};
use super::error_class;
use super::export::{AuditExportQuery, AuditRows, EventExport, EventRows, Export, ExportQuery};
use super::failures::{self, FAILURE_GROUPS};
use super::overview;

mod lanes;
use super::{require, ServiceError};
use crate::outbox::handler::Registry;
use crate::outbox::model::{EventRecord, RetryRefusal};
use crate::store::ports::{DeliveryReads, EventFilter, ManualRetry, NewAuditEntry, OutboxStore};
use crate::store::StoreError;

/// The parent type of a run's events.
pub const RUN_PARENT: &str = "run";
pub const DEFAULT_PAGE: u32 = 50;
pub const MAX_PAGE: u32 = 200;

/// The body of a retry request (`POST /api/v1/deliveries/{event_id}/retry` and
/// `POST /admin/api/notification-outbox/{event_id}/retry`).
#[derive(utoipa::ToSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    pub kind: String,
    pub expected_status: DeliveryStatus,
    /// The retry cycle the caller saw (the console always sends it): a delivery
    /// retried by someone else since, and back in the same state, is refused (409).
    #[serde(default)]
    pub expected_cycle: Option<i64>,
    #[serde(default)]
    pub allow_uncertain: bool,
}

/// A page holds 1 to [`MAX_PAGE`] rows; anything else is the caller's mistake.
fn check_page_limit(limit: u32) -> Result<(), ServiceError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(ServiceError::invalid(
            "limit",
            format!("must be 1 to {MAX_PAGE}"),
        ));
    }
    Ok(())
}

/// The most deliveries one bulk retry touches.
pub const BULK_CAP: u32 = 1_000;

/// Retries a bulk action commits at a time, each chunk with its own audit row
/// (short write transactions: SQLite has one writer).
pub const BULK_CHUNK: usize = 100;

/// One database's outbox as the operators' pages see it: where its events are
/// listed, counted, audited and retried.
#[derive(Clone)]
struct OutboxPart {
    /// Which database it is, as a page names it when it cannot be read.
    name: &'static str,
    store: Arc<dyn OutboxStore>,
    reads: Arc<dyn DeliveryReads>,
}

#[derive(Clone)]
pub struct DeliveryService {
    store: Arc<dyn OutboxStore>,
    reads: Arc<dyn DeliveryReads>,
    registry: Arc<Registry>,
    default_max_attempts: u32,
    /// Other sources' stores and handlers (the approvals source), by kind.
    others: Vec<(Arc<dyn OutboxStore>, Arc<Registry>)>,
    /// Every database holding outbox rows, the jobs store's first: one when every
    /// source shares it, two when the approvals database is apart.
    parts: Vec<OutboxPart>,
    /// False on a store without a durable outbox (`memory://`): every outbox read,
    /// retry and audit answers [`ServiceError::CapabilityUnavailable`].
    durable: bool,
}

/// What a store without a durable outbox says instead of pretending.
pub const NO_DURABLE_OUTBOX: &str =
    "this store (memory://) keeps no outbox; notifications are sent once, best effort, and not recorded";

impl DeliveryService {
    pub fn new(
        store: Arc<dyn OutboxStore>,
        reads: Arc<dyn DeliveryReads>,
        registry: Arc<Registry>,
        default_max_attempts: u32,
    ) -> Self {
        DeliveryService {
            parts: vec![OutboxPart {
                name: "jobs",
                store: store.clone(),
                reads: reads.clone(),
            }],
            store,
            reads,
            registry,
            default_max_attempts,
            others: Vec::new(),
            durable: true,
        }
    }

    /// Marks the store as having no durable outbox: nothing is read from it and
    /// every operator action on deliveries is refused as unavailable.
    pub fn without_durable_outbox(mut self) -> Self {
        self.durable = false;
        self
    }

    /// Whether deliveries are kept (and so can be listed, retried and audited).
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    fn require_durable(&self) -> Result<(), ServiceError> {
        if self.durable {
            Ok(())
        } else {
            Err(ServiceError::CapabilityUnavailable(
                NO_DURABLE_OUTBOX.into(),
            ))
        }
    }

    /// Adds a source whose kinds live in another store: retries of its kinds go
    /// to that store, through the same [`DeliveryService::retry`].
    pub fn with_source(mut self, store: Arc<dyn OutboxStore>, registry: Arc<Registry>) -> Self {
        self.others.push((store, registry));
        self
    }

    /// [`DeliveryService::with_source`] for a source in a database of its own (the
    /// approvals database apart): its rows are also listed, counted, bulk-retried
    /// and audited there, merged with the jobs store's on every page.
    pub fn with_separate_source(
        mut self,
        store: Arc<dyn OutboxStore>,
        reads: Arc<dyn DeliveryReads>,
        registry: Arc<Registry>,
    ) -> Self {
        self.parts.push(OutboxPart {
            name: "approvals",
            store: store.clone(),
            reads,
        });
        self.with_source(store, registry)
    }

    /// The events of every part matching `filter` (each part's first
    /// `filter.limit`), merged newest first, ties by id: the order each store
    /// pages in, so one cursor pages them all. Each comes with its part.
    async fn merged_events(
        &self,
        filter: &EventFilter,
    ) -> Result<(Vec<(usize, EventRecord)>, Vec<String>), ServiceError> {
        let mut pages = Vec::with_capacity(self.parts.len());
        let mut unavailable = Vec::new();
        for part in &self.parts {
            let listed = part.reads.list_events(filter).await;
            pages.push(
                self.partial(part, listed, &mut unavailable)?
                    .unwrap_or_default(),
            );
        }
        // Each store's rows in its own order: the next page's cursor is then a
        // row its database placed, whatever its collation does with ties.
        let events = merge_newest_first(pages, |e| e.created_at, filter.limit as usize);
        Ok((events, unavailable))
    }

    /// One part's read, or a note that its store is unavailable
    /// ([`super::partial_read`]).
    fn partial<T>(
        &self,
        part: &OutboxPart,
        read: Result<T, StoreError>,
        unavailable: &mut Vec<String>,
    ) -> Result<Option<T>, ServiceError> {
        super::partial_read(part.name, read, unavailable, self.parts.len())
    }

    /// How many events of every part match `filter` (each counted up to the cap).
    async fn count_everywhere(&self, filter: &EventFilter) -> Result<i64, ServiceError> {
        let mut total = 0;
        for part in &self.parts {
            total += count_or_zero(&*part.reads, filter).await?;
        }
        Ok(total)
    }

    /// The store and registry that own `kind`.
    fn owner(&self, kind: &str) -> (&Arc<dyn OutboxStore>, &Arc<Registry>) {
        self.others
            .iter()
            .find(|(_, registry)| registry.get(kind).is_some())
            .map(|(store, registry)| (store, registry))
            .unwrap_or((&self.store, &self.registry))
    }

    pub async fn for_run(
        &self,
        viewer: Option<&Viewer>,
        run_id: &str,
    ) -> Result<Vec<DeliveryView>, ServiceError> {
        let viewer = require(viewer, Permission::RunsRead)?;
        self.require_durable()?;
        let events = self.store.events_for_parent(RUN_PARENT, run_id).await?;
        let sees_data = viewer.can(Permission::DataRead);
        Ok(events.iter().map(|e| view(e, sees_data)).collect())
    }

    /// A run's deliveries with their attempt timelines (two statements in all) and
    /// whether this viewer may retry each.
    pub async fn details_for_run(
        &self,
        viewer: Option<&Viewer>,
        run_id: &str,
    ) -> Result<Vec<DeliveryDetail>, ServiceError> {
        let viewer = require(viewer, Permission::RunsRead)?;
        self.require_durable()?;
        let events = self.store.events_for_parent(RUN_PARENT, run_id).await?;
        let ids: Vec<String> = events.iter().map(|e| e.event_id.clone()).collect();
        let mut timelines: HashMap<String, Vec<AttemptView>> = HashMap::new();
        for (event_id, attempt) in self.reads.attempts_of(&ids).await? {
            timelines
                .entry(event_id)
                .or_default()
                .push(attempt_view(&attempt, viewer.can(Permission::DataRead)));
        }
        let may_write = viewer.can(Permission::RunsWrite);
        Ok(events
            .iter()
            .map(|event| DeliveryDetail {
                delivery: view(event, viewer.can(Permission::DataRead)),
                timeline: timelines.remove(&event.event_id).unwrap_or_default(),
                can_retry: may_write && event.status.is_retryable(),
            })
            .collect())
    }

    /// Delivery counts by state of each run, from one grouped query.
    pub async fn counts_for_runs(
        &self,
        run_ids: &[String],
    ) -> Result<HashMap<String, DeliveryCounts>, ServiceError> {
        let mut counts: HashMap<String, DeliveryCounts> = HashMap::new();
        if !self.durable {
            return Ok(counts);
        }
        for (run_id, status, n) in self.reads.status_counts(RUN_PARENT, run_ids).await? {
            counts.entry(run_id).or_default().add(status, n);
        }
        Ok(counts)
    }

    /// Every outbox event of every kind and source, filtered, newest first.
    pub async fn list(
        &self,
        viewer: Option<&Viewer>,
        query: DeliveryQuery,
    ) -> Result<DeliveryPage, ServiceError> {
        let viewer = require(viewer, Permission::RunsRead)?;
        self.require_durable()?;
        let limit = query.limit.unwrap_or(DEFAULT_PAGE);
        check_page_limit(limit)?;
        let filter = EventFilter {
            before: non_empty(query.after.clone())
                .map(|cursor| parse_cursor(&cursor))
                .transpose()?,
            limit: limit + 1,
            ..filter_of(&query)?
        };
        let (merged, unavailable) = self.merged_events(&filter).await?;
        let mut events: Vec<EventRecord> = merged.into_iter().map(|(_, e)| e).collect();
        let next_cursor = if events.len() > limit as usize {
            events.truncate(limit as usize);
            events
                .last()
                .map(|e| format!("{}.{}", e.created_at, e.event_id))
        } else {
            None
        };
        Ok(DeliveryPage {
            events: events
                .iter()
                .map(|e| view(e, viewer.can(Permission::DataRead)))
                .collect(),
            next_cursor,
            unavailable,
        })
    }

    /// Every event matching `query` in every store, as an export to page through
    /// (`runs:read`; payloads only with `data:read`). The filter is checked here,
    /// before anything is read.
    pub fn export(
        &self,
        viewer: Option<&Viewer>,
        query: &ExportQuery,
    ) -> Result<EventExport, ServiceError> {
        let viewer = require(viewer, Permission::RunsRead)?;
        self.require_durable()?;
        let filter = query.filter()?;
        let format = query.format()?;
        let rows = EventRows::new(self.all_reads(), filter, viewer.can(Permission::DataRead));
        Ok(Export::new(rows, format))
    }

    /// The deliveries that need attention, of every store, grouped by kind,
    /// source, destination and cause, largest groups first.
    pub async fn failure_groups(
        &self,
        viewer: Option<&Viewer>,
    ) -> Result<FailureGroups, ServiceError> {
        require(viewer, Permission::RunsRead)?;
        self.require_durable()?;
        let prefixes = error_class::cause_prefixes();
        let (mut groups, mut unavailable) = (Vec::new(), Vec::new());
        for part in &self.parts {
            // One over the page: a store with more groups than fit makes the
            // merged list longer than the page too.
            let read = part
                .reads
                .failure_groups(&prefixes, FAILURE_GROUPS + 1)
                .await;
            groups.extend(
                self.partial(part, read, &mut unavailable)?
                    .unwrap_or_default(),
            );
        }
        Ok(failures::merge(groups, unavailable))
    }

    /// How delivery went over the last hour or day, from every store's
    /// per-minute rollups (never the outbox itself). Readers too: counts only.
    pub async fn overview(
        &self,
        viewer: Option<&Viewer>,
        query: OverviewQuery,
    ) -> Result<OverviewView, ServiceError> {
        require(viewer, Permission::RunsRead)?;
        self.require_durable()?;
        let mut minutes = Vec::new();
        let mut unavailable = Vec::new();
        let mut now_ms = 0;
        // From the window's first bar by this node's clock, with a few minutes
        // to spare for a store's clock ahead of it; the summary trims to the
        // window by the stores' own clock.
        let since = overview::since(&query, crate::clock::local_now_ms())
            - 5 * crate::store::rollups::MINUTE_MS;
        for part in &self.parts {
            let read = part
                .reads
                .delivery_rollups(since, overview::grain(query.window))
                .await;
            if let Some((rows, now)) = self.partial(part, read, &mut unavailable)? {
                minutes.push(rows);
                now_ms = now_ms.max(now);
            }
        }
        Ok(overview::summarise(query, &minutes, now_ms, unavailable))
    }

    /// The whole audit trail of every store, for the Audit page's Export.
    /// Operators and admins, as the page.
    pub fn export_audit(
        &self,
        viewer: Option<&Viewer>,
        query: &AuditExportQuery,
    ) -> Result<Export<AuditRows>, ServiceError> {
        require(viewer, Permission::RunsWrite)?;
        self.require_durable()?;
        let format = query.format()?;
        Ok(Export::new(AuditRows::new(self.all_reads()), format))
    }

    /// The reads of every store holding outbox rows.
    fn all_reads(&self) -> Vec<Arc<dyn DeliveryReads>> {
        self.parts.iter().map(|part| part.reads.clone()).collect()
    }

    /// How many deliveries a bulk retry of `query` would retry. Operators and admins.
    pub async fn bulk_preview(
        &self,
        viewer: Option<&Viewer>,
        query: DeliveryQuery,
    ) -> Result<BulkPreview, ServiceError> {
        require(viewer, Permission::RunsWrite)?;
        self.require_durable()?;
        let filter = filter_of(&query)?;
        let retryable = EventFilter {
            statuses: retryable_states(&filter.statuses, true),
            ..filter.clone()
        };
        let (uncertain, without_uncertain): (Vec<_>, Vec<_>) = retryable
            .statuses
            .iter()
            .copied()
            .partition(|s| *s == DeliveryStatus::Uncertain);
        let uncertain = EventFilter {
            statuses: uncertain,
            ..filter.clone()
        };
        let without_uncertain = EventFilter {
            statuses: without_uncertain,
            ..filter
        };
        let matching = self.count_everywhere(&retryable).await?;
        let capped = |n: i64| n.min(i64::from(BULK_CAP) + 1) as u32;
        Ok(BulkPreview {
            matching: capped(matching),
            uncertain: capped(self.count_everywhere(&uncertain).await?),
            without_uncertain: capped(self.count_everywhere(&without_uncertain).await?),
            capped: matching > i64::from(BULK_CAP),
            cap: BULK_CAP,
        })
    }

    /// Retries every retryable delivery matching `query`, at most [`BULK_CAP`] per
    /// action. Each is its own compare-and-set on the state it was listed in (one
    /// that changed meanwhile is left alone and counted); `uncertain` ones only with
    /// `allow_uncertain`. Every [`BULK_CHUNK`] retries commit with one audit row
    /// recording their count.
    pub async fn bulk_retry(
        &self,
        viewer: Option<&Viewer>,
        query: DeliveryQuery,
        allow_uncertain: bool,
    ) -> Result<BulkOutcome, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?;
        self.require_durable()?;
        let filter = filter_of(&query)?;
        let statuses = retryable_states(&filter.statuses, allow_uncertain);
        if statuses.is_empty() {
            return Ok(BulkOutcome::default());
        }
        // The newest first across every database, as the listing shows them.
        let (mut events, unavailable) = self
            .merged_events(&EventFilter {
                statuses: statuses.clone(),
                limit: BULK_CAP + 1,
                ..filter
            })
            .await?;
        let capped = events.len() > BULK_CAP as usize;
        events.truncate(BULK_CAP as usize);
        let mut outcome = BulkOutcome {
            capped,
            unavailable,
            ..Default::default()
        };
        // Each chunk commits its retries together with their audit row, so a
        // failure part-way leaves every committed retry audited.
        let audit = NewAuditEntry {
            subject: describe(&query),
            action: "bulk_retry".into(),
            actor: viewer.name.clone(),
            from_status: match statuses.as_slice() {
                [one] => one.as_str().to_string(),
                _ => "several".to_string(),
            },
            acknowledged_duplicate_risk: false,
            affected: 0,
            reason: None,
        };
        // Each database's retries commit there, with an audit row there.
        for (at, part) in self.parts.iter().enumerate() {
            let mine: Vec<&EventRecord> = events
                .iter()
                .filter(|(owner, _)| *owner == at)
                .map(|(_, e)| e)
                .collect();
            self.retry_chunks(part, &mine, &audit, allow_uncertain, viewer, &mut outcome)
                .await?;
        }
        tracing::info!(by = %viewer.name, retried = outcome.retried, changed = outcome.changed, capped, "bulk retry");
        Ok(outcome)
    }

    /// `events` of one part retried [`BULK_CHUNK`] at a time, each chunk with its
    /// audit row in the same transaction.
    async fn retry_chunks(
        &self,
        part: &OutboxPart,
        events: &[&EventRecord],
        audit: &NewAuditEntry,
        allow_uncertain: bool,
        viewer: &Viewer,
        outcome: &mut BulkOutcome,
    ) -> Result<(), ServiceError> {
        for chunk in events.chunks(BULK_CHUNK) {
            let retries: Vec<ManualRetry> = chunk
                .iter()
                .map(|event| ManualRetry {
                    event_id: event.event_id.clone(),
                    kind: event.kind.clone(),
                    expected_status: event.status,
                    // The state as listed, its cycle included.
                    expected_cycle: Some(event.cycle),
                    allow_uncertain: allow_uncertain && event.status == DeliveryStatus::Uncertain,
                    actor: viewer.name.clone(),
                    max_attempts: self.max_attempts(&event.kind),
                    audit: false,
                })
                .collect();
            for retried in part.store.retry_events_audited(&retries, audit).await? {
                match retried {
                    Ok(()) => outcome.retried += 1,
                    Err(_) => outcome.changed += 1,
                }
            }
        }
        Ok(())
    }

    fn max_attempts(&self, kind: &str) -> u32 {
        self.owner(kind)
            .1
            .policy(kind)
            .map(|p| p.max_attempts)
            .unwrap_or(self.default_max_attempts)
    }

    /// What a pasted id (or a part of one) names, in every store: runs, events,
    /// approvals and records (the last two with `records:read`). Readers and up.
    pub async fn find_by_id(
        &self,
        viewer: Option<&Viewer>,
        q: &str,
    ) -> Result<app::dto::SearchAnswer, ServiceError> {
        let viewer = require(viewer, Permission::RunsRead)?;
        let query = super::search::check_query(q)?;
        let mut matches = Vec::new();
        let mut unavailable = Vec::new();
        for part in &self.parts {
            let read = part
                .reads
                .find_ids(&query, app::dto::search::SEARCH_LIMIT + 1)
                .await;
            matches.extend(
                self.partial(part, read, &mut unavailable)?
                    .unwrap_or_default(),
            );
        }
        Ok(super::search::answer(query, matches, unavailable, viewer))
    }

    /// The operators' audit trail, newest first. Operators and admins only.
    pub async fn audit(
        &self,
        viewer: Option<&Viewer>,
        after: Option<String>,
        limit: u32,
    ) -> Result<AuditPage, ServiceError> {
        require(viewer, Permission::RunsWrite)?;
        self.require_durable()?;
        check_page_limit(limit)?;
        // Every database's rows (each records the actions on its own events),
        // merged by id: time-ordered UUIDs, so newest first across them all.
        let after = non_empty(after);
        let mut rows = Vec::new();
        let mut unavailable = Vec::new();
        for part in &self.parts {
            let read = part.reads.audit(after.as_deref(), limit + 1).await;
            rows.extend(
                self.partial(part, read, &mut unavailable)?
                    .unwrap_or_default(),
            );
        }
        rows.sort_by(|a, b| b.id.cmp(&a.id));
        rows.truncate(limit as usize + 1);
        let next_cursor = if rows.len() > limit as usize {
            rows.truncate(limit as usize);
            rows.last().map(|r| r.id.clone())
        } else {
            None
        };
        Ok(AuditPage {
            entries: rows.into_iter().map(audit_entry).collect(),
            next_cursor,
            unavailable,
        })
    }

    /// The one manual retry: needs `runs:write`; a compare-and-set on the state the
    /// caller saw; `uncertain` needs the duplicate-risk acknowledgement; audited.
    /// Never reruns the business run: only the event goes back to `pending`.
    pub async fn retry(
        &self,
        viewer: Option<&Viewer>,
        event_id: &str,
        request: RetryRequest,
    ) -> Result<DeliveryView, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?;
        self.require_durable()?;
        let (store, _) = self.owner(&request.kind);
        let max_attempts = self.max_attempts(&request.kind);
        let outcome = store
            .retry_event(&ManualRetry {
                event_id: event_id.to_string(),
                kind: request.kind,
                expected_status: request.expected_status,
                expected_cycle: request.expected_cycle,
                allow_uncertain: request.allow_uncertain,
                actor: viewer.name.clone(),
                max_attempts,
                audit: true,
            })
            .await?;
        match outcome {
            Ok(()) => {
                tracing::info!(event_id, by = %viewer.name, acknowledged_duplicate_risk = request.allow_uncertain, "delivery retried");
                let event = store
                    .get_event(event_id)
                    .await?
                    .ok_or_else(|| ServiceError::NotFound(format!("delivery {event_id:?}")))?;
                Ok(view(&event, viewer.can(Permission::DataRead)))
            }
            Err(refusal) => Err(refusal_error(refusal)),
        }
    }
}

/// What an operator's refused retry or skip answers: 404, 422 naming the field
/// to change, or 409 with where the delivery stands now.
fn refusal_error(refusal: RetryRefusal) -> ServiceError {
    match refusal {
        RetryRefusal::NotFound(id) => ServiceError::NotFound(format!("delivery {id:?}")),
        RetryRefusal::UncertainNeedsAcknowledgement | RetryRefusal::SkipNeedsAcknowledgement => {
            ServiceError::invalid("allow_uncertain", refusal.to_string())
        }
        RetryRefusal::NotRetryable(status) => ServiceError::invalid(
            "expected_status",
            format!("a {status} delivery cannot be retried; only failed, skipped and uncertain ones can"),
        ),
        RetryRefusal::NotSkippable(_) => ServiceError::invalid("expected_status", refusal.to_string()),
        refusal => {
            let message = refusal.to_string();
            let current = match refusal {
                RetryRefusal::StatusChanged { current, .. }
                | RetryRefusal::CycleChanged { current, .. } => DeliveryStatus::parse(&current),
                _ => None,
            };
            match current {
                Some(current) => ServiceError::DeliveryChanged { current, message },
                None => ServiceError::Conflict(message),
            }
        }
    }
}

/// The states a retry may start from, narrowed to `wanted` (all when empty).
fn retryable_states(wanted: &[DeliveryStatus], with_uncertain: bool) -> Vec<DeliveryStatus> {
    [
        DeliveryStatus::Failed,
        DeliveryStatus::Skipped,
        DeliveryStatus::Uncertain,
    ]
    .into_iter()
    .filter(|s| wanted.is_empty() || wanted.contains(s))
    .filter(|s| with_uncertain || *s != DeliveryStatus::Uncertain)
    .collect()
}

async fn count_or_zero(
    reads: &dyn DeliveryReads,
    filter: &EventFilter,
) -> Result<i64, ServiceError> {
    if filter.statuses.is_empty() {
        return Ok(0);
    }
    Ok(reads.count_events(filter, BULK_CAP + 1).await?)
}

/// A bulk action's subject in the audit trail: the filter it covered.
fn describe(query: &DeliveryQuery) -> String {
    let parts: Vec<String> = [
        // A failure group's names first: the subject is cut at 180 bytes.
        ("cause", &query.cause),
        ("destination", &query.destination),
        ("kind", &query.kind),
        ("status", &query.status),
        ("source", &query.source),
        ("parent", &query.parent),
        ("from", &query.created_from),
        ("to", &query.created_to),
    ]
    .into_iter()
    .filter_map(|(k, v)| non_empty(v.clone()).map(|v| format!("{k}={v}")))
    .collect();
    let text = if parts.is_empty() {
        "all deliveries".to_string()
    } else {
        parts.join(" ")
    };
    let mut text = format!("bulk: {text}");
    if text.len() > 180 {
        let mut end = 180;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// `<created_at>.<event_id>`, as [`DeliveryService::list`] hands it out.
fn parse_cursor(cursor: &str) -> Result<(i64, String), ServiceError> {
    cursor
        .split_once('.')
        .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id.to_string())))
        .filter(|(_, id)| !id.is_empty())
        .ok_or_else(|| ServiceError::invalid("after", "is not a cursor this listing handed out"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_retries_start_only_from_retryable_states() {
        use DeliveryStatus::*;
        assert_eq!(retryable_states(&[], false), vec![Failed, Skipped]);
        assert_eq!(
            retryable_states(&[], true),
            vec![Failed, Skipped, Uncertain]
        );
        assert_eq!(retryable_states(&[Failed, Uncertain], false), vec![Failed]);
        assert_eq!(retryable_states(&[Completed, Pending], true), vec![]);
    }

    #[test]
    fn bulk_audit_subjects_name_the_filter_and_stay_bounded() {
        let query = DeliveryQuery {
            kind: Some("callback".into()),
            status: Some("failed".into()),
            ..Default::default()
        };
        assert_eq!(describe(&query), "bulk: kind=callback status=failed");
        assert_eq!(describe(&DeliveryQuery::default()), "bulk: all deliveries");
        let long = DeliveryQuery {
            kind: Some("é".repeat(200)),
            ..Default::default()
        };
        assert!(describe(&long).len() <= 180);
    }

    #[test]
    fn cursors_round_trip_and_bad_ones_name_the_parameter() {
        assert_eq!(
            parse_cursor("1700000000000.callback_a.b").unwrap(),
            (1_700_000_000_000, "callback_a.b".to_string())
        );
        for bad in ["", "x.y", "12.", "12"] {
            match parse_cursor(bad) {
                Err(ServiceError::Invalid { field, .. }) => assert_eq!(field, "after"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
