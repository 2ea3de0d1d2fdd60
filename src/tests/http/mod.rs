//! A real Herald server in this process on a loopback port, spoken to over HTTP:
//! the runs API, the console and admin API, approvals, roles and sessions, sign-in
//! abuse, a store locked by another session, the producer API's in-flight bound,
//! configuration notices, the overview, one console over two databases, and the
//! ephemeral `memory://` store.

mod approvals;
mod batch_transitions;
mod config_notices;
mod console;
mod export;
mod idempotency;
mod lanes;
mod locked_store;
mod memory_store;
mod overload;
mod overview;
mod records;
mod roles_and_sessions;
mod run_approvals;
mod runs;
mod sign_in_abuse;
mod store_outages;
mod two_stores;
mod users;
