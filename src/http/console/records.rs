//! The Records page's port (`app::port::RecordsPort`) over the record service
//! (`records:read`, the object checked) and the approval service (a record's
//! approval history, shown as the Approvals page shows an approval).

use async_trait::async_trait;

use app::dto::{RecordDetail, RecordField, RecordRow, RecordsPage, RECORDS_PAGE};
use app::port::{ConsoleError, RecordsPort};
use vocab::approvals::is_system_object;
use vocab::Viewer;

use super::approvals::detail_view;
use crate::http::error::console_error;
use crate::service::approvals::ApprovalService;
use crate::service::records::{RecordService, RecordView};

pub struct RecordsConsole {
    pub records: RecordService,
    pub approvals: ApprovalService,
}

fn row(record: RecordView) -> RecordRow {
    RecordRow {
        id: record.id,
        object: record.object,
        version: record.version,
        updated_at: record.updated_at,
        fields: record
            .fields
            .into_iter()
            .map(|(name, value)| RecordField {
                name,
                value: value.to_string(),
            })
            .collect(),
    }
}

#[async_trait]
impl RecordsPort for RecordsConsole {
    async fn records(
        &self,
        viewer: Option<&Viewer>,
        object: Option<String>,
        before: Option<String>,
    ) -> Result<RecordsPage, ConsoleError> {
        let mut objects: Vec<String> = self
            .approvals
            .definitions(viewer)
            .await
            .map_err(console_error)?
            .into_iter()
            .map(|definition| definition.object)
            // Herald's own objects (runs among them) are not business data.
            .filter(|object| !is_system_object(object))
            .collect();
        objects.sort();
        objects.dedup();
        let Some(object) = object.or_else(|| objects.first().cloned()) else {
            return Ok(RecordsPage::default());
        };
        // One more than a page says whether an older page follows.
        let mut records = self
            .records
            .recent(viewer, &object, before.as_deref(), RECORDS_PAGE + 1)
            .await
            .map_err(console_error)?;
        let next_cursor = (records.len() > RECORDS_PAGE as usize).then(|| {
            records.truncate(RECORDS_PAGE as usize);
            records.last().map(|r| r.id.clone()).unwrap_or_default()
        });
        Ok(RecordsPage {
            objects,
            object: Some(object),
            records: records.into_iter().map(row).collect(),
            next_cursor,
            paged: before.is_some(),
        })
    }

    async fn record(
        &self,
        viewer: Option<&Viewer>,
        object: String,
        id: String,
    ) -> Result<RecordDetail, ConsoleError> {
        let record = self
            .records
            .get(viewer, &object, &id)
            .await
            .map_err(console_error)?;
        let approvals = self
            .approvals
            .of_record(viewer, &object, &id)
            .await
            .map_err(console_error)?;
        Ok(RecordDetail {
            record: row(record),
            approvals: approvals
                .into_iter()
                .map(|detail| detail_view(detail, viewer))
                .collect(),
        })
    }
}
