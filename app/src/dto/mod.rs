//! Types shared by the server and the browser: the vocabulary (roles, permissions,
//! the signed-in viewer, run and delivery states — defined in the `vocab` crate and
//! re-exported here) and the views the console shows, by family (runs, deliveries,
//! approvals, audit, breakers, configuration notices, users and tokens, records,
//! the overview).

pub mod accounts;
pub mod approvals;
pub mod audit;
pub mod breakers;
pub mod deliveries;
pub mod lanes;
pub mod notices;
pub mod overview;
pub mod records;
pub mod runs;
pub mod search;

pub use vocab::{
    DeliveryFilter, DeliveryStatus, Permission, Role, RunStatus, Viewer, OTHER_DESTINATIONS,
};

pub use accounts::{AccountOutcome, AccountsView, TokenRow, UserAction, UserRow};
pub use approvals::{
    ApprovalDetailView, ApprovalEventRow, ApprovalRow, FailedReplayRow, ReplayShelfView,
    TimelineEntry,
};
pub use audit::{AuditEntry, AuditPage};
pub use breakers::{BreakerClosed, BreakerList, BreakerView};
pub use deliveries::{
    AttemptView, BulkOutcome, BulkPreview, DeliveryCounts, DeliveryDetail, DeliveryPage,
    DeliveryQuery, DeliveryView, FailureGroup, FailureGroups, RetryCommand, NO_DESTINATION,
};
pub use lanes::{BlockedLaneView, BlockedLanes, SkipCommand, MAX_SKIP_REASON};
pub use notices::ConfigNotice;
pub use overview::{
    DestinationFailures, OverviewPoint, OverviewQuery, OverviewView, OverviewWindow,
};
pub use records::{record_page, RecordDetail, RecordField, RecordRow, RecordsPage, RECORDS_PAGE};
pub use runs::{format_count, RunFacts, RunPage, RunQuery, RunSummary, RunView, STATUS_COUNT_CAP};
pub use search::{Found, SearchAnswer};
