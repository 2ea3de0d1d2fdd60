//! Business runs recorded through Herald's API.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use vocab::RunStatus;

use super::engine::{padded, padded_len, placeholders};
use super::error::StoreError;
use super::ports::{NewRun, Run, RunFilter, RunRepository, Transactions, WriteTx};
use super::row::{int, opt_text, text};
use super::sql::SqlStore;

const RUN_COLUMNS: &str =
    "id, run_type, tenant, status, callback_url, result, transition_seq, routes, approval_id, created_at, updated_at";

fn run_from_row(row: &AnyRow) -> Result<Run, StoreError> {
    let status = text(row, "status")?;
    Ok(Run {
        id: text(row, "id")?,
        run_type: text(row, "run_type")?,
        tenant: text(row, "tenant")?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("run status {status:?}")))?,
        callback_url: opt_text(row, "callback_url")?,
        result: opt_text(row, "result")?,
        transition_seq: int(row, "transition_seq")?,
        routes: serde_json::from_str(&text(row, "routes")?)
            .map_err(|e| StoreError::Corrupt(format!("run routes: {e}")))?,
        approval_id: opt_text(row, "approval_id")?,
        created_at_ms: int(row, "created_at")?,
        updated_at_ms: int(row, "updated_at")?,
    })
}

/// What a guarded multi-run update did: the rows it returned (with RETURNING)
/// and how many it changed.
struct Updated {
    rows: Vec<AnyRow>,
    changed: u64,
}

/// Most runs one `INSERT` carries.
const MAX_CREATE_ROWS: usize = 128;

/// The largest power of two that is at most `n` and at most `cap`.
fn power_of_two_at_most(n: usize, cap: usize) -> usize {
    let n = n.min(cap).max(1);
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// Run types this process has read back as committed, so a creation whose types
/// are all known skips the read of `run_types` (one statement in twelve of a
/// PostgreSQL bench run). Type rows are never deleted, so a type once committed
/// stays recorded.
#[derive(Debug)]
pub(super) struct KnownRunTypes {
    known: std::sync::Mutex<std::collections::HashSet<String>>,
    learn_from: LearnFrom,
}

/// Where committed run types can be read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum LearnFrom {
    /// The creation's own read: each creation has its own transaction, which
    /// sees only committed rows besides its own (PostgreSQL, MySQL).
    CreationsRead,
    /// SQLite's grouped transaction may show another unit's type before it
    /// commits, and that unit may roll back: the read pool beside the writer
    /// sees only committed rows.
    ReadPool,
    /// An in-memory SQLite database has one connection: nothing is learned.
    Nothing,
}

/// Past this many the set stops growing: the rest are read each time.
const MOST_KNOWN_RUN_TYPES: usize = 4096;

impl KnownRunTypes {
    pub(super) fn new(learn_from: LearnFrom) -> Self {
        KnownRunTypes {
            known: Default::default(),
            learn_from,
        }
    }

    fn unknown<'a>(&self, types: &[&'a str]) -> Vec<&'a str> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        types
            .iter()
            .copied()
            .filter(|t| !known.contains(*t))
            .collect()
    }

    fn learn(&self, committed: &[String]) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        for run_type in committed {
            if known.len() >= MOST_KNOWN_RUN_TYPES {
                return;
            }
            known.insert(run_type.clone());
        }
    }
}

