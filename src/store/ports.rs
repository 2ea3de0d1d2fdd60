//! The storage port: what Herald's services need from a store, independent of engine.

use async_trait::async_trait;
use vocab::approvals::{Definition, DefinitionSpec, Instance, InstanceStatus, Node, WorkItem};
use vocab::{Role, RunStatus};

use super::error::StoreError;
use super::events::EventRecord;

#[derive(Clone, Debug)]
pub struct User {
    pub id: String,
    pub username: String,
    pub password_hash: String,
    pub role: Role,
    pub created_at_ms: i64,
    /// When an admin disabled the user: it cannot sign in, and its sessions end.
    pub disabled_at_ms: Option<i64>,
    /// Sessions begun in an older epoch are over (a password reset or a disable
    /// moves it on).
    pub session_epoch: i64,
}

impl User {
    pub fn is_disabled(&self) -> bool {
        self.disabled_at_ms.is_some()
    }
}

/// What an admin changes of a user (each audited in its own transaction).
#[derive(Clone, Debug)]
pub enum UserChange {
    Role(Role),
    /// Disabled (`true`) or enabled again; a disable ends the user's sessions.
    Disabled(bool),
    /// A new password's hash; the user's sessions end.
    Password(String),
}

/// Why a user change was not made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserChangeRefusal {
    NotFound,
    /// It would leave no enabled admin, and nobody could manage users again.
    LastAdmin,
}

#[derive(Clone, Debug)]
pub struct NewUser {
    pub username: String,
    pub password_hash: String,
    pub role: Role,
}

#[derive(Clone, Debug)]
pub struct ApiToken {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub created_at_ms: i64,
    /// Who made it (its audit row's actor); `None` for tokens made before this
    /// was kept.
    pub created_by: Option<String>,
    /// A revoked token stays listed but authenticates nothing.
    pub revoked_at_ms: Option<i64>,
}

#[derive(Clone, Debug)]
pub struct Run {
    pub id: String,
    pub run_type: String,
    pub tenant: String,
    pub status: RunStatus,
    pub callback_url: Option<String>,
    /// The result snapshot as JSON text (a payload: only `data:read` may see it).
    pub result: Option<String>,
    pub transition_seq: i64,
    /// Names of the configured delivery routes its result goes to.
    pub routes: Vec<String>,
    /// The approval it waits on (DESIGN §9): while set, only that approval's
    /// continuation moves the run.
    pub approval_id: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Clone, Debug)]
pub struct NewRun {
    pub run_type: String,
    pub tenant: String,
    pub callback_url: Option<String>,
    pub routes: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct RunFilter {
    pub run_type: Option<String>,
    pub status: Option<RunStatus>,
    pub tenant: Option<String>,
    /// Only runs with at least one outbox event in one of these states.
    pub delivery_states: Vec<vocab::DeliveryStatus>,
    /// `created_at >= created_from_ms`.
    pub created_from_ms: Option<i64>,
    /// `created_at < created_to_ms`.
    pub created_to_ms: Option<i64>,
    /// Only runs whose id sorts before this one (keyset pagination, newest first).
    pub before_id: Option<String>,
    pub limit: u32,
}

#[async_trait]
pub trait UserRepository: Send + Sync {
    /// Creates a user and writes `audit` in the same transaction.
    async fn create_user(&self, user: NewUser, audit: &NewAuditEntry) -> Result<User, StoreError>;
    async fn user_by_name(&self, username: &str) -> Result<Option<User>, StoreError>;
    async fn user_by_id(&self, id: &str) -> Result<Option<User>, StoreError>;
    async fn count_users(&self) -> Result<i64, StoreError>;
    /// Users by name, at most `limit`.
    async fn list_users(&self, limit: u32) -> Result<Vec<User>, StoreError>;
    /// Makes `change` to the user `id` and writes `audit` (its `from_status` set to
    /// the user's state before) in one transaction, holding the enabled admins'
    /// rows, so two admins demoting each other at once cannot leave none.
    /// Answers the user before and after.
    async fn change_user(
        &self,
        id: &str,
        change: &UserChange,
        audit: &NewAuditEntry,
    ) -> Result<Result<(User, User), UserChangeRefusal>, StoreError>;
}

#[async_trait]
pub trait TokenRepository: Send + Sync {
    /// Stores a token by the hash of its secret; the secret itself is never stored.
    /// Writes `audit` in the same transaction, its subject followed by the
    /// token's name and id.
    async fn create_token(
        &self,
        name: &str,
        role: Role,
        secret_hash: &str,
        audit: &NewAuditEntry,
    ) -> Result<ApiToken, StoreError>;
    /// The token with this secret's hash, unless it was revoked.
    async fn token_by_hash(&self, secret_hash: &str) -> Result<Option<ApiToken>, StoreError>;
    /// Tokens newest first, revoked ones included, at most `limit`.
    async fn list_tokens(&self, limit: u32) -> Result<Vec<ApiToken>, StoreError>;
    /// Revokes the token `id` and writes `audit` (its subject followed by the
    /// token's name and id) in one transaction; `None` when
    /// there is no such token. Revoking a revoked token changes nothing and
    /// writes no audit row.
    async fn revoke_token(
        &self,
        id: &str,
        audit: &NewAuditEntry,
    ) -> Result<Option<ApiToken>, StoreError>;
}

/// What an idempotency key holds: the request it was first sent with and, once
/// that request's effect committed, its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredAnswer {
    /// Which create it keys (`create_run`, …): one key is one operation.
    pub operation: String,
    /// SHA-256 of the first request's body, hex.
    pub request_hash: String,
    pub status: Option<u16>,
    pub body: Option<String>,
}

