//! The approvals source's SQL: versioned process definitions, approval instances
//! with their nodes and work items, and the outbox statements only the approvals
//! source needs (completing a replay inside its own write transaction, skipping a
//! prompt that is no longer owed, the replay shelf).

use async_trait::async_trait;
use sqlx::any::AnyRow;

use super::error::StoreError;
use super::events::EventRecord;
use super::outbox::{event_from_row, EVENT_COLUMNS, FENCE};
use super::ports::{ApprovalEvents, ApprovalRepository, StatusCount, Transactions, WriteTx};
use super::row::{int, opt_text, text};
use super::sql::SqlStore;
use vocab::approvals::{
    Approver, Definition, DefinitionSpec, Instance, InstanceStatus, Node, WorkItem,
};

const INSTANCE_COLUMNS: &str = "id, definition_id, definition_version, object, record_id, status, \
     step_index, submitted_by, decided_by, transition_seq, created_at, updated_at";

fn status_of(row: &AnyRow) -> Result<InstanceStatus, StoreError> {
    let status = text(row, "status")?;
    InstanceStatus::parse(&status)
        .ok_or_else(|| StoreError::Corrupt(format!("approval status {status:?}")))
}

fn instance_from_row(row: &AnyRow) -> Result<Instance, StoreError> {
    Ok(Instance {
        id: text(row, "id")?,
        definition_id: text(row, "definition_id")?,
        definition_version: int(row, "definition_version")?,
        object: text(row, "object")?,
        record_id: text(row, "record_id")?,
        status: status_of(row)?,
        step_index: int(row, "step_index")?,
        submitted_by: text(row, "submitted_by")?,
        decided_by: opt_text(row, "decided_by")?,
        transition_seq: int(row, "transition_seq")?,
        created_at_ms: int(row, "created_at")?,
        updated_at_ms: int(row, "updated_at")?,
    })
}

fn definition_from_row(row: &AnyRow) -> Result<Definition, StoreError> {
    #[derive(serde::Deserialize)]
    struct Body {
        steps: Vec<vocab::approvals::Step>,
        actions: vocab::approvals::LifecycleActions,
        #[serde(default)]
        run_types: Vec<String>,
    }
    let body: Body = serde_json::from_str(&text(row, "body")?)
        .map_err(|e| StoreError::Corrupt(format!("definition body: {e}")))?;
    Ok(Definition {
        id: text(row, "id")?,
        version: int(row, "version")?,
        object: text(row, "object")?,
        run_types: body.run_types,
        steps: body.steps,
        actions: body.actions,
        created_by: text(row, "created_by")?,
        created_at_ms: int(row, "created_at")?,
    })
}

impl SqlStore {
    async fn try_put_definition(
        &self,
        spec: &DefinitionSpec,
        created_by: &str,
    ) -> Result<Definition, StoreError> {
        let mut body = serde_json::json!({ "steps": spec.steps, "actions": spec.actions });
        if !spec.run_types.is_empty() {
            body["run_types"] = serde_json::json!(spec.run_types);
        }
        let body = body.to_string();
        let mut tx = self.begin_write().await?;
        let sql = format!(
            "SELECT id, version, object, body, created_by, created_at FROM approval_definitions \
             WHERE id = ? ORDER BY version DESC LIMIT 1{}",
            self.engine.lock_rows()
        );
        let latest = sqlx::query(&self.engine.sql(&sql))
            .bind(&spec.id)
            .fetch_optional(&mut *tx)
            .await?;
        let latest = latest.as_ref().map(definition_from_row).transpose()?;
        if let Some(latest) = &latest {
            if latest.object == spec.stored_object()
                && latest.run_types == spec.run_types
                && latest.steps == spec.steps
                && latest.actions == spec.actions
            {
                tx.rollback().await?;
                return Ok(latest.clone());
            }
        }
        let version = latest.map(|d| d.version + 1).unwrap_or(1);
        let sql = format!(
            "INSERT INTO approval_definitions (id, version, object, body, created_by, created_at) \
             VALUES (?, ?, ?, ?, ?, {})",
            self.engine.now_ms()
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(&spec.id)
            .bind(version)
            .bind(spec.stored_object())
            .bind(&body)
            .bind(created_by)
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                StoreError::unique_as(e, format!("definition {} version {version}", spec.id))
            })?;
        tx.commit().await?;
        self.definition(&spec.id, Some(version))
            .await?
            .ok_or_else(|| StoreError::Corrupt("stored definition vanished".into()))
    }

    async fn fetch_definition<'e, E>(
        &self,
        executor: E,
        id: &str,
        version: Option<i64>,
    ) -> Result<Option<Definition>, StoreError>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let (filter, v) = match version {
            Some(v) => ("AND version = ?", v),
            None => ("AND version >= ?", 0),
        };
        let sql = format!(
            "SELECT id, version, object, body, created_by, created_at FROM approval_definitions \
             WHERE id = ? {filter} ORDER BY version DESC LIMIT 1"
        );
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(id)
            .bind(v)
            .fetch_optional(executor)
            .await?;
        row.as_ref().map(definition_from_row).transpose()
    }
}

