//! Real `herald` processes: SIGKILLed mid-batch, mid-replay and mid-probe, SIGTERMed
//! with work in flight, several nodes on one store or a Galera cluster, destination
//! isolation, settle outages, PostgreSQL upkeep, delivery signals, and the command
//! line with bad input.

mod approvals_crash;
mod backup;
mod breaker;
mod cli;
mod connections;
mod crash;
mod delivery;
mod group_crash;
mod idempotency_crash;
mod isolation;
mod live;
mod multi_node;
mod openapi;
mod ordered;
mod prometheus;
mod record_lanes;
mod retention_crash;
mod run_approvals_crash;
mod settle_outage;
mod traces;
mod upkeep;
