//! The outbox's export (issue 21, item 5; seed 003's rollback: "reconcile sent
//! event IDs"; issue 23, item 4: the Deliveries page's Export): every event
//! matching the listing's filters, one row an event, payloads only for a reader
//! with `data:read`.

use std::sync::Arc;

use app::dto::{DeliveryQuery, DeliveryView};
use serde::{Deserialize, Serialize};

use super::{ExportFormat, RowPages, EXPORT_PAGE};
use crate::outbox::model::EventRecord;
use crate::service::delivery_views::{filter_of, merge_newest_first, view};
use crate::service::{parse_instant, ServiceError};
use crate::store::ports::{DeliveryReads, EventFilter};

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
    /// A destination's origin (e.g. https://hooks.example.com), or none for events without one
    #[serde(default)]
    #[arg(long)]
    pub destination: Option<String>,
    /// The class of the last error, as the Deliveries page's failure groups name it
    #[serde(default)]
    #[arg(long)]
    pub cause: Option<String>,
    /// ndjson (the default) or csv
    #[serde(default)]
    #[arg(long)]
    pub format: Option<String>,
}

impl ExportQuery {
    /// The file format it names; a bad one is an error naming `format`.
    pub fn format(&self) -> Result<ExportFormat, ServiceError> {
        ExportFormat::parse(self.format.as_deref())
    }

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
                destination: self.destination.clone(),
                cause: self.cause.clone(),
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

/// The CSV columns of an event, in [`DeliveryView`]'s order.
const COLUMNS: [&str; 21] = [
    "event_id",
    "kind",
    "source",
    "parent_type",
    "parent_id",
    "channel",
    "destination",
    "status",
    "attempts",
    "cycle",
    "cycle_attempts",
    "max_attempts",
    "last_status_code",
    "last_error",
    "next_attempt_at",
    "created_at",
    "updated_at",
    "completed_at",
    "failed_at",
    "uncertain_at",
    "dead_letter_id",
];

/// The outbox's rows: every database holding outbox events (the approvals one
/// too, when apart), read together one keyset-paged statement each per page, so
/// rows committed after the export began are left out and none is given twice.
pub struct EventRows {
    stores: Vec<StoreCursor>,
    filter: EventFilter,
    sees_data: bool,
}

/// One store and where its rows stand: the last row taken from it, as its own
/// database ordered it. Each store keeps its own cursor because databases order
/// ties of one millisecond by their own collation (PostgreSQL's may ignore
/// case): a cursor that is a row the database itself returned never makes it
/// give a row twice or skip one.
struct StoreCursor {
    reads: Arc<dyn DeliveryReads>,
    before: Option<(i64, String)>,
}

impl EventRows {
    pub fn new(stores: Vec<Arc<dyn DeliveryReads>>, filter: EventFilter, sees_data: bool) -> Self {
        EventRows {
            stores: stores
                .into_iter()
                .map(|reads| StoreCursor {
                    reads,
                    before: None,
                })
                .collect(),
            filter: EventFilter {
                before: None,
                limit: EXPORT_PAGE,
                ..filter
            },
            sees_data,
        }
    }
}

#[async_trait::async_trait]
impl RowPages for EventRows {
    type Row = ExportRow;

    fn columns(&self) -> Vec<&'static str> {
        let payload = self.sees_data.then_some("payload");
        COLUMNS.into_iter().chain(payload).collect()
    }

    fn cells(&self, row: &ExportRow) -> Vec<Option<String>> {
        let d = &row.delivery;
        let text = |value: &str| Some(value.to_string());
        let number = |value: i64| Some(value.to_string());
        let mut cells = vec![
            text(&d.event_id),
            text(&d.kind),
            text(&d.source),
            text(&d.parent_type),
            text(&d.parent_id),
            d.channel.clone(),
            d.destination.clone(),
            text(d.status.as_str()),
            number(d.attempts),
            number(d.cycle),
            number(d.cycle_attempts),
            number(d.max_attempts),
            d.last_status_code.map(|code| code.to_string()),
            d.last_error.clone(),
            d.next_attempt_at.clone(),
            text(&d.created_at),
            text(&d.updated_at),
            d.completed_at.clone(),
            d.failed_at.clone(),
            d.uncertain_at.clone(),
            d.dead_letter_id.clone(),
        ];
        if self.sees_data {
            cells.push(row.payload.as_ref().map(|p| p.to_string()));
        }
        cells
    }

    /// Each store's page after its cursor, merged newest first.
    async fn next_rows(&mut self) -> Result<Vec<ExportRow>, ServiceError> {
        let mut pages = Vec::with_capacity(self.stores.len());
        for store in &self.stores {
            let filter = EventFilter {
                before: store.before.clone(),
                ..self.filter.clone()
            };
            pages.push(store.reads.list_events(&filter).await?);
        }
        let taken = merge_newest_first(pages, |e| e.created_at, EXPORT_PAGE as usize);
        for (store, event) in &taken {
            self.stores[*store].before = Some((event.created_at, event.event_id.clone()));
        }
        Ok(taken
            .iter()
            .map(|(_, event)| ExportRow::of(event, self.sees_data))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocab::DeliveryStatus;

    #[test]
    fn csv_columns_are_the_json_lines_keys() {
        let event = EventRecord {
            event_id: "evt_1".into(),
            source: "jobs".into(),
            kind: "callback".into(),
            parent_type: "run".into(),
            parent_id: "r1".into(),
            payload: r#"{"url":"http://127.0.0.1:9/hook","body":{"a":1}}"#.into(),
            redeliverable: true,
            status: DeliveryStatus::Failed,
            attempts: 3,
            cycle: 1,
            cycle_attempts: 3,
            max_attempts: 3,
            next_attempt_at: 0,
            lease_token: None,
            lease_holder: None,
            lease_expires_at: None,
            last_error: Some("HTTP 500".into()),
            last_status_code: Some(500),
            created_at: 1,
            updated_at: 2,
            completed_at: None,
            failed_at: Some(2),
            alerted_at: None,
            uncertain_at: None,
            dead_letter_id: None,
        };
        for sees_data in [false, true] {
            let rows = EventRows::new(Vec::new(), EventFilter::default(), sees_data);
            let row = ExportRow::of(&event, sees_data);
            super::super::assert_columns_are_the_json_keys(&rows, &row);
            assert_eq!(rows.columns().contains(&"payload"), sees_data);
        }
    }
}
