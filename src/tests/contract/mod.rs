//! The store contract by port, one file a port: every engine must pass it. Most
//! functions run once per engine through `testkit::contract_tests!`; a few need
//! one engine's feature (a deferred constraint, a trigger) and say so.

mod accounts;
mod approvals;
mod delivery_reads;
mod destinations;
mod group_commit;
mod hand_off;
mod lanes;
mod operator_actions;
mod outbox;
mod outbox_faults;
mod outbox_replays;
mod retention;
mod rollups;
mod runs;
mod schema;
