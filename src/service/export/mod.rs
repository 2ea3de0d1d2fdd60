//! Exports: every row a filter matches, newest first, read one keyset-paged page
//! at a time so memory stays bounded whatever the number of rows, and written as
//! NDJSON or CSV. Two tables export: the outbox's events (seed 003's
//! reconciliation, and the Deliveries page's Export) and the operators' audit
//! trail (the Audit page's Export). The admin API, the console and `herald
//! events export` all page through an [`Export`].

mod audit;
mod events;
mod format;

pub use audit::{AuditExportQuery, AuditRows};
pub use events::{EventRows, ExportQuery, ExportRow};
pub use format::ExportFormat;

use async_trait::async_trait;
use serde::Serialize;

use super::ServiceError;

/// Rows read per statement (per store): a page's rows are all that is held in
/// memory at once.
pub const EXPORT_PAGE: u32 = 256;

/// Where an export's rows come from, and their CSV shape.
#[async_trait]
pub trait RowPages: Send {
    type Row: Serialize + Send + Sync;
    /// The CSV header, one name a column.
    fn columns(&self) -> Vec<&'static str>;
    /// A row's CSV cells in the columns' order (`None`: an empty cell).
    fn cells(&self, row: &Self::Row) -> Vec<Option<String>>;
    /// The rows after the cursor (at most [`EXPORT_PAGE`], fewer only on the last
    /// page), merged over every store, moving the cursor past them. A store that
    /// cannot be read is an error: a partial export must never pass for a whole one.
    async fn next_rows(&mut self) -> Result<Vec<Self::Row>, ServiceError>;
}

/// An export under way: where its rows come from, its format and where it stands.
pub struct Export<P> {
    rows: P,
    format: ExportFormat,
    started: bool,
    finished: bool,
    exported: u64,
}

/// The outbox's export.
pub type EventExport = Export<EventRows>;

impl<P: RowPages> Export<P> {
    pub fn new(rows: P, format: ExportFormat) -> Self {
        Export {
            rows,
            format,
            started: false,
            finished: false,
            exported: 0,
        }
    }

    pub fn format(&self) -> ExportFormat {
        self.format
    }

    /// How many rows the pages given so far held.
    pub fn exported(&self) -> u64 {
        self.exported
    }

    /// The next page's bytes, or `None` once every row was given. A CSV export's
    /// first page carries its header, even when no row matches.
    pub async fn next_page(&mut self) -> Result<Option<Vec<u8>>, ServiceError> {
        if self.finished {
            return Ok(None);
        }
        let rows = match self.rows.next_rows().await {
            Ok(rows) => rows,
            Err(err) => {
                self.finished = true;
                return Err(err);
            }
        };
        self.finished = rows.len() < EXPORT_PAGE as usize;
        let columns = self.rows.columns();
        let header = (!self.started && self.format == ExportFormat::Csv).then_some(&columns[..]);
        self.started = true;
        if rows.is_empty() && header.is_none() {
            return Ok(None);
        }
        let page = format::encode_page(self.format, header, &rows, |row| self.rows.cells(row))?;
        self.exported += rows.len() as u64;
        Ok(Some(page))
    }
}

/// The CSV's columns are the NDJSON line's keys: a field added to a row cannot
/// be left out of one format only.
#[cfg(test)]
pub(super) fn assert_columns_are_the_json_keys<P: RowPages>(rows: &P, row: &P::Row) {
    let json = serde_json::to_value(row).unwrap();
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut columns = rows.columns();
    keys.sort();
    columns.sort();
    assert_eq!(columns, keys);
    assert_eq!(rows.cells(row).len(), columns.len());
}