/// What claiming a key inside a write transaction found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyClaim {
    /// The key is this transaction's: make the effect, then answer it.
    Fresh,
    /// An earlier request holds it (committed before this one could claim it).
    Taken(StoredAnswer),
}

/// Idempotency keys of creates (issue 21), per principal.
#[async_trait]
pub trait IdempotencyKeys: Send + Sync {
    /// Claims `key` for `principal` inside `tx` (insert-if-absent, then read under
    /// the row's lock: a concurrent twin waits for the first to commit).
    async fn claim_key_in(
        &self,
        tx: &mut WriteTx,
        principal: &str,
        key: &str,
        operation: &str,
        request_hash: &str,
    ) -> Result<KeyClaim, StoreError>;
    /// Records the answer of a fresh claim inside the effect's transaction.
    async fn answer_key_in(
        &self,
        tx: &mut WriteTx,
        principal: &str,
        key: &str,
        status: u16,
        body: &str,
    ) -> Result<(), StoreError>;
    /// A committed key's answer, read outside any transaction.
    async fn key_answer(
        &self,
        principal: &str,
        key: &str,
    ) -> Result<Option<StoredAnswer>, StoreError>;
}

#[async_trait]
pub trait RunRepository: Send + Sync {
    async fn create_run(&self, run: NewRun) -> Result<Run, StoreError>;
    /// Creates a run inside `tx` (with its type in `run_types`).
    async fn create_run_in(&self, tx: &mut WriteTx, run: NewRun) -> Result<Run, StoreError>;
    /// Creates every run of `runs` inside `tx` in a few statements; returns them
    /// in the same order.
    async fn create_runs_in(
        &self,
        tx: &mut WriteTx,
        runs: &[NewRun],
    ) -> Result<Vec<Run>, StoreError>;
    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError>;
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<Run>, StoreError>;
    async fn run_types(&self) -> Result<Vec<String>, StoreError>;
    /// Runs per status, each counted up to `cap + 1` from the status index.
    async fn count_by_status(&self, cap: i64) -> Result<Vec<(RunStatus, i64)>, StoreError>;
    /// Reads a run inside `tx`, locking it until `tx` ends.
    async fn lock_run(&self, tx: &mut WriteTx, id: &str) -> Result<Option<Run>, StoreError>;
    /// Moves a locked run to `to` with `result`, bumping its transition sequence;
    /// the run then waits on `approval_id` (none: on no approval).
    async fn apply_transition(
        &self,
        tx: &mut WriteTx,
        run: &Run,
        to: RunStatus,
        result: Option<&str>,
        approval_id: Option<&str>,
    ) -> Result<Run, StoreError>;
    /// Moves each of `moves` (run id, result) to `to` if it stands in one of
    /// `from` (the states `to` may follow), in one statement where the engine can,
    /// and returns the runs as moved, in no particular order. A run left out
    /// (missing, a repeat, an illegal move, a state that changed, or a run waiting
    /// on an approval) is for the caller to read under [`RunRepository::lock_run`]
    /// and decide. Each id at most once.
    async fn transition_from(
        &self,
        tx: &mut WriteTx,
        moves: &[(String, Option<String>)],
        from: &[RunStatus],
        to: RunStatus,
    ) -> Result<Vec<Run>, StoreError>;
}

