//! Herald's integration tests: the storage contract against real SQLite, PostgreSQL
//! and MariaDB databases, and the HTTP surface against a real server on loopback.

mod support;

mod approvals_contract;
mod approvals_crash;
mod approvals_http;
mod cli;
mod crash;
mod http_api;
mod notifications;
mod outbox_contract;
mod store_contract;
