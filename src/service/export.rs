//! The reconciliation export (issue 21, item 5; seed 003's rollback: "reconcile
//! sent event IDs"): every event matching a filter as NDJSON, one line an event,
//! newest first, read one page at a time so memory stays bounded whatever the
//! number of rows. `GET /admin/api/notification-outbox/export` and `herald events
//! export` both page through an [`EventExport`].

use std::sync::Arc;

use app::dto::{DeliveryQuery, DeliveryView};
use serde::{Deserialize, Serialize};

use super::deliveries::{filter_of, view};
use super::{parse_instant, ServiceError};
use crate::outbox::model::EventRecord;
use crate::store::ports::{DeliveryReads, EventFilter};

/// Rows read per statement (per store): a page's payloads are all that is held
/// in memory at once.
pub const EXPORT_PAGE: u32 = 256;

/// An export's filters: the outbox listing's, without its paging. One shape for
/// the admin API's query and `herald events export`'s flags.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[derive(Clone, Debug, Default, Deserialize, Serialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// Created at or after this instant (RFC 3339, or a YYYY-MM-DD day, UTC)
    #[serde(default)]
    #[arg(long)]
    pub since: Option<String>,
    /// Created before this instant (or before the end of this day)
    #[serde(default)]
    #[arg(long)]
    pub until: Option<String>,
    /// A state (pending, processing, completed, failed, skipped, uncertain) or needs_attention
    #[serde(default)]
    #[arg(long)]
    pub status: Option<String>,
    /// An event kind, e.g. callback
    #[serde(default)]
    #[arg(long)]
    pub kind: Option<String>,
    /// A source: jobs or approvals
    #[serde(default)]
    #[arg(long)]
    pub source: Option<String>,
    /// `<parent type>:<parent id>`, e.g. run:0193…
    #[serde(default)]
    #[arg(long)]
    pub parent: Option<String>,
}

impl ExportQuery {
    /// The filter it names; a bad value is an error naming its field.
    pub fn filter(&self) -> Result<EventFilter, ServiceError> {
        let instant = |field, value: &Option<String>, end_of_day| {
            value
                .as_deref()
                .filter(|v| !v.trim().is_empty())
                .map(|v| parse_instant(field, v, end_of_day))
                .transpose()
        };
        Ok(EventFilter {
            created_from_ms: instant("since", &self.since, false)?,
            created_to_ms: instant("until", &self.until, true)?,
            ..filter_of(&DeliveryQuery {
                kind: self.kind.clone(),
                status: self.status.clone(),
                source: self.source.clone(),
                parent: self.parent.clone(),
                ..DeliveryQuery::default()
            })?
        })
    }
}

/// One exported line: the event as the listing shows it (id, kind, source,
/// destination origin, status, attempts, times), and its frozen payload only for
/// a reader with `data:read`.
#[derive(utoipa::ToSchema, Debug, Serialize)]
pub struct ExportRow {
    #[serde(flatten)]
    pub delivery: DeliveryView,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
}

impl ExportRow {
    fn of(event: &EventRecord, sees_data: bool) -> ExportRow {
        ExportRow {
            delivery: view(event, sees_data),
            payload: sees_data.then(|| {
                serde_json::from_str(&event.payload)
                    .unwrap_or_else(|_| serde_json::Value::String(event.payload.clone()))
            }),
        }
    }
}

/// An export under way: the stores it reads (every database holding outbox rows)
/// and where it stands. Each [`EventExport::next_page`] is one keyset-paged
/// statement per store, so rows committed after the export began are left out and
/// none is given twice.
pub struct EventExport {
    stores: Vec<Arc<dyn DeliveryReads>>,
    filter: EventFilter,
    sees_data: bool,
    finished: bool,
    exported: u64,
}

impl EventExport {
    pub fn new(stores: Vec<Arc<dyn DeliveryReads>>, filter: EventFilter, sees_data: bool) -> Self {
        EventExport {
            stores,
            filter: EventFilter {
                before: None,
                limit: EXPORT_PAGE,
                ..filter
            },
            sees_data,
            finished: false,
            exported: 0,
        }
    }

    /// How many rows the pages given so far held.
    pub fn exported(&self) -> u64 {
        self.exported
    }

    /// The next page as NDJSON lines, or `None` once every row was given. A store
    /// that cannot be read ends the export with its error: a partial export must
    /// never pass for a whole one.
    pub async fn next_page(&mut self) -> Result<Option<Vec<u8>>, ServiceError> {
        if self.finished {
            return Ok(None);
        }
        let page = self.read_page().await;
        let events = match page {
            Ok(events) => events,
            Err(err) => {
                self.finished = true;
                return Err(err);
            }
        };
        // Every store gave fewer rows than a page: none holds more.
        self.finished = events.len() < EXPORT_PAGE as usize;
        let Some(last) = events.last() else {
            return Ok(None);
        };
        self.filter.before = Some((last.created_at, last.event_id.clone()));
        let mut lines = Vec::with_capacity(events.len() * 512);
        for event in &events {
            serde_json::to_writer(&mut lines, &ExportRow::of(event, self.sees_data))
                .map_err(|e| ServiceError::Internal(format!("an export row: {e}")))?;
            lines.push(b'\n');
        }
        self.exported += events.len() as u64;
        Ok(Some(lines))
    }

    /// The page after the cursor, merged over the stores in their own order
    /// (newest first, ties by id).
    async fn read_page(&self) -> Result<Vec<EventRecord>, ServiceError> {
        let mut events = Vec::new();
        for store in &self.stores {
            events.extend(store.list_events(&self.filter).await?);
        }
        events.sort_by(|a, b| (b.created_at, &b.event_id).cmp(&(a.created_at, &a.event_id)));
        events.truncate(EXPORT_PAGE as usize);
        Ok(events)
    }
}