#[async_trait]
pub trait SessionRepository: Send + Sync {
    /// Inserts a new session; `false` when the id is already taken.
    async fn create_session(
        &self,
        id: &str,
        data: &str,
        expires_at_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Replaces an existing session's serialized data and expiry; `false` when
    /// there is no such session. It never inserts: a request that loaded a session
    /// before its sign-out must not bring it back by saving it afterwards.
    async fn save_session(
        &self,
        id: &str,
        data: &str,
        expires_at_ms: i64,
    ) -> Result<bool, StoreError>;
    /// An unexpired session's data and expiry (epoch milliseconds).
    async fn load_session(&self, id: &str) -> Result<Option<(String, i64)>, StoreError>;
    async fn delete_session(&self, id: &str) -> Result<(), StoreError>;
    async fn delete_expired_sessions(&self) -> Result<u64, StoreError>;
}

/// A write transaction a producer commits its state change and its events in.
pub type WriteTx = sqlx::Transaction<'static, sqlx::Any>;

/// One batched claim.
#[derive(Clone, Debug)]
pub struct ClaimRequest {
    /// Fresh and random per claim: the fencing token of every event it takes.
    pub lease_token: String,
    pub holder: String,
    pub limit: u32,
    /// Only these kinds (the ones this worker has handlers for).
    pub kinds: Vec<String>,
    pub lease_ms_by_kind: Vec<(String, i64)>,
    pub default_lease_ms: i64,
    /// Only pending events due within this many milliseconds before now (by the
    /// database's clock): an earlier claim leaving out the same destinations took
    /// every one due before (`outbox::frontier`). `None` looks at every due event.
    pub due_within_ms: Option<i64>,
    /// With a window: destinations that claim left out and this one does not.
    /// Their due events are claimed whatever their age (through the destination
    /// index), first.
    pub readmitted: Vec<String>,
    /// Destinations claimed apart, each at most its number of events (whatever
    /// their age, through the destination index, first) and left out of the rest
    /// of the claim: slow ones, whose events beyond that would only be handed
    /// back (`outbox::pace`).
    pub metered: Vec<(String, u32)>,
    /// Whether to take expired leases of redeliverable events first (one more
    /// statement). A worker asks at most once a second (`outbox::worker`): a
    /// lease expires only when its holder died or stalled, and the scan on
    /// every claim was one statement in 26 of a PostgreSQL bench run.
    pub take_expired: bool,
}

/// The lease an event is inserted under when its worker takes it at once
/// (`outbox::hand_off`).
#[derive(Clone, Debug)]
pub struct EventLease {
    /// Fresh and random: the fencing token, as a claim's.
    pub token: String,
    pub holder: String,
    pub lease_ms: i64,
}

/// What one claim took ([`OutboxStore::claim_avoiding`]).
#[derive(Debug)]
pub struct Claimed {
    pub events: Vec<super::events::ClaimedEvent>,
    /// One of its picks failed after others had committed (the failure logged):
    /// the events it would have taken may still be due, so however few it took,
    /// this claim did not take every due event.
    pub cut_short: bool,
}

/// An operator's retry: a compare-and-set on the status they saw.
#[derive(Clone, Debug)]
pub struct ManualRetry {
    pub event_id: String,
    pub kind: String,
    pub expected_status: vocab::DeliveryStatus,
    /// The retry cycle the operator saw; `None` compares the status only (API
    /// clients that do not send it).
    pub expected_cycle: Option<i64>,
    pub allow_uncertain: bool,
    pub actor: String,
    /// Sending attempts of the new cycle (the kind's current policy).
    pub max_attempts: u32,
    /// Write this retry's own audit row (a bulk retry writes one row for all).
    pub audit: bool,
}

/// An operator's skip of a failed or uncertain delivery (a lane's head, most
/// often): a compare-and-set on the state and cycle they saw, with their reason.
#[derive(Clone, Debug)]
pub struct ManualSkip {
    pub event_id: String,
    pub kind: String,
    pub expected_status: vocab::DeliveryStatus,
    pub expected_cycle: Option<i64>,
    /// The acknowledgement an `uncertain` one needs: it may never have arrived.
    pub allow_uncertain: bool,
    pub actor: String,
    pub reason: String,
}

/// What a maintenance sweep changed: `(event_id, kind)` pairs.
#[derive(Clone, Debug, Default)]
pub struct SweepReport {
    pub uncertain: Vec<(String, String)>,
    pub failed: Vec<(String, String)>,
}

/// One hot table vacuumed by [`OutboxStore::tidy_hot_tables`].
#[derive(Clone, Debug)]
pub struct TableTidied {
    pub table: &'static str,
    /// Dead rows the statistics counted before.
    pub dead_rows: i64,
    pub took: std::time::Duration,
}

/// Write transactions, which every producer's unit runs in.
#[async_trait]
pub trait Transactions: Send + Sync {
    /// Opens a write transaction (`BEGIN IMMEDIATE` on SQLite) for one unit of
    /// writes: a state change and the events it owes, a record write, a submit.
    async fn begin_write(&self) -> Result<WriteTx, StoreError>;
}

/// The durable outbox port (DESIGN §3).
#[async_trait]
pub trait OutboxStore: Transactions {
    /// Inserts the event unless one with its id exists, inside `tx`.
    async fn enqueue_in(
        &self,
        tx: &mut WriteTx,
        event: &super::events::NewEvent,
    ) -> Result<(), StoreError> {
        self.enqueue_all_in(tx, std::slice::from_ref(event)).await
    }
    /// Inserts each of `events` unless one with its id exists, inside `tx`, in
    /// as few statements as the engine allows.
    async fn enqueue_all_in(
        &self,
        tx: &mut WriteTx,
        events: &[super::events::NewEvent],
    ) -> Result<(), StoreError>;
    /// Inserts `events`, none of them laned or delayed, already `processing`
    /// under `lease` (their first attempt taken), inside `tx`. `false`: one of
    /// them existed already, and none is left leased (the ones inserted are
    /// `pending`, for any worker's claim).
    async fn enqueue_leased_in(
        &self,
        tx: &mut WriteTx,
        events: &[super::events::NewEvent],
        lease: &EventLease,
    ) -> Result<bool, StoreError>;
    /// Sends the engine's peer notice (`Engine::peer_notice`) on a connection of its
    /// own; `false` when the engine has none.
    async fn notify_peers(&self) -> Result<bool, StoreError>;
    /// Leases due events (and expired leases of redeliverable ones) to one worker.
    async fn claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<Vec<super::events::ClaimedEvent>, StoreError>;
    /// [`OutboxStore::claim`], leaving due events of the `avoid` destinations
    /// (origins at their in-flight cap or behind an open breaker) where they are.
    async fn claim_avoiding(
        &self,
        request: &ClaimRequest,
        avoid: &[String],
    ) -> Result<Claimed, StoreError> {
        let _ = avoid;
        Ok(Claimed {
            events: self.claim(request).await?,
            cut_short: false,
        })
    }
    /// Extends the leases still held under `lease_token`; returns how many.
    async fn renew(
        &self,
        lease_token: &str,
        event_ids: &[String],
        lease_ms: i64,
    ) -> Result<u64, StoreError>;
    /// Writes finished attempts in one transaction; `false` where the lease was lost.
    async fn settle(&self, batch: &[super::events::Settlement]) -> Result<Vec<bool>, StoreError>;
    /// Moves expired in-flight leases that must not be resent to `uncertain` or
    /// `failed`, each row committed alone and added to `report` as it commits: a
    /// store error part-way still leaves in `report` every change it made, so
    /// their alerts are not lost with the error.
    async fn sweep_expired(
        &self,
        limit: u32,
        dead_letter: Option<&super::events::DeadLetterNotifier>,
        report: &mut SweepReport,
    ) -> Result<(), StoreError>;
    /// Manual retry; the inner error says why it was refused.
    async fn retry_event(
        &self,
        request: &ManualRetry,
    ) -> Result<Result<(), super::events::RetryRefusal>, StoreError>;
    /// Retries each of `retries` as [`OutboxStore::retry_event`] does (each its own
    /// compare-and-set) in one transaction together with the one audit row `audit`
    /// records them under: its `affected` and `acknowledged_duplicate_risk` are set
    /// to what this call retried, and no row is written when it retried none. A
    /// store error rolls all of it back, so no retry goes unaudited.
    async fn retry_events_audited(
        &self,
        retries: &[ManualRetry],
        audit: &NewAuditEntry,
    ) -> Result<Vec<Result<(), super::events::RetryRefusal>>, StoreError>;
    /// Skips a failed or uncertain event for good: its lane (if any) goes on,
    /// and the audit row with the reason commits in the same transaction. The
    /// inner error says why it was refused (nothing changed).
    async fn skip_event(
        &self,
        request: &ManualSkip,
    ) -> Result<Result<(), super::events::RetryRefusal>, StoreError>;
    async fn get_event(
        &self,
        event_id: &str,
    ) -> Result<Option<super::events::EventRecord>, StoreError>;
    async fn events_for_parent(
        &self,
        parent_type: &str,
        parent_id: &str,
    ) -> Result<Vec<super::events::EventRecord>, StoreError>;
    async fn attempts(
        &self,
        event_id: &str,
    ) -> Result<Vec<super::events::AttemptRecord>, StoreError>;
    async fn dead_letter_count(&self, event_id: &str) -> Result<i64, StoreError>;
    /// `event_id`'s dead letters, one per failed cycle, oldest first: (cycle, reason).
    async fn dead_letters(&self, event_id: &str) -> Result<Vec<(i64, String)>, StoreError>;
    /// Vacuums and analyzes the tables every transition and delivery rewrites once
    /// enough of them is dead rows, where the engine leaves that to a vacuum that
    /// may be off or late (PostgreSQL); what it did, per table.
    async fn tidy_hot_tables(&self) -> Result<Vec<TableTidied>, StoreError> {
        Ok(Vec::new())
    }
    /// Counts for the gauges: live states always, settled states when asked
    /// (they cover most of the table, so they are counted less often).
    async fn stats(&self, count_settled: bool) -> Result<super::events::OutboxStats, StoreError>;
}

/// Filters of the outbox listing (any kind, any source).
#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    pub kind: Option<String>,
    /// Any of these states (empty: every state).
    pub statuses: Vec<vocab::DeliveryStatus>,
    pub source: Option<String>,
    pub parent_type: Option<String>,
    pub parent_id: Option<String>,
    /// `created_at >= created_from_ms`.
    pub created_from_ms: Option<i64>,
    /// `created_at < created_to_ms`.
    pub created_to_ms: Option<i64>,
    /// Keyset cursor: only events before `(created_at, event_id)`, newest first.
    pub before: Option<(i64, String)>,
    pub limit: u32,
    pub destination: Option<DestinationFilter>,
    /// Only events whose last error is of one of these causes.
    pub cause: Option<CauseFilter>,
}

