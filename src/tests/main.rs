//! Herald's integration tests: the storage contract against real SQLite, PostgreSQL
//! and MariaDB databases, and the HTTP surface against a real server on loopback.

mod cluster;
mod faults;
mod support;

mod approvals_contract;
mod approvals_crash;
mod approvals_http;
mod batch_transitions;
mod claim_faults;
mod cli;
mod console_contract;
mod console_http;
mod contract_gaps;
mod crash;
mod delivery_gaps;
mod destinations;
mod email;
mod group_commit;
mod group_crash;
mod handler_crash;
mod http_api;
mod isolation;
mod memory_store;
mod multi_node;
mod notifications;
mod outbox_contract;
mod roles_and_sessions;
mod run_counts;
mod settle_outage;
mod settle_replay;
mod sign_in_abuse;
mod store_contract;
mod upkeep;
