//! The Records page's server functions (issue 23, item 7). The server implements
//! [`RecordsPort`](crate::port::RecordsPort) over its record and approval
//! services, where `records:read` is checked.

use leptos::prelude::*;

use super::Failure;
use crate::dto::{RecordDetail, RecordsPage};

#[cfg(feature = "ssr")]
mod server {
    use std::sync::Arc;

    use leptos::prelude::*;

    use crate::api::server::fail as failure;
    pub use crate::api::server::{from_port as fail, viewer};
    use crate::api::Failure;
    use crate::port::RecordsPort;

    pub fn port() -> Result<Arc<dyn RecordsPort>, Failure> {
        use_context::<Arc<dyn RecordsPort>>()
            .ok_or_else(|| failure(500, "records port missing from context"))
    }
}

#[server(prefix = "/console-api", endpoint = "records")]
pub async fn list_records(
    object: Option<String>,
    before: Option<String>,
) -> Result<RecordsPage, Failure> {
    let viewer = server::viewer();
    server::port()?
        .records(
            viewer.as_ref(),
            object.filter(|o| !o.is_empty()),
            before.filter(|b| !b.is_empty()),
        )
        .await
        .map_err(server::fail)
}

#[server(prefix = "/console-api", endpoint = "record")]
pub async fn get_record(object: String, id: String) -> Result<RecordDetail, Failure> {
    let viewer = server::viewer();
    server::port()?
        .record(viewer.as_ref(), object, id)
        .await
        .map_err(server::fail)
}
