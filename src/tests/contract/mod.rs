//! The store contract by port: every engine must pass every test here (each
//! function runs once per engine through `testkit::contract_tests!`).

mod accounts;
mod approvals;
mod delivery_reads;
mod group_commit;
mod outbox;
mod outbox_faults;
mod outbox_replays;
mod runs;
mod schema;
