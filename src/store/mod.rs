//! Storage: the port (traits in [`ports`]) and its one SQL adapter, shared by the
//! SQLite, PostgreSQL and MySQL/MariaDB engines. Engine differences live in
//! [`engine`]; everything else is written once.

mod approvals;
mod audit;
pub mod backup;
mod deliveries;
mod destinations;
pub mod engine;
mod error;
pub mod events;
mod fault;
pub mod group_commit;
mod idempotency;
mod lanes;
mod outbox;
pub mod ports;
mod records;
pub mod retention;
pub mod rollups;
pub mod row;
mod runs;
mod sessions;
mod sql;
mod tokens;
pub mod units;
mod upkeep;
mod users;

pub use engine::{Durability, Engine};
pub use error::StoreError;
pub use fault::StoreFault;
pub use group_commit::{GroupCommitter, GroupLimits, UnitFuture};
pub use ports::{Record, StatusCount};
pub use sql::{SqlStore, StoreOptions};
pub use tokens::MAX_LISTED_TOKENS;
pub use units::WriteUnits;
pub use users::MAX_LISTED_USERS;
