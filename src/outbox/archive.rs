//! Archival before deletion (issue 21, `retention.archive_dir`): the rows a
//! retention pass removes are first appended to gzip-compressed NDJSON files, one
//! per table per pass, named `<table>.<pass>.ndjson.gz`. Each chunk is one gzip
//! member, written and fsynced before the chunk's delete commits; the files hold
//! payloads (Job data), so they are created with mode 0600 in a 0700 folder.
//!
//! A process killed after a chunk was archived but before its delete committed
//! leaves those rows in the store, and the next pass archives them again: a row
//! may appear twice, identically and under the same primary key, and loading
//! with insert-if-absent keeps one. A process killed while writing a chunk leaves
//! a truncated last member whose rows were not deleted; [`verify`] says so.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::store::ports::ArchiveSink;
use crate::store::retention::{ColumnType, TableShape, ARCHIVED_TABLES};

const SUFFIX: &str = ".ndjson.gz";

/// The archive files of one retention pass.
pub struct ArchivePass {
    dir: PathBuf,
    pass: String,
    files: Arc<Mutex<HashMap<&'static str, File>>>,
}

impl ArchivePass {
    /// A pass's files in `dir` (created on first use), named after `pass` (a
    /// sortable stamp that no other pass shares).
    pub fn new(dir: &Path, pass: &str) -> ArchivePass {
        ArchivePass {
            dir: dir.to_path_buf(),
            pass: pass.to_string(),
            files: Arc::default(),
        }
    }

    /// A pass name: its UTC start, then a random suffix (several nodes may archive
    /// into one shared folder).
    pub fn pass_name() -> String {
        let now = time::OffsetDateTime::now_utc();
        let stamp = now
            .format(time::macros::format_description!(
                "[year][month][day]T[hour][minute][second]Z"
            ))
            .unwrap_or_else(|_| now.unix_timestamp().to_string());
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        format!("{stamp}-{}", &suffix[..8])
    }
}

fn append_member(
    dir: &Path,
    pass: &str,
    files: &Mutex<HashMap<&'static str, File>>,
    table: &'static str,
    rows: &[serde_json::Value],
) -> std::io::Result<()> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    for row in rows {
        serde_json::to_writer(&mut encoder, row)?;
        encoder.write_all(b"\n")?;
    }
    let member = encoder.finish()?;
    let mut files = files
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !files.contains_key(table) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let path = dir.join(format!("{table}.{pass}{SUFFIX}"));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        // The new name must survive a crash too, or the fsynced data is unreachable.
        File::open(dir)?.sync_all()?;
        files.insert(table, file);
    }
    let file = files
        .get_mut(table)
        .expect("the table's file was just opened");
    file.write_all(&member)?;
    file.sync_data()
}

#[async_trait]
impl ArchiveSink for ArchivePass {
    async fn append(
        &self,
        table: &'static str,
        rows: Vec<serde_json::Value>,
    ) -> Result<(), std::io::Error> {
        let (dir, pass, files) = (self.dir.clone(), self.pass.clone(), self.files.clone());
        tokio::task::spawn_blocking(move || append_member(&dir, &pass, &files, table, &rows))
            .await
            .map_err(std::io::Error::other)?
    }
}

/// What [`verify`] found in an archive folder.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ArchiveReport {
    pub files: usize,
    /// Rows per table.
    pub rows: BTreeMap<String, u64>,
    /// Files whose last chunk was cut short by a stopped process (its rows were
    /// never deleted from the store), with the rows readable before it.
    pub truncated: Vec<(PathBuf, u64)>,
}

/// Why an archive folder does not check out.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an archive file of Herald (expected <table>.<pass>{SUFFIX} of a known table)")]
    UnknownFile { path: PathBuf },
    #[error("{path} is damaged at line {line}: {message}")]
    Damaged {
        path: PathBuf,
        line: u64,
        message: String,
    },
}

/// The table an archive file holds, from its name.
fn table_of(path: &Path) -> Option<&'static TableShape> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(SUFFIX)?;
    let (table, _pass) = stem.split_once('.')?;
    ARCHIVED_TABLES.into_iter().find(|t| t.name == table)
}

/// Columns added after archives were first written: a file an older release
/// wrote lacks them, and is whole without them.
const ADDED_LATER: &[(&str, &str)] = &[
    ("outbox_events", "trace_parent"),
    ("outbox_audit", "reason"),
];

/// Whether `row` has exactly `table`'s columns (an older file's, without those
/// added since), each of its type or null.
fn check_row(table: &TableShape, row: &serde_json::Value) -> Result<(), String> {
    let object = row.as_object().ok_or("a line is not a JSON object")?;
    let mut present = 0;
    for (column, ty) in table.columns {
        let Some(value) = object.get(*column) else {
            if ADDED_LATER.contains(&(table.name, *column)) {
                continue;
            }
            return Err(format!("column {column:?} is missing"));
        };
        present += 1;
        let fits = match (ty, value) {
            (_, serde_json::Value::Null) => true,
            (ColumnType::Int, v) => v.is_i64(),
            (ColumnType::Text, v) => v.is_string(),
        };
        if !fits {
            return Err(format!("column {column:?} holds {value}, not a {ty:?}"));
        }
    }
    if object.len() != present {
        return Err(format!(
            "{} columns where {} has {}",
            object.len(),
            table.name,
            table.columns.len()
        ));
    }
    Ok(())
}

