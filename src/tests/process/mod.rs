//! Real `herald` processes: SIGKILLed mid-batch and mid-replay, SIGTERMed with work
//! in flight, several nodes on one store or a Galera cluster, destination
//! isolation, settle outages, PostgreSQL upkeep, delivery signals, and the command
//! line with bad input.

mod approvals_crash;
mod cli;
mod crash;
mod delivery;
mod group_crash;
mod isolation;
mod multi_node;
mod settle_outage;
mod upkeep;