/// Which destination's events: one origin, as its planner stored it, or those
/// without one (events that go nowhere over HTTP, such as field updates).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DestinationFilter {
    Origin(String),
    None,
}

/// How the store sorts errors into causes without reading them out: prefixes
/// of the lowercased last error, in order, each with the cause it names; an
/// event's cause is that of the first prefix that starts its error,
/// [`CAUSE_UNCLASSIFIED`] when none does and [`CAUSE_NO_ERROR`] without an
/// error. What each cause means is the service's business (`service::error_class`).
pub type CauseRules = Vec<(&'static str, i64)>;

/// Only events whose last error has `cause` under `rules`.
#[derive(Clone, Debug, Default)]
pub struct CauseFilter {
    pub rules: CauseRules,
    pub cause: i64,
}

pub const CAUSE_UNCLASSIFIED: i64 = -1;
pub const CAUSE_NO_ERROR: i64 = -2;

/// Events that need attention (failed or uncertain) sharing a kind, source,
/// destination and cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureGroup {
    pub kind: String,
    pub source: String,
    pub destination: Option<String>,
    pub cause: i64,
    pub count: i64,
    /// When the group's first and latest events came to need attention.
    pub first_at_ms: i64,
    pub last_at_ms: i64,
}

/// One row of the operators' audit trail.
#[derive(Clone, Debug)]
pub struct AuditRecord {
    pub id: String,
    pub event_id: String,
    pub action: String,
    pub actor: String,
    pub from_status: String,
    pub acknowledged_duplicate_risk: bool,
    pub affected: i64,
    pub at_ms: i64,
    pub reason: Option<String>,
}