/// The archive files in `dir`, in name order (so a table's passes in time order).
fn archive_files(dir: &Path) -> Result<Vec<PathBuf>, ArchiveError> {
    let read = |source| ArchiveError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let path = entry.map_err(read)?.path();
        if path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Reads every row of every archive file in `dir`, handing each to `each` with
/// its table; returns what [`verify`] reports. Memory stays bounded: one line at
/// a time.
pub fn read_rows(
    dir: &Path,
    mut each: impl FnMut(&'static TableShape, serde_json::Value),
) -> Result<ArchiveReport, ArchiveError> {
    let mut report = ArchiveReport::default();
    for path in archive_files(dir)? {
        let table =
            table_of(&path).ok_or_else(|| ArchiveError::UnknownFile { path: path.clone() })?;
        let file = File::open(&path).map_err(|source| ArchiveError::Read {
            path: path.clone(),
            source,
        })?;
        report.files += 1;
        let mut lines = BufReader::new(MultiGzDecoder::new(file));
        let mut line_no = 0u64;
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => {}
                // A member cut short (a pass stopped while writing it): its rows
                // were never deleted, so nothing is lost; earlier members stand.
                Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => {
                    report.truncated.push((path.clone(), line_no));
                    break;
                }
                Err(err) => {
                    return Err(ArchiveError::Damaged {
                        path,
                        line: line_no + 1,
                        message: err.to_string(),
                    })
                }
            }
            if !line.ends_with('\n') {
                report.truncated.push((path.clone(), line_no));
                break;
            }
            line_no += 1;
            let damaged = |message: String| ArchiveError::Damaged {
                path: path.clone(),
                line: line_no,
                message,
            };
            let row: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| damaged(e.to_string()))?;
            check_row(table, &row).map_err(damaged)?;
            *report.rows.entry(table.name.to_string()).or_default() += 1;
            each(table, row);
        }
    }
    Ok(report)
}

/// Checks every archive file in `dir`: each decompresses, each line is a row of
/// its table with every column of the right type.
pub fn verify(dir: &Path) -> Result<ArchiveReport, ArchiveError> {
    read_rows(dir, |_, _| {})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audit_row(id: &str) -> serde_json::Value {
        serde_json::json!({"id": id, "event_id": "e", "action": "retry", "actor": "a",
            "from_status": "failed", "acknowledged_duplicate_risk": 0, "affected": 1, "at": 5})
    }

    #[test]
    fn an_event_archived_before_trace_parent_existed_still_checks() {
        let table = ARCHIVED_TABLES
            .into_iter()
            .find(|t| t.name == "outbox_events")
            .unwrap();
        let mut row: serde_json::Map<String, serde_json::Value> = table
            .columns
            .iter()
            .map(|(name, _)| (name.to_string(), serde_json::Value::Null))
            .collect();
        assert_eq!(check_row(table, &row.clone().into()), Ok(()));
        row.remove("trace_parent");
        assert_eq!(
            check_row(table, &row.clone().into()),
            Ok(()),
            "an older file"
        );
        row.remove("kind");
        assert!(
            check_row(table, &row.clone().into()).is_err(),
            "kind was always there"
        );
        row.insert("kind".into(), serde_json::Value::Null);
        row.insert("surprise".into(), serde_json::Value::Null);
        assert!(check_row(table, &row.into()).is_err(), "an unknown column");
    }

    #[tokio::test]
    async fn chunks_append_as_members_and_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let pass = ArchivePass::new(dir.path(), "20261201T000000Z-abcdef12");
        pass.append("outbox_audit", vec![audit_row("a1"), audit_row("a2")])
            .await
            .unwrap();
        pass.append("outbox_audit", vec![audit_row("a3")])
            .await
            .unwrap();
        let mut ids = Vec::new();
        let report = read_rows(dir.path(), |table, row| {
            assert_eq!(table.name, "outbox_audit");
            ids.push(row["id"].as_str().unwrap().to_string());
        })
        .unwrap();
        assert_eq!(ids, ["a1", "a2", "a3"]);
        assert_eq!(report.files, 1);
        assert!(report.truncated.is_empty());
        let file = dir
            .path()
            .join("outbox_audit.20261201T000000Z-abcdef12.ndjson.gz");
        let mode = std::fs::metadata(&file).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
    }

    #[tokio::test]
    async fn a_cut_short_last_member_is_reported_and_a_damaged_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let pass = ArchivePass::new(dir.path(), "p1");
        pass.append("outbox_audit", vec![audit_row("a1")])
            .await
            .unwrap();
        let file = dir.path().join("outbox_audit.p1.ndjson.gz");
        let first = std::fs::metadata(&file).unwrap().len() as usize;
        pass.append("outbox_audit", vec![audit_row("a2")])
            .await
            .unwrap();
        let bytes = std::fs::read(&file).unwrap();
        // Cut the second member in half: a pass killed mid-write.
        let cut = first + (bytes.len() - first) / 2;
        std::fs::write(&file, &bytes[..cut]).unwrap();
        let report = verify(dir.path()).unwrap();
        assert_eq!(report.rows["outbox_audit"], 1);
        assert_eq!(report.truncated, vec![(file.clone(), 1)]);

        // A flipped byte inside the first member's data is damage, not a cut.
        let mut damaged = bytes.clone();
        damaged[14] ^= 0xff;
        std::fs::write(&file, &damaged).unwrap();
        assert!(matches!(
            verify(dir.path()),
            Err(ArchiveError::Damaged { .. })
        ));

        // A row missing a column is damage too.
        std::fs::write(&file, b"").unwrap();
        let pass = ArchivePass::new(dir.path(), "p2");
        pass.append("outbox_audit", vec![serde_json::json!({"id": "x"})])
            .await
            .unwrap();
        let err = verify(dir.path()).unwrap_err().to_string();
        assert!(err.contains("missing"), "{err}");
    }
}
