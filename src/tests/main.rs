//! Herald's integration tests, grouped by what they prove. Shared fixtures (real
//! databases, servers, processes and receivers) are the `testkit` crate's.
//!
//! - [`contract`]: the store's ports, each run on SQLite, PostgreSQL and MariaDB
//!   (River's `riverdrivertest` layout: one file a port).
//! - [`http`]: a real server in this process, spoken to over HTTP on loopback.
//! - [`delivery`]: the outbox delivering to real receivers (webhook, chat, SMTP),
//!   with retries, dead letters and destination health.
//! - [`process`]: real `herald` processes, SIGKILLed, SIGTERMed, several at once,
//!   and the command line.

mod contract;
mod delivery;
mod http;
mod process;
