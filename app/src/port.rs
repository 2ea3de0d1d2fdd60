//! The ports the server implements for the console's server functions: one for
//! runs, deliveries, audit and breakers, one for the Approvals page, one for the
//! Users page, one for the Records page.

use async_trait::async_trait;

use crate::dto::{
    AccountOutcome, AccountsView, ApprovalDetailView, ApprovalRow, AuditPage, BlockedLanes,
    BreakerClosed, BreakerList, BulkOutcome, BulkPreview, ConfigNotice, DeliveryPage,
    DeliveryQuery, DeliveryView, FailureGroups, OverviewQuery, OverviewView, RecordDetail,
    RecordsPage, ReplayShelfView, RetryCommand, RunPage, RunQuery, RunView, SearchAnswer,
    SkipCommand, Viewer,
};

/// A failure the console can show: an HTTP-like status and a human message.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConsoleError {
    pub status: u16,
    pub message: String,
}

#[async_trait]
pub trait ConsolePort: Send + Sync + 'static {
    async fn list_runs(
        &self,
        viewer: Option<&Viewer>,
        query: RunQuery,
    ) -> Result<RunPage, ConsoleError>;

    async fn run_view(&self, viewer: Option<&Viewer>, id: &str) -> Result<RunView, ConsoleError>;

    /// What this node's configuration keeps from working, for any signed-in viewer.
    async fn config_notices(
        &self,
        viewer: Option<&Viewer>,
    ) -> Result<Vec<ConfigNotice>, ConsoleError>;

    async fn retry_delivery(
        &self,
        viewer: Option<&Viewer>,
        command: RetryCommand,
    ) -> Result<DeliveryView, ConsoleError>;

    async fn list_deliveries(
        &self,
        viewer: Option<&Viewer>,
        query: DeliveryQuery,
    ) -> Result<DeliveryPage, ConsoleError>;

    /// The deliveries that need attention grouped by kind, destination and cause.
    async fn failure_groups(&self, viewer: Option<&Viewer>) -> Result<FailureGroups, ConsoleError>;

    /// How delivery went over the last hour or day (the overview).
    async fn overview(
        &self,
        viewer: Option<&Viewer>,
        query: OverviewQuery,
    ) -> Result<OverviewView, ConsoleError>;

    async fn bulk_preview(
        &self,
        viewer: Option<&Viewer>,
        query: DeliveryQuery,
    ) -> Result<BulkPreview, ConsoleError>;

    async fn bulk_retry(
        &self,
        viewer: Option<&Viewer>,
        query: DeliveryQuery,
        allow_uncertain: bool,
    ) -> Result<BulkOutcome, ConsoleError>;

    async fn audit(
        &self,
        viewer: Option<&Viewer>,
        after: Option<String>,
    ) -> Result<AuditPage, ConsoleError>;

    /// What a pasted id (or a part of one) names, and the page that shows it.
    async fn find_by_id(
        &self,
        viewer: Option<&Viewer>,
        q: String,
    ) -> Result<SearchAnswer, ConsoleError>;

    /// Destination circuit breakers, open and half-open first.
    async fn breakers(&self, viewer: Option<&Viewer>) -> Result<BreakerList, ConsoleError>;

    /// Closes a destination's breaker by hand.
    async fn close_breaker(
        &self,
        viewer: Option<&Viewer>,
        destination: String,
    ) -> Result<BreakerClosed, ConsoleError>;

    /// The ordered lanes whose head waits for an operator.
    async fn blocked_lanes(&self, viewer: Option<&Viewer>) -> Result<BlockedLanes, ConsoleError>;

    /// Skips a failed or uncertain delivery for good, with the operator's reason.
    async fn skip_delivery(
        &self,
        viewer: Option<&Viewer>,
        event_id: String,
        command: SkipCommand,
    ) -> Result<DeliveryView, ConsoleError>;
}

/// What the Approvals page needs from the server.
#[async_trait]
pub trait ApprovalsPort: Send + Sync + 'static {
    async fn list(&self, viewer: Option<&Viewer>) -> Result<Vec<ApprovalRow>, ConsoleError>;
    async fn detail(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
    ) -> Result<ApprovalDetailView, ConsoleError>;
    /// A run's approvals (DESIGN §9), newest first.
    async fn of_run(
        &self,
        viewer: Option<&Viewer>,
        run_id: &str,
    ) -> Result<Vec<ApprovalDetailView>, ConsoleError>;
    /// `action` is `approve`, `reject` or `recall`, under the idempotency `key`
    /// the form sent.
    async fn act(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
        action: &str,
        key: &str,
    ) -> Result<ApprovalRow, ConsoleError>;
    async fn shelf(&self, viewer: Option<&Viewer>) -> Result<ReplayShelfView, ConsoleError>;
    /// Retries a failed replay as the operator saw it (in `expected_cycle`).
    async fn retry_replay(
        &self,
        viewer: Option<&Viewer>,
        event_id: &str,
        expected_cycle: i64,
    ) -> Result<(), ConsoleError>;
}

/// What the Users page needs from the server: users and API tokens, managed by
/// whoever has `users:manage`; every change is audited by the server.
#[async_trait]
pub trait AccountsPort: Send + Sync + 'static {
    async fn list(&self, viewer: Option<&Viewer>) -> Result<AccountsView, ConsoleError>;
    /// `password` `None`: the server makes one and answers it once.
    async fn add_user(
        &self,
        viewer: Option<&Viewer>,
        username: String,
        role: String,
        password: Option<String>,
    ) -> Result<AccountOutcome, ConsoleError>;
    /// `action` names a [`UserAction`](crate::dto::UserAction): `role` (with
    /// `role`), `disable`, `enable` or `reset_password` (with `password`, or none
    /// for one the server makes).
    async fn change_user(
        &self,
        viewer: Option<&Viewer>,
        user_id: String,
        action: String,
        role: Option<String>,
        password: Option<String>,
    ) -> Result<AccountOutcome, ConsoleError>;
    async fn create_token(
        &self,
        viewer: Option<&Viewer>,
        name: String,
        role: String,
    ) -> Result<AccountOutcome, ConsoleError>;
    async fn revoke_token(
        &self,
        viewer: Option<&Viewer>,
        token_id: String,
    ) -> Result<AccountOutcome, ConsoleError>;
}

/// What the Records page needs from the server (`records:read`).
#[async_trait]
pub trait RecordsPort: Send + Sync + 'static {
    /// A page of `object`'s records (the first object approvals act on when
    /// `None`), newest first, before the `before` cursor.
    async fn records(
        &self,
        viewer: Option<&Viewer>,
        object: Option<String>,
        before: Option<String>,
    ) -> Result<RecordsPage, ConsoleError>;
    /// One record of `object` with its approvals.
    async fn record(
        &self,
        viewer: Option<&Viewer>,
        object: String,
        id: String,
    ) -> Result<RecordDetail, ConsoleError>;
}