/// A bulk action's one audit row.
#[derive(Clone, Debug)]
pub struct NewAuditEntry {
    /// What the action covered (for a bulk retry, its filter).
    pub subject: String,
    pub action: String,
    pub actor: String,
    pub from_status: String,
    pub acknowledged_duplicate_risk: bool,
    pub affected: i64,
    /// Why, in the operator's words (a skipped delivery's reason).
    pub reason: Option<String>,
}

/// Read-only queries the console and the admin API make of the outbox. Every one is
/// a single statement, whatever the number of rows it covers.
#[async_trait]
pub trait DeliveryReads: Send + Sync {
    /// The lanes whose head waits for an operator, longest blocked first (at
    /// most `limit`), and how many lanes are open at all.
    async fn blocked_lanes(
        &self,
        limit: u32,
    ) -> Result<(Vec<super::events::BlockedLane>, i64), StoreError>;
    /// `(parent_id, status, count)` for every event of these parents: one grouped query.
    async fn status_counts(
        &self,
        parent_type: &str,
        parent_ids: &[String],
    ) -> Result<Vec<(String, vocab::DeliveryStatus, i64)>, StoreError>;
    /// How many events match `filter` (its limit and cursor ignored), counting at
    /// most `cap`.
    async fn count_events(&self, filter: &EventFilter, cap: u32) -> Result<i64, StoreError>;
    /// Writes one audit row.
    async fn record_audit(&self, entry: &NewAuditEntry) -> Result<(), StoreError>;
    /// Events matching `filter`, newest first.
    async fn list_events(
        &self,
        filter: &EventFilter,
    ) -> Result<Vec<super::events::EventRecord>, StoreError>;
    /// The attempt logs of several events, as `(event_id, attempt)` in attempt order.
    async fn attempts_of(
        &self,
        event_ids: &[String],
    ) -> Result<Vec<(String, super::events::AttemptRecord)>, StoreError>;
    /// Audit rows, newest first, before the `id` cursor (ids are UUIDv7: time-ordered).
    async fn audit(
        &self,
        before_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError>;
    /// Runs, events, approvals and records whose id is `needle`; when none is,
    /// those whose id starts or ends with it (case as given), at most `limit` of
    /// each table.
    async fn find_ids(&self, needle: &str, limit: u32) -> Result<Vec<IdMatch>, StoreError>;
    /// Failed and uncertain events grouped by kind, source, destination and cause
    /// (errors sorted by `rules`, as [`CauseRules`] says), largest groups first,
    /// at most `limit`.
    async fn failure_groups(
        &self,
        rules: &[(&'static str, i64)],
        limit: u32,
    ) -> Result<Vec<FailureGroup>, StoreError>;
    /// The rollup rows (`store::rollups`) from `since_ms` on, oldest first, as
    /// fine as `grain` says, and the store's clock.
    async fn delivery_rollups(
        &self,
        since_ms: i64,
        grain: super::rollups::RollupGrain,
    ) -> Result<(Vec<super::rollups::DeliveryMinute>, i64), StoreError>;
}

/// What a searched id names (the console's word too).
pub use vocab::IdKind;

/// A row whose id matched a search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdMatch {
    pub kind: IdKind,
    pub id: String,
    /// Whether the id is the needle itself (not a part of it).
    pub exact: bool,
    /// What it belongs to: an event's parent (`run`/`approval`, its id); an
    /// approval's or a record's object (and the approval's record id); for a
    /// run, `run` and its type.
    pub owner_type: String,
    pub owner_id: String,
}

/// A destination's circuit breaker as every node sees it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BreakerRecord {
    /// The destination's origin (`scheme://host:port`).
    pub destination: String,
    /// The configured route name (or `callback`).
    pub route: String,
    /// `open`, `half_open` or `closed`.
    pub state: String,
    /// Consecutive failures that opened it.
    pub failures: i64,
    /// The current wait before a probe, in milliseconds (doubles per failed probe).
    pub open_ms: i64,
    pub opened_at: Option<i64>,
    pub probe_at: Option<i64>,
    pub updated_at: i64,
}

/// The shared circuit-breaker state (DESIGN §3, issue 10): state changes only;
/// failures are counted in each node's memory.
#[async_trait]
pub trait DestinationStore: Send + Sync {
    /// Every destination that has a breaker row.
    async fn breakers(&self) -> Result<Vec<BreakerRecord>, StoreError>;
    /// The breakers that are not closed (what every node's sync reads: as many as
    /// there are sick destinations, not every destination ever seen).
    async fn unclosed_breakers(&self) -> Result<Vec<BreakerRecord>, StoreError>;
    /// Opens (or reopens) the breaker with a probe `open_ms` from now, and pushes
    /// the destination's pending events to that probe time; returns the row.
    async fn open_breaker(
        &self,
        destination: &str,
        route: &str,
        failures: i64,
        open_ms: i64,
    ) -> Result<BreakerRecord, StoreError>;
    /// Takes the half-open probe: true for exactly one caller once the probe time
    /// has come (or a probe abandoned for `stale_ms` may be taken over).
    async fn start_probe(&self, destination: &str, stale_ms: i64) -> Result<bool, StoreError>;
    /// Closes the breaker and makes the destination's waiting events due now.
    /// Returns the state it was in (None: no such breaker, or already closed)
    /// and how many events were released. An operator's close is audited in the
    /// same transaction: `audit`, its `from_status` and `affected` set to what the
    /// close found and released.
    async fn close_breaker(
        &self,
        destination: &str,
        audit: Option<&NewAuditEntry>,
    ) -> Result<Option<(String, u64)>, StoreError>;
}

/// One record as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub id: String,
    pub object: String,
    pub fields: serde_json::Map<String, serde_json::Value>,
    /// 1 at creation, bumped by every write that changes a field.
    pub version: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// Counts of replay events by status.
#[derive(
    utoipa::ToSchema, Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize,
)]
pub struct StatusCount {
    pub status: String,
    pub count: i64,
}

