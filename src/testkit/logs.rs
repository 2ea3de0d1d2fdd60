//! Log lines captured in the test process, for tests of what an in-process worker
//! says (an `OPERATOR_ALERT`, say). The first [`capture`] installs one global
//! subscriber that keeps every line; tests running beside each other share it, so
//! a test looks only for lines naming something of its own (an event id).

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Every captured line that contains `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| line.contains(needle))
            .map(str::to_string)
            .collect()
    }
}

/// The most bytes kept; past it the older half goes (a test reads its own lines
/// right after writing them).
const MAX_KEPT: usize = 16 * 1024 * 1024;

impl Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() + buf.len() > MAX_KEPT {
            let half = kept.len() / 2;
            kept.drain(..half);
        }
        kept.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The process's captured logs (INFO and above), capturing from the first call on.
pub fn capture() -> CapturedLogs {
    static LOGS: OnceLock<CapturedLogs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = CapturedLogs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in a test process");
        logs
    })
    .clone()
}
