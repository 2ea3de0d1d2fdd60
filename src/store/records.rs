//! Records: business data in the approvals store (object API name, id, fields as
//! JSON). FieldUpdates mutate them; generic CRUD reaches them through the service.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Any;

use super::error::StoreError;
use super::ports::{Record, RecordRepository, Transactions, WriteTx};
use super::row::{int, text};
use super::sql::SqlStore;

const RECORD_COLUMNS: &str = "id, object, fields, version, created_at, updated_at";

fn record_from_row(row: &AnyRow) -> Result<Record, StoreError> {
    let fields = text(row, "fields")?;
    let fields = match serde_json::from_str(&fields) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => {
            return Err(StoreError::Corrupt(
                "record fields are not a JSON object".into(),
            ))
        }
    };
    Ok(Record {
        id: text(row, "id")?,
        object: text(row, "object")?,
        fields,
        version: int(row, "version")?,
        created_at_ms: int(row, "created_at")?,
        updated_at_ms: int(row, "updated_at")?,
    })
}

fn fields_json(fields: &serde_json::Map<String, serde_json::Value>) -> String {
    serde_json::Value::Object(fields.clone()).to_string()
}

impl SqlStore {
    async fn fetch_record<'e, E>(
        &self,
        executor: E,
        id: &str,
        lock: bool,
    ) -> Result<Option<Record>, StoreError>
    where
        E: sqlx::Executor<'e, Database = Any>,
    {
        let lock = if lock { self.engine.lock_rows() } else { "" };
        let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE id = ?{lock}");
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(id)
            .fetch_optional(executor)
            .await?;
        row.as_ref().map(record_from_row).transpose()
    }
}

impl SqlStore {
    /// One keyset page of an object's records: ids after `cursor` oldest first,
    /// or (`newest_first`) before it, newest first, `""` meaning from the end.
    async fn records_page(
        &self,
        object: &str,
        cursor: &str,
        newest_first: bool,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        let (bound, order) = match (newest_first, cursor.is_empty()) {
            (false, _) => ("AND id > ?", "id"),
            (true, true) => ("", "id DESC"),
            (true, false) => ("AND id < ?", "id DESC"),
        };
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM records WHERE object = ? {bound} ORDER BY {order} LIMIT {}",
            limit.clamp(1, 500)
        );
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql).bind(object);
        if !bound.is_empty() {
            query = query.bind(cursor);
        }
        let rows = query.fetch_all(&self.pool).await?;
        rows.iter().map(record_from_row).collect()
    }
}

#[async_trait]
impl RecordRepository for SqlStore {
    async fn create_record(
        &self,
        object: &str,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Record, StoreError> {
        let mut tx = self.begin_write().await?;
        let record = self.create_record_in(&mut tx, object, fields).await?;
        tx.commit().await?;
        Ok(record)
    }

    async fn create_record_in(
        &self,
        tx: &mut WriteTx,
        object: &str,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Record, StoreError> {
        let id = uuid::Uuid::now_v7().to_string();
        let now = self.engine.now_ms();
        let sql = format!(
            "INSERT INTO records (id, object, fields, version, created_at, updated_at) \
             VALUES (?, ?, ?, 1, {now}, {now})"
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(&id)
            .bind(object)
            .bind(fields_json(fields))
            .execute(&mut **tx)
            .await?;
        self.lock_record(tx, &id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("created record vanished".into()))
    }

    async fn get_record(&self, id: &str) -> Result<Option<Record>, StoreError> {
        self.fetch_record(&self.pool, id, false).await
    }

    async fn lock_record(&self, tx: &mut WriteTx, id: &str) -> Result<Option<Record>, StoreError> {
        self.fetch_record(&mut **tx, id, true).await
    }

    async fn list_records(
        &self,
        object: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        self.records_page(object, after.unwrap_or(""), false, limit)
            .await
    }

    async fn recent_records(
        &self,
        object: &str,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        self.records_page(object, before.unwrap_or(""), true, limit)
            .await
    }

    async fn write_record_fields(
        &self,
        tx: &mut WriteTx,
        record: &Record,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Record, StoreError> {
        let now = self.engine.now_ms();
        let sql = format!(
            "UPDATE records SET fields = ?, version = version + 1, updated_at = {now} \
             WHERE id = ? AND version = ?"
        );
        let affected = sqlx::query(&self.engine.sql(&sql))
            .bind(fields_json(fields))
            .bind(&record.id)
            .bind(record.version)
            .execute(&mut **tx)
            .await?
            .rows_affected();
        if affected != 1 {
            return Err(StoreError::Corrupt(format!(
                "record {} changed under its lock",
                record.id
            )));
        }
        self.fetch_record(&mut **tx, &record.id, false)
            .await?
            .ok_or_else(|| StoreError::Corrupt("updated record vanished".into()))
    }
}
