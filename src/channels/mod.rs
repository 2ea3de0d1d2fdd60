//! Channels: how an event's side effect leaves Herald. Each is a handler the
//! outbox engine runs for one kind.

pub mod webhook;
