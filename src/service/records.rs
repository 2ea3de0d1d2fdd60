//! Generic record CRUD with its permission checks. Objects are API names;
//! `_System_*` objects are never writable here and readable only with `data:read`
//! (Herald's own outbox is not a record object and is never reachable here).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use vocab::{Permission, Viewer};

use super::idempotency::{Answered, IdempotencyKey, Keyed};
use super::{format_ms, require, ServiceError};
use crate::approvals::model::{is_system_object, valid_name};
use crate::store::ports::{IdempotencyKeys, RecordRepository};
use crate::store::{Record, StoreError};

pub const MAX_FIELDS_BYTES: usize = 64 * 1024;

/// A record as the API returns it.
#[derive(utoipa::ToSchema, Debug, Serialize, Deserialize, PartialEq)]
pub struct RecordView {
    pub id: String,
    pub object: String,
    #[schema(value_type = Object)]
    pub fields: serde_json::Map<String, serde_json::Value>,
    pub version: i64,
    pub created_at: String,
    pub updated_at: String,
}

/// The body of `POST /api/v1/records/{object}` and `PATCH …/{id}`.
#[derive(utoipa::ToSchema, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecordInput {
    #[schema(value_type = Object)]
    pub fields: serde_json::Map<String, serde_json::Value>,
}

pub fn view(record: Record) -> RecordView {
    RecordView {
        id: record.id,
        object: record.object,
        fields: record.fields,
        version: record.version,
        created_at: format_ms(record.created_at_ms),
        updated_at: format_ms(record.updated_at_ms),
    }
}

#[derive(Clone)]
pub struct RecordService {
    store: Arc<dyn RecordRepository>,
    /// Creates sent with an `Idempotency-Key` (the key commits with the record).
    keys: Option<Arc<dyn IdempotencyKeys>>,
}

fn check_object(object: &str) -> Result<(), ServiceError> {
    if valid_name(object) {
        Ok(())
    } else {
        Err(ServiceError::invalid(
            "object",
            format!("{object:?} is not an object API name (a letter, then letters, digits or _; at most 64)"),
        ))
    }
}

fn check_fields(fields: &serde_json::Map<String, serde_json::Value>) -> Result<(), ServiceError> {
    if let Some(bad) = fields.keys().find(|k| !valid_name(k)) {
        return Err(ServiceError::invalid(
            "fields",
            format!("{bad:?} is not a field API name"),
        ));
    }
    let size = serde_json::Value::Object(fields.clone()).to_string().len();
    if size > MAX_FIELDS_BYTES {
        return Err(ServiceError::TooLarge {
            field: "fields",
            message: format!("are {size} bytes of JSON; the limit is {MAX_FIELDS_BYTES}"),
        });
    }
    Ok(())
}

/// The record `id` if it exists under `object`: an id of another object's record is
/// as unknown as a missing one.
fn of_object(record: Option<Record>, object: &str, id: &str) -> Result<Record, ServiceError> {
    match record {
        Some(record) if record.object == object => Ok(record),
        _ => Err(ServiceError::NotFound(format!("{object} record {id:?}"))),
    }
}

impl RecordService {
    pub fn new(store: impl RecordRepository + 'static) -> Self {
        RecordService {
            store: Arc::new(store),
            keys: None,
        }
    }

    /// Lets creates carry an `Idempotency-Key`, kept in `keys` (the records' store).
    pub fn with_idempotency_keys(mut self, keys: Arc<dyn IdempotencyKeys>) -> Self {
        self.keys = Some(keys);
        self
    }

