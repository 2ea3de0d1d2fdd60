//! Records (the business data approvals act on) as the Records page shows them
//! (issue 23, item 7): read-only, for anyone with `records:read`.

use serde::{Deserialize, Serialize};

use super::ApprovalDetailView;

/// Records a page lists.
pub const RECORDS_PAGE: u32 = 50;

/// The console's page of one record. (Object names are letters, digits and `_`,
/// record ids are Herald's UUIDs: nothing to encode.)
pub fn record_page(object: &str, id: &str) -> String {
    format!("/records?object={object}&id={id}")
}

/// One field of a record: its name and its value as JSON text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordField {
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordRow {
    pub id: String,
    pub object: String,
    /// 1 at creation, one more for every write that changed a field.
    pub version: i64,
    pub updated_at: String,
    pub fields: Vec<RecordField>,
}

/// One page of an object's records, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordsPage {
    /// The objects approval definitions act on, to choose from.
    pub objects: Vec<String>,
    /// The object listed (the one asked for, or the first of `objects`).
    pub object: Option<String>,
    pub records: Vec<RecordRow>,
    /// The cursor of the next (older) page, when there is one.
    pub next_cursor: Option<String>,
    /// Whether this page is an older one (a way back to the newest is offered).
    pub paged: bool,
}

/// A record with its approval history (each approval with its events: the
/// field updates it owes among them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordDetail {
    pub record: RecordRow,
    pub approvals: Vec<ApprovalDetailView>,
}