impl SqlStore {
    /// Records the run types of `runs` that are new. The runs and their types
    /// commit together, so the type list (the console's filter) never needs to
    /// scan the runs. Known types are only read, so runs of one type do not queue
    /// on its row lock.
    async fn add_run_types(&self, tx: &mut WriteTx, runs: &[NewRun]) -> Result<(), StoreError> {
        let mut types: Vec<&str> = runs.iter().map(|r| r.run_type.as_str()).collect();
        types.sort_unstable();
        types.dedup();
        let types = self.known_run_types.unknown(&types);
        if types.is_empty() {
            return Ok(());
        }
        let recorded = self.recorded_run_types(&mut **tx, &types).await?;
        self.learn_committed_run_types(&recorded).await;
        let new: Vec<&str> = types
            .into_iter()
            .filter(|t| !recorded.iter().any(|k| k == t))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "INSERT INTO run_types (run_type) VALUES {} {}",
            vec!["(?)"; padded_len(new.len())].join(", "),
            self.engine.insert_if_absent_tail("run_type")
        );
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql);
        for run_type in padded(&new) {
            query = query.bind(*run_type);
        }
        query.execute(&mut **tx).await?;
        Ok(())
    }

    /// Which of `types` stand in `run_types`, as `executor` sees them.
    async fn recorded_run_types<'e, E>(
        &self,
        executor: E,
        types: &[&str],
    ) -> Result<Vec<String>, StoreError>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let sql = format!(
            "SELECT run_type FROM run_types WHERE run_type IN ({})",
            placeholders(padded_len(types.len()))
        );
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql);
        for run_type in padded(types) {
            query = query.bind(*run_type);
        }
        let rows = query.fetch_all(executor).await?;
        rows.iter().map(|row| text(row, "run_type")).collect()
    }

    /// Remembers which of `recorded` (read inside a creation's transaction) are
    /// committed; see [`LearnFrom`]. A failed read only means reading again.
    async fn learn_committed_run_types(&self, recorded: &[String]) {
        match self.known_run_types.learn_from {
            LearnFrom::CreationsRead => self.known_run_types.learn(recorded),
            LearnFrom::ReadPool if !recorded.is_empty() => {
                let types: Vec<&str> = recorded.iter().map(String::as_str).collect();
                match self.recorded_run_types(&self.reads, &types).await {
                    Ok(committed) => self.known_run_types.learn(&committed),
                    Err(err) => {
                        tracing::debug!(error = %err, "run types not read; read again next time")
                    }
                }
            }
            LearnFrom::ReadPool | LearnFrom::Nothing => {}
        }
    }

    /// `UPDATE runs` of every run in `moves` that stands in one of `from`, each
    /// with its own result; the state test is part of the update, so it is decided
    /// under the rows' write locks. Padded to a power of two (repeats of the last
    /// move) so the statement's shapes are few and stay prepared.
    async fn update_runs_from(
        &self,
        tx: &mut WriteTx,
        moves: &[&(String, Option<String>)],
        from: &[RunStatus],
        to: RunStatus,
    ) -> Result<Updated, StoreError> {
        let now = self.engine.now_ms();
        let moves: Vec<_> = padded(moves).collect();
        let mut sql = format!(
            "UPDATE runs SET status = ?, result = CASE id{} ELSE result END, \
             transition_seq = transition_seq + 1, updated_at = {now} \
             WHERE id IN ({}) AND status IN ({}) AND approval_id IS NULL",
            " WHEN ? THEN ?".repeat(moves.len()),
            placeholders(moves.len()),
            placeholders(from.len())
        );
        if self.engine.has_returning() {
            sql.push_str(&format!(" RETURNING {RUN_COLUMNS}"));
        }
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql).bind(to.as_str());
        for (id, result) in &moves {
            query = query.bind(id.as_str()).bind(result.as_deref());
        }
        for (id, _) in &moves {
            query = query.bind(id.as_str());
        }
        for status in from {
            query = query.bind(status.as_str());
        }
        if self.engine.has_returning() {
            let rows = query.fetch_all(&mut **tx).await?;
            let changed = rows.len() as u64;
            return Ok(Updated { rows, changed });
        }
        let changed = query.execute(&mut **tx).await?.rows_affected();
        Ok(Updated {
            rows: Vec::new(),
            changed,
        })
    }
}

#[async_trait]
impl RunRepository for SqlStore {
    async fn create_run(&self, run: NewRun) -> Result<Run, StoreError> {
        let mut tx = self.begin_write().await?;
        let run = self.create_run_in(&mut tx, run).await?;
        tx.commit().await?;
        Ok(run)
    }

    async fn create_run_in(&self, tx: &mut WriteTx, run: NewRun) -> Result<Run, StoreError> {
        let mut created = self.create_runs_in(tx, std::slice::from_ref(&run)).await?;
        created
            .pop()
            .ok_or_else(|| StoreError::Corrupt("a created run vanished".into()))
    }

