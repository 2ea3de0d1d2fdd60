//! Herald: a durable side-effect engine with an operator console.
//!
//! Map of the crate, top to bottom (see `docs/ARCHITECTURE.md` for the whole picture):
//! - [`cli`], [`server`], [`runtime`], [`config`], [`config_check`]: the `herald` binary, its
//!   settings and the outbox machinery built from the configured sources;
//! - [`http`]: the console's adapters, the JSON and admin APIs, sign-in, probes;
//! - [`service`]: every operation with its permission check;
//! - the sources, [`jobs`] and [`approvals`]: what each transition owes, and the
//!   handlers of their kinds;
//! - [`outbox`]: the durable engine (claims, leases, settling, destinations) and
//!   best-effort sending where the store keeps no outbox;
//! - [`routes`] and [`channels`]: what a destination is, and the senders;
//! - [`store`]: the storage port and its SQL adapter for SQLite, PostgreSQL and MySQL;
//! - beside them [`auth`], [`batcher`], [`clock`]; below all, the `vocab` crate.

#![forbid(unsafe_code)]

pub mod approvals;
pub mod auth;
pub mod batcher;
pub mod changes;
pub mod channels;
pub mod cli;
pub mod clock;
pub mod config;
pub mod config_check;
pub mod http;
pub mod jobs;
pub mod outbox;
pub mod routes;
pub mod runtime;
pub mod server;
pub mod service;
pub mod store;
pub mod telemetry;