    fn require_write<'v>(
        viewer: Option<&'v Viewer>,
        object: &str,
    ) -> Result<&'v Viewer, ServiceError> {
        let viewer = require(viewer, Permission::RecordsWrite)?;
        check_object(object)?;
        if is_system_object(object) {
            return Err(ServiceError::Refused(format!(
                "{object} is a system object; generic record writes never reach it"
            )));
        }
        Ok(viewer)
    }

    fn require_read<'v>(
        viewer: Option<&'v Viewer>,
        object: &str,
    ) -> Result<&'v Viewer, ServiceError> {
        let viewer = require(viewer, Permission::RecordsRead)?;
        check_object(object)?;
        if is_system_object(object) {
            require(Some(viewer), Permission::DataRead)?;
        }
        Ok(viewer)
    }

    pub async fn create(
        &self,
        viewer: Option<&Viewer>,
        object: &str,
        input: RecordInput,
    ) -> Result<RecordView, ServiceError> {
        let viewer = Self::require_write(viewer, object)?;
        check_fields(&input.fields)?;
        let record = self.store.create_record(object, &input.fields).await?;
        tracing::info!(record_id = %record.id, object, by = %viewer.name, "record created");
        Ok(view(record))
    }

    /// [`RecordService::create`] under an idempotency key: the record and the
    /// key's answer commit together; a repeat gets the original record.
    pub async fn create_once(
        &self,
        viewer: Option<&Viewer>,
        object: &str,
        input: RecordInput,
        key: &IdempotencyKey,
    ) -> Result<Answered, ServiceError> {
        let viewer = Self::require_write(viewer, object)?;
        check_fields(&input.fields)?;
        let Some(keys) = &self.keys else {
            return Err(ServiceError::CapabilityUnavailable(
                "idempotency keys are not kept on this server".into(),
            ));
        };
        let keyed = Keyed::new(&viewer.name, key, "create_record", &(object, &input));
        if let Some(earlier) = keyed.earlier(&**keys).await? {
            return Ok(earlier);
        }
        let mut tx = self.store.begin_write().await?;
        if let Some(twin) = keyed.claim_in(&**keys, &mut tx).await? {
            return Ok(twin);
        }
        let record = self
            .store
            .create_record_in(&mut tx, object, &input.fields)
            .await?;
        tracing::info!(record_id = %record.id, object, by = %viewer.name, "record created under an idempotency key");
        let answered = keyed
            .answer_in(&**keys, &mut tx, 201, &view(record))
            .await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(answered)
    }

    pub async fn get(
        &self,
        viewer: Option<&Viewer>,
        object: &str,
        id: &str,
    ) -> Result<RecordView, ServiceError> {
        Self::require_read(viewer, object)?;
        let record = of_object(self.store.get_record(id).await?, object, id)?;
        Ok(view(record))
    }

    pub async fn list(
        &self,
        viewer: Option<&Viewer>,
        object: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RecordView>, ServiceError> {
        Self::require_read(viewer, object)?;
        let records = self.store.list_records(object, after, limit).await?;
        Ok(records.into_iter().map(view).collect())
    }

    /// A page of an object's records, newest first, before the `before` cursor
    /// (the console's Records page).
    pub async fn recent(
        &self,
        viewer: Option<&Viewer>,
        object: &str,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RecordView>, ServiceError> {
        Self::require_read(viewer, object)?;
        let records = self.store.recent_records(object, before, limit).await?;
        Ok(records.into_iter().map(view).collect())
    }

    /// Merges `input.fields` into the record (a `null` value stores null).
    pub async fn update(
        &self,
        viewer: Option<&Viewer>,
        object: &str,
        id: &str,
        input: RecordInput,
    ) -> Result<RecordView, ServiceError> {
        let viewer = Self::require_write(viewer, object)?;
        check_fields(&input.fields)?;
        let mut tx = self.store.begin_write().await?;
        let record = of_object(self.store.lock_record(&mut tx, id).await?, object, id)?;
        let mut fields = record.fields.clone();
        for (k, v) in input.fields {
            fields.insert(k, v);
        }
        check_fields(&fields)?;
        let record = self
            .store
            .write_record_fields(&mut tx, &record, &fields)
            .await?;
        tx.commit()
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?;
        tracing::info!(record_id = %record.id, object, by = %viewer.name, "record updated");
        Ok(view(record))
    }
}