/// The approvals source's definitions and instances (DESIGN §8): versioned
/// process definitions, approval instances with their nodes and work items.
#[async_trait]
pub trait ApprovalRepository: Transactions {
    /// Stores `spec` as a new version of its definition unless the latest version
    /// already says the same; returns the version that is now current. Two nodes
    /// loading the same config at once race on the version's key: the loser reads
    /// again and finds the winner's identical version.
    async fn put_definition(
        &self,
        spec: &DefinitionSpec,
        created_by: &str,
    ) -> Result<Definition, StoreError>;
    /// One version of a definition (the latest when `version` is `None`).
    async fn definition(
        &self,
        id: &str,
        version: Option<i64>,
    ) -> Result<Option<Definition>, StoreError>;
    /// [`ApprovalRepository::definition`] inside `tx` (SQLite has one connection: a read on
    /// the pool while `tx` is open would wait for it).
    async fn definition_in(
        &self,
        tx: &mut WriteTx,
        id: &str,
        version: Option<i64>,
    ) -> Result<Option<Definition>, StoreError>;
    /// The latest version of every definition.
    async fn definitions(&self) -> Result<Vec<Definition>, StoreError>;
    /// Creates an instance at its first step, with the step's node and work item.
    /// `id` is the caller's: a fresh one for a record's submit, the deterministic
    /// [`vocab::run_approvals::run_approval_id`] for a run's, whose primary key then
    /// makes a second opening fail (`AlreadyExists`) instead of opening it twice.
    async fn create_instance(
        &self,
        tx: &mut WriteTx,
        id: &str,
        definition: &Definition,
        record_id: &str,
        submitted_by: &str,
    ) -> Result<Instance, StoreError>;
    /// The approvals of one target (a record, or a run under
    /// [`vocab::approvals::RUN_OBJECT`]), newest first.
    async fn instances_of(
        &self,
        object: &str,
        record_id: &str,
    ) -> Result<Vec<Instance>, StoreError>;
    /// The pending approval of a record, if any (read inside `tx`, after the
    /// record's lock, so two submits of one record cannot both pass).
    async fn pending_instance_of(
        &self,
        tx: &mut WriteTx,
        record_id: &str,
    ) -> Result<Option<String>, StoreError>;
    /// Opens step `index`: its node and its approver's work item.
    async fn open_step(
        &self,
        tx: &mut WriteTx,
        instance_id: &str,
        index: i64,
        step: &vocab::approvals::Step,
    ) -> Result<(), StoreError>;
    /// Closes step `index`'s still-pending node and work items with `status`.
    async fn close_step(
        &self,
        tx: &mut WriteTx,
        instance_id: &str,
        index: i64,
        status: InstanceStatus,
        actor: &str,
    ) -> Result<(), StoreError>;
    /// Reads an instance inside `tx`, locking it until `tx` ends.
    async fn lock_instance(
        &self,
        tx: &mut WriteTx,
        id: &str,
    ) -> Result<Option<Instance>, StoreError>;
    async fn instance(&self, id: &str) -> Result<Option<Instance>, StoreError>;
    /// Instances, newest first.
    async fn instances(&self, limit: u32) -> Result<Vec<Instance>, StoreError>;
    /// Moves a locked instance to `status` at `step_index`, guarded on the sequence
    /// read under the lock; the current node and its work items follow when
    /// `close_open` is set (every still-pending one takes `status`).
    async fn transition_instance(
        &self,
        tx: &mut WriteTx,
        instance: &Instance,
        status: InstanceStatus,
        step_index: i64,
        actor: &str,
        close_open: bool,
    ) -> Result<Instance, StoreError>;
    async fn nodes(&self, instance_id: &str) -> Result<Vec<Node>, StoreError>;
    async fn work_items(&self, instance_id: &str) -> Result<Vec<WorkItem>, StoreError>;
}