#[async_trait]
impl ApprovalRepository for SqlStore {
    async fn put_definition(
        &self,
        spec: &DefinitionSpec,
        created_by: &str,
    ) -> Result<Definition, StoreError> {
        let mut tries = 0;
        loop {
            match self.try_put_definition(spec, created_by).await {
                Err(StoreError::AlreadyExists(_)) if tries < 3 => tries += 1,
                // A commit-time conflict (MySQL deadlock 1213, SQLSTATE 40001) lost a race.
                Err(StoreError::Database(err))
                    if tries < 3
                        && err
                            .as_database_error()
                            .and_then(|db| db.code())
                            .is_some_and(|code| code == "40001") =>
                {
                    tries += 1
                }
                other => return other,
            }
        }
    }

    async fn definition(
        &self,
        id: &str,
        version: Option<i64>,
    ) -> Result<Option<Definition>, StoreError> {
        self.fetch_definition(&self.pool, id, version).await
    }

    async fn definition_in(
        &self,
        tx: &mut WriteTx,
        id: &str,
        version: Option<i64>,
    ) -> Result<Option<Definition>, StoreError> {
        self.fetch_definition(&mut **tx, id, version).await
    }

    async fn definitions(&self) -> Result<Vec<Definition>, StoreError> {
        let rows = sqlx::query(
            "SELECT d.id, d.version, d.object, d.body, d.created_by, d.created_at \
             FROM approval_definitions d WHERE d.version = \
             (SELECT MAX(l.version) FROM approval_definitions l WHERE l.id = d.id) ORDER BY d.id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(definition_from_row).collect()
    }

    async fn create_instance(
        &self,
        tx: &mut WriteTx,
        id: &str,
        definition: &Definition,
        record_id: &str,
        submitted_by: &str,
    ) -> Result<Instance, StoreError> {
        let now = self.engine.now_ms();
        let sql = format!(
            "INSERT INTO approval_instances (id, definition_id, definition_version, object, record_id, \
             status, step_index, submitted_by, transition_seq, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, 1, {now}, {now})"
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(id)
            .bind(&definition.id)
            .bind(definition.version)
            .bind(&definition.object)
            .bind(record_id)
            .bind(submitted_by)
            .execute(&mut **tx)
            .await
            .map_err(|e| StoreError::unique_as(e, format!("approval {id}")))?;
        self.open_step(tx, id, 0, &definition.steps[0]).await?;
        self.lock_instance(tx, id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("created approval vanished".into()))
    }

    async fn pending_instance_of(
        &self,
        tx: &mut WriteTx,
        record_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(&self.engine.sql(
            "SELECT id FROM approval_instances WHERE record_id = ? AND status = 'pending' LIMIT 1",
        ))
        .bind(record_id)
        .fetch_optional(&mut **tx)
        .await?;
        row.as_ref().map(|r| text(r, "id")).transpose()
    }

    async fn open_step(
        &self,
        tx: &mut WriteTx,
        instance_id: &str,
        index: i64,
        step: &vocab::approvals::Step,
    ) -> Result<(), StoreError> {
        let now = self.engine.now_ms();
        let node_id = uuid::Uuid::now_v7().to_string();
        let sql = format!(
            "INSERT INTO approval_nodes (id, instance_id, step_index, step_name, status, created_at, updated_at) \
             VALUES (?, ?, ?, ?, 'pending', {now}, {now})"
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(&node_id)
            .bind(instance_id)
            .bind(index)
            .bind(&step.name)
            .execute(&mut **tx)
            .await?;
        let sql = format!(
            "INSERT INTO approval_work_items (id, instance_id, node_id, approver_kind, approver, status, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, 'pending', {now}, {now})"
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(uuid::Uuid::now_v7().to_string())
            .bind(instance_id)
            .bind(&node_id)
            .bind(step.approver.kind())
            .bind(step.approver.name())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn close_step(
        &self,
        tx: &mut WriteTx,
        instance_id: &str,
        index: i64,
        status: InstanceStatus,
        actor: &str,
    ) -> Result<(), StoreError> {
        let now = self.engine.now_ms();
        let sql = format!(
            "UPDATE approval_nodes SET status = ?, updated_at = {now} \
             WHERE instance_id = ? AND step_index = ? AND status = 'pending'"
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(status.as_str())
            .bind(instance_id)
            .bind(index)
            .execute(&mut **tx)
            .await?;
        let sql = format!(
            "UPDATE approval_work_items SET status = ?, decided_by = ?, updated_at = {now} \
             WHERE instance_id = ? AND status = 'pending' AND node_id IN \
             (SELECT id FROM approval_nodes WHERE instance_id = ? AND step_index = ?)"
        );
        sqlx::query(&self.engine.sql(&sql))
            .bind(status.as_str())
            .bind(actor)
            .bind(instance_id)
            .bind(instance_id)
            .bind(index)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn lock_instance(
        &self,
        tx: &mut WriteTx,
        id: &str,
    ) -> Result<Option<Instance>, StoreError> {
        let sql = format!(
            "SELECT {INSTANCE_COLUMNS} FROM approval_instances WHERE id = ?{}",
            self.engine.lock_rows()
        );
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?;
        row.as_ref().map(instance_from_row).transpose()
    }

    async fn instance(&self, id: &str) -> Result<Option<Instance>, StoreError> {
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM approval_instances WHERE id = ?");
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(instance_from_row).transpose()
    }

    async fn instances(&self, limit: u32) -> Result<Vec<Instance>, StoreError> {
        let sql = format!(
            "SELECT {INSTANCE_COLUMNS} FROM approval_instances ORDER BY created_at DESC, id DESC LIMIT {}",
            limit.clamp(1, 500)
        );
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(instance_from_row).collect()
    }

    async fn instances_of(
        &self,
        object: &str,
        record_id: &str,
    ) -> Result<Vec<Instance>, StoreError> {
        let sql = format!(
            "SELECT {INSTANCE_COLUMNS} FROM approval_instances WHERE object = ? AND record_id = ? \
             ORDER BY created_at DESC, id DESC LIMIT 50"
        );
        let rows = sqlx::query(&self.engine.sql(&sql))
            .bind(object)
            .bind(record_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(instance_from_row).collect()
    }

    async fn transition_instance(
        &self,
        tx: &mut WriteTx,
        instance: &Instance,
        status: InstanceStatus,
        step_index: i64,
        actor: &str,
        close_open: bool,
    ) -> Result<Instance, StoreError> {
        let now = self.engine.now_ms();
        let decided = (status != InstanceStatus::Pending).then_some(actor);
        let sql = format!(
            "UPDATE approval_instances SET status = ?, step_index = ?, decided_by = ?, \
             transition_seq = transition_seq + 1, updated_at = {now} WHERE id = ? AND transition_seq = ?"
        );
        let affected = sqlx::query(&self.engine.sql(&sql))
            .bind(status.as_str())
            .bind(step_index)
            .bind(decided)
            .bind(&instance.id)
            .bind(instance.transition_seq)
            .execute(&mut **tx)
            .await?
            .rows_affected();
        if affected != 1 {
            return Err(StoreError::Corrupt(format!(
                "approval {} changed under its lock",
                instance.id
            )));
        }
        if close_open {
            for table in ["approval_nodes", "approval_work_items"] {
                let decided_col = if table == "approval_work_items" {
                    ", decided_by = ?"
                } else {
                    ""
                };
                let sql = format!(
                    "UPDATE {table} SET status = ?{decided_col}, updated_at = {now} \
                     WHERE instance_id = ? AND status = 'pending'"
                );
                let sql = self.engine.sql(&sql);
                let mut query = sqlx::query(&sql).bind(status.as_str());
                if table == "approval_work_items" {
                    query = query.bind(actor);
                }
                query.bind(&instance.id).execute(&mut **tx).await?;
            }
        }
        self.lock_instance(tx, &instance.id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("approval vanished".into()))
    }

    async fn nodes(&self, instance_id: &str) -> Result<Vec<Node>, StoreError> {
        let rows = sqlx::query(&self.engine.sql(
            "SELECT id, step_index, step_name, status FROM approval_nodes WHERE instance_id = ? ORDER BY step_index, id",
        ))
        .bind(instance_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Node {
                    id: text(r, "id")?,
                    step_index: int(r, "step_index")?,
                    step_name: text(r, "step_name")?,
                    status: status_of(r)?,
                })
            })
            .collect()
    }

    async fn work_items(&self, instance_id: &str) -> Result<Vec<WorkItem>, StoreError> {
        let rows = sqlx::query(&self.engine.sql(
            "SELECT id, node_id, approver_kind, approver, status, decided_by FROM approval_work_items \
             WHERE instance_id = ? ORDER BY created_at, id",
        ))
        .bind(instance_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let kind = text(r, "approver_kind")?;
                let approver = text(r, "approver")?;
                if Approver::from_parts(&kind, &approver).is_none() {
                    return Err(StoreError::Corrupt(format!("approver {kind}:{approver}")));
                }
                Ok(WorkItem {
                    id: text(r, "id")?,
                    node_id: text(r, "node_id")?,
                    approver_kind: kind,
                    approver,
                    status: status_of(r)?,
                    decided_by: opt_text(r, "decided_by")?,
                })
            })
            .collect()
    }
}

#[async_trait]
impl ApprovalEvents for SqlStore {
    async fn complete_in(
        &self,
        tx: &mut WriteTx,
        event_id: &str,
        lease_token: &str,
    ) -> Result<bool, StoreError> {
        let now = self.engine.now_ms();
        let sql = format!(
            "UPDATE outbox_events SET status = 'completed', completed_at = {now}, updated_at = {now}, \
             lease_expires_at = NULL, last_error = NULL WHERE event_id = ? AND {FENCE}{now}"
        );
        let completed = sqlx::query(&self.engine.sql(&sql))
            .bind(event_id)
            .bind(lease_token)
            .execute(&mut **tx)
            .await?
            .rows_affected()
            == 1;
        // The record's lane lets its next FieldUpdate go in the transaction that
        // writes this one (docs/ORDERING.md §2).
        if completed {
            self.leave_lanes(tx, &[event_id]).await?;
        }
        Ok(completed)
    }

    async fn skip_pending_in(
        &self,
        tx: &mut WriteTx,
        event_id: &str,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let now = self.engine.now_ms();
        let sql = format!(
            "UPDATE outbox_events SET status = 'skipped', last_error = ?, updated_at = {now} \
             WHERE event_id = ? AND status = 'pending'"
        );
        Ok(sqlx::query(&self.engine.sql(&sql))
            .bind(reason)
            .bind(event_id)
            .execute(&mut **tx)
            .await?
            .rows_affected()
            == 1)
    }

    async fn kind_counts(&self, kind: &str) -> Result<Vec<StatusCount>, StoreError> {
        let rows = sqlx::query(&self.engine.sql(
            "SELECT status, COUNT(*) AS n FROM outbox_events WHERE kind = ? GROUP BY status ORDER BY status",
        ))
        .bind(kind)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(StatusCount {
                    status: text(r, "status")?,
                    count: int(r, "n")?,
                })
            })
            .collect()
    }

    async fn events_of_kind(
        &self,
        kind: &str,
        status: &str,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM outbox_events WHERE kind = ? AND status = ? \
             ORDER BY created_at DESC, event_id LIMIT {}",
            limit.clamp(1, 500)
        );
        let rows = sqlx::query(&self.engine.sql(&sql))
            .bind(kind)
            .bind(status)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(event_from_row).collect()
    }
}
