//! The outbox's data: events to enqueue, events as claimed, and how an attempt
//! settles. The shapes are the store port's ([`crate::store::events`]); the
//! outbox names them here for its producers and handlers.

pub use crate::store::events::*;
