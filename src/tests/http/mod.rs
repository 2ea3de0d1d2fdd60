//! A real Herald server in this process on a loopback port, spoken to over HTTP:
//! the runs API, the console and admin API, approvals, roles and sessions, sign-in
//! abuse, and the ephemeral `memory://` store.

mod approvals;
mod batch_transitions;
mod console;
mod memory_store;
mod roles_and_sessions;
mod runs;
mod sign_in_abuse;
