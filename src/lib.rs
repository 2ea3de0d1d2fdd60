//! Herald: a durable side-effect engine with an operator console.
//!
//! Map of the crate (see `docs/ARCHITECTURE.md` for the whole picture):
//! - [`config`]: settings from flags, `HERALD_*` variables and a TOML file;
//! - [`store`]: the storage port and its SQL adapter for SQLite, PostgreSQL and MySQL;
//! - [`service`]: every operation with its permission check;
//! - [`best_effort`]: once-only sending on a store without a durable outbox;
//! - [`auth`]: passwords, API tokens, sessions, sign-in throttling;
//! - [`http`]: the console, the JSON API and health probes;
//! - [`cli`] and [`server`]: the `herald` binary.

#![forbid(unsafe_code)]

pub mod approvals;
pub mod auth;
pub mod batcher;
pub mod channels;
pub mod cli;
pub mod clock;
pub mod config;
pub mod http;
pub mod jobs;
pub mod outbox;
pub mod routes;
pub mod runtime;
pub mod server;
pub mod service;
pub mod store;
