//! Test-only pauses for crash tests: an environment variable `<stage>:<marker
//! file>` makes a handler write the marker and sleep when it reaches `stage`, so a
//! test can SIGKILL the process at that exact point. Never set one in production.

use std::path::PathBuf;
use std::time::Duration;

pub struct TestPause {
    stage: String,
    marker: PathBuf,
}

impl TestPause {
    /// The pause `var` asks for, if it is set.
    pub fn from_env(var: &str) -> Option<TestPause> {
        let value = std::env::var(var).ok()?;
        let (stage, marker) = value.split_once(':')?;
        Some(TestPause {
            stage: stage.to_string(),
            marker: PathBuf::from(marker),
        })
    }

    /// Sleeps (for an hour: until the test kills the process) if `pause` names
    /// `stage`.
    pub async fn at(pause: &Option<TestPause>, stage: &str) {
        if let Some(pause) = pause {
            if pause.stage == stage {
                let _ = std::fs::write(&pause.marker, stage);
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
    }
}