    async fn create_runs_in(
        &self,
        tx: &mut WriteTx,
        runs: &[NewRun],
    ) -> Result<Vec<Run>, StoreError> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        self.add_run_types(tx, runs).await?;
        let ids: Vec<String> = runs
            .iter()
            .map(|_| uuid::Uuid::now_v7().to_string())
            .collect();
        let now = self.engine.now_ms();
        let row = format!("(?, ?, ?, ?, ?, ?, 0, {now}, {now})");
        let mut created: Vec<Run> = Vec::with_capacity(runs.len());
        let mut start = 0;
        while start < runs.len() {
            // Chunks of a power of two (largest first), so the statement's shapes
            // are few and stay prepared; ids are new, so nothing can be padded.
            let size = power_of_two_at_most(runs.len() - start, MAX_CREATE_ROWS);
            let (chunk, chunk_ids) = (&runs[start..start + size], &ids[start..start + size]);
            let mut sql = format!(
                "INSERT INTO runs (id, run_type, tenant, status, callback_url, routes, transition_seq, created_at, updated_at) \
                 VALUES {}",
                vec![row.as_str(); size].join(", ")
            );
            if self.engine.has_returning() {
                sql.push_str(&format!(" RETURNING {RUN_COLUMNS}"));
            }
            let sql = self.engine.sql(&sql);
            let mut query = sqlx::query(&sql);
            for (run, id) in chunk.iter().zip(chunk_ids) {
                query = query
                    .bind(id)
                    .bind(&run.run_type)
                    .bind(&run.tenant)
                    .bind(RunStatus::Queued.as_str())
                    .bind(&run.callback_url)
                    .bind(serde_json::to_string(&run.routes).unwrap_or_else(|_| "[]".into()));
            }
            let rows = if self.engine.has_returning() {
                query.fetch_all(&mut **tx).await?
            } else {
                query.execute(&mut **tx).await?;
                let sql = format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE id IN ({})",
                    placeholders(size)
                );
                let sql = self.engine.sql(&sql);
                let mut read = sqlx::query(&sql);
                for id in chunk_ids {
                    read = read.bind(id);
                }
                read.fetch_all(&mut **tx).await?
            };
            for row in &rows {
                created.push(run_from_row(row)?);
            }
            start += size;
        }
        // In the callers' order.
        let mut ordered = Vec::with_capacity(ids.len());
        for id in &ids {
            let at = created
                .iter()
                .position(|run| &run.id == id)
                .ok_or_else(|| StoreError::Corrupt(format!("created run {id} not read back")))?;
            ordered.push(created.swap_remove(at));
        }
        Ok(ordered)
    }

    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?");
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<Run>, StoreError> {
        enum Arg<'a> {
            Text(&'a str),
            Int(i64),
        }
        let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1");
        let mut binds: Vec<Arg> = Vec::new();
        if let Some(run_type) = &filter.run_type {
            sql.push_str(" AND run_type = ?");
            binds.push(Arg::Text(run_type));
        }
        if let Some(status) = filter.status {
            sql.push_str(" AND status = ?");
            binds.push(Arg::Text(status.as_str()));
        }
        if let Some(tenant) = &filter.tenant {
            sql.push_str(" AND tenant = ?");
            binds.push(Arg::Text(tenant));
        }
        if let Some(from) = filter.created_from_ms {
            sql.push_str(" AND created_at >= ?");
            binds.push(Arg::Int(from));
        }
        if let Some(to) = filter.created_to_ms {
            sql.push_str(" AND created_at < ?");
            binds.push(Arg::Int(to));
        }
        if !filter.delivery_states.is_empty() {
            // Every state but `completed` holds few events: start from those, one
            // equality on the status index per state (an `IN` list makes planners
            // prefer the parent index and read every event), instead of probing run
            // after run, which reads every run when the filter matches none.
            // `completed` holds most events: probing the newest runs finds a page at once.
            let probe = filter
                .delivery_states
                .contains(&vocab::DeliveryStatus::Completed);
            if probe {
                sql.push_str(&format!(
                    " AND EXISTS (SELECT 1 FROM outbox_events e WHERE e.parent_type = 'run' \
                     AND e.parent_id = runs.id AND e.status IN ({}))",
                    placeholders(filter.delivery_states.len())
                ));
            } else {
                let per_state = vec![
                    "SELECT e.parent_id FROM outbox_events e WHERE e.status = ? AND e.parent_type = 'run'";
                    filter.delivery_states.len()
                ];
                sql.push_str(&format!(" AND id IN ({})", per_state.join(" UNION ALL ")));
            }
            binds.extend(filter.delivery_states.iter().map(|s| Arg::Text(s.as_str())));
        }
        if let Some(before) = &filter.before_id {
            sql.push_str(" AND id < ?");
            binds.push(Arg::Text(before));
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", filter.limit));
        let sql = self.engine.sql(&sql);
        let mut query = sqlx::query(&sql);
        for value in binds {
            query = match value {
                Arg::Text(text) => query.bind(text),
                Arg::Int(int) => query.bind(int),
            };
        }
        let rows = query.fetch_all(&self.pool).await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn run_types(&self) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT run_type FROM run_types ORDER BY run_type LIMIT 500")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|row| text(row, "run_type")).collect()
    }

    async fn count_by_status(&self, cap: i64) -> Result<Vec<(RunStatus, i64)>, StoreError> {
        // One capped count per status: each reads at most `cap + 1` index entries.
        let sql = self.engine.sql(
            "SELECT COUNT(*) AS n FROM (SELECT 1 AS one FROM runs WHERE status = ? LIMIT ?) capped",
        );
        let mut counts = Vec::with_capacity(RunStatus::ALL.len());
        for status in RunStatus::ALL {
            let row = sqlx::query(&sql)
                .bind(status.as_str())
                .bind(cap + 1)
                .fetch_one(&self.pool)
                .await?;
            counts.push((status, int(&row, "n")?));
        }
        Ok(counts)
    }

    async fn lock_run(&self, tx: &mut WriteTx, id: &str) -> Result<Option<Run>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id = ?{}",
            self.engine.lock_rows()
        );
        let row = sqlx::query(&self.engine.sql(&sql))
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn apply_transition(
        &self,
        tx: &mut WriteTx,
        run: &Run,
        to: RunStatus,
        result: Option<&str>,
        approval_id: Option<&str>,
    ) -> Result<Run, StoreError> {
        let now = self.engine.now_ms();
        // Guarded on the sequence read under the lock: a lost race is an error, never
        // a silent overwrite.
        let sql = format!(
            "UPDATE runs SET status = ?, result = ?, approval_id = ?, \
             transition_seq = transition_seq + 1, updated_at = {now} \
             WHERE id = ? AND transition_seq = ?"
        );
        let affected = sqlx::query(&self.engine.sql(&sql))
            .bind(to.as_str())
            .bind(result)
            .bind(approval_id)
            .bind(&run.id)
            .bind(run.transition_seq)
            .execute(&mut **tx)
            .await?
            .rows_affected();
        if affected != 1 {
            return Err(StoreError::Corrupt(format!(
                "run {} changed while locked",
                run.id
            )));
        }
        self.lock_run(tx, &run.id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("transitioned run vanished".into()))
    }

    async fn transition_from(
        &self,
        tx: &mut WriteTx,
        moves: &[(String, Option<String>)],
        from: &[RunStatus],
        to: RunStatus,
    ) -> Result<Vec<Run>, StoreError> {
        if from.is_empty() || moves.is_empty() {
            return Ok(Vec::new());
        }
        if !self.engine.has_returning() {
            // One run at a time; the update holds the row's lock, so the read
            // after it sees the run as moved.
            let mut moved = Vec::new();
            for one in moves {
                if self.update_runs_from(tx, &[one], from, to).await?.changed == 1 {
                    moved.extend(self.lock_run(tx, &one.0).await?);
                }
            }
            return Ok(moved);
        }
        let all: Vec<&(String, Option<String>)> = moves.iter().collect();
        let rows = self.update_runs_from(tx, &all, from, to).await?;
        rows.rows.iter().map(run_from_row).collect()
    }
}
