//! The approvals source's data — process definitions, approval instances with
//! their nodes and work items, the frozen payloads their transitions owe — are
//! shared vocabulary ([`vocab::approvals`]): the store reads and writes them, the
//! console shows them. The source names them here.

pub use vocab::approvals::*;
