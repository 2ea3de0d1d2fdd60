//! The jobs source's kinds.

pub const CALLBACK: &str = "callback";
pub const DELIVERY: &str = "delivery";
pub const DEAD_LETTER: &str = "dead_letter";