/// The outbox statements only the approvals source needs: completing a replay
/// inside its own write transaction, skipping a prompt no longer owed, and the
/// replay shelf's reads.
#[async_trait]
pub trait ApprovalEvents: Send + Sync {
    /// Completes a claimed event inside `tx`, fenced on its lease: the replay's
    /// mutation, its completion and its leaving its record's lane commit together.
    /// `false`: the lease is lost and the caller must roll `tx` back.
    async fn complete_in(
        &self,
        tx: &mut WriteTx,
        event_id: &str,
        lease_token: &str,
    ) -> Result<bool, StoreError>;
    /// Skips an event still waiting to be claimed (a prompt whose approval was
    /// decided or recalled). One conditional statement: a claimed prompt is left
    /// to its handler, which re-checks the approval.
    async fn skip_pending_in(
        &self,
        tx: &mut WriteTx,
        event_id: &str,
        reason: &str,
    ) -> Result<bool, StoreError>;
    /// Events of one kind by status (the replay status endpoint).
    async fn kind_counts(&self, kind: &str) -> Result<Vec<StatusCount>, StoreError>;
    /// Events of one kind in one status, newest first (the failed-replay shelf).
    async fn events_of_kind(
        &self,
        kind: &str,
        status: &str,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError>;
}

/// Business records in the approvals store, which FieldUpdates write.
#[async_trait]
pub trait RecordRepository: Transactions {
    async fn create_record(
        &self,
        object: &str,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Record, StoreError>;
    /// [`RecordRepository::create_record`] inside `tx` (with what else commits
    /// with it: an idempotency key's answer).
    async fn create_record_in(
        &self,
        tx: &mut WriteTx,
        object: &str,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Record, StoreError>;
    async fn get_record(&self, id: &str) -> Result<Option<Record>, StoreError>;
    /// Reads a record inside `tx`, locking it until `tx` ends.
    async fn lock_record(&self, tx: &mut WriteTx, id: &str) -> Result<Option<Record>, StoreError>;
    /// Records of one object, oldest first, after `after` (keyset pagination).
    async fn list_records(
        &self,
        object: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError>;
    /// Records of one object, newest first, before `before` (the console's pages).
    async fn recent_records(
        &self,
        object: &str,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError>;
    /// Writes a locked record's fields inside `tx`, guarded on the version read
    /// under the lock; returns the record as written.
    async fn write_record_fields(
        &self,
        tx: &mut WriteTx,
        record: &Record,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Record, StoreError>;
}

/// Everything the approvals source asks of its store.
pub trait ApprovalsStore:
    ApprovalRepository + ApprovalEvents + RecordRepository + OutboxStore + IdempotencyKeys
{
}

impl<S: ApprovalRepository + ApprovalEvents + RecordRepository + OutboxStore + IdempotencyKeys>
    ApprovalsStore for S
{
}

/// Which kinds a retention chunk of settled events takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KindScope {
    /// Every kind but these (their own retention is set apart).
    AllBut(Vec<String>),
    /// This kind only.
    Only(String),
}

/// What a retention chunk removes: rows past their retention (ages in ms, by the
/// store's clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expired {
    /// Settled events in `status` whose last change (and last due time) is older;
    /// their attempt logs and dead letters go with them.
    Events {
        status: vocab::DeliveryStatus,
        kinds: KindScope,
        older_than_ms: i64,
        /// `retention.runs`: a terminal run past it whose last event the chunk
        /// removes goes in the same chunk, so the runs target does not walk
        /// past every old run that still owns an event to find it.
        runs_older_than_ms: Option<i64>,
    },
    /// Terminal runs older than this that own no event any more.
    Runs { older_than_ms: i64 },
    /// Audit rows older than this.
    Audit { older_than_ms: i64 },
    /// Idempotency keys older than this (never archived: they hold answers, not
    /// history).
    IdempotencyKeys { older_than_ms: i64 },
}

impl Expired {
    /// The retention these rows are past.
    pub fn older_than_ms(&self) -> i64 {
        match self {
            Expired::Events { older_than_ms, .. }
            | Expired::Runs { older_than_ms }
            | Expired::Audit { older_than_ms }
            | Expired::IdempotencyKeys { older_than_ms } => *older_than_ms,
        }
    }
}

/// Rows one retention chunk removed, per table (the chunk's own table first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkRemoved {
    pub tables: Vec<(&'static str, u64)>,
    /// The age (ms, by the store's clock) of the youngest row the chunk chose, by
    /// the time its retention counts from (an event's or run's last change, an
    /// audit row's time, a key's creation); `None` for an empty chunk. Rows are
    /// chosen oldest first, so this past the retention by much means everything
    /// the chunk took was overdue by at least that much.
    pub youngest_age_ms: Option<i64>,
}

impl ChunkRemoved {
    /// Rows of the chunk's own table (events, runs, audit rows or keys).
    pub fn primary(&self) -> u64 {
        self.tables.first().map(|(_, n)| *n).unwrap_or(0)
    }
}

/// Where removed rows are written before their delete commits (`archive_dir`).
#[async_trait]
pub trait ArchiveSink: Send + Sync {
    /// Appends `rows` of `table` (one JSON object each) and makes them durable
    /// (written and fsynced) before returning.
    async fn append(
        &self,
        table: &'static str,
        rows: Vec<serde_json::Value>,
    ) -> Result<(), std::io::Error>;
}

/// The retention pass's storage (issue 21).
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Takes (or renews) the lease `name` for `holder` for `lease_ms`: true when
    /// `holder` holds it now. One node at a time runs what the lease guards.
    async fn take_lease(&self, name: &str, holder: &str, lease_ms: i64)
        -> Result<bool, StoreError>;
    /// Gives the lease back, if `holder` holds it.
    async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError>;
    /// Removes at most `limit` rows that `expired` names, oldest first, in one
    /// transaction; with `archive`, they (and their attempt logs and dead letters)
    /// are appended to it before the delete commits.
    async fn remove_expired(
        &self,
        expired: &Expired,
        limit: u32,
        archive: Option<&dyn ArchiveSink>,
    ) -> Result<ChunkRemoved, StoreError>;
    /// For each settled state, how long ago the event first due among those
    /// retained in it last changed (ms): the age of the oldest retained row, read
    /// from the due-time index rather than by scanning the state.
    async fn oldest_retained(&self) -> Result<Vec<(vocab::DeliveryStatus, i64)>, StoreError>;
}
