//! The `[retention]` table of the config file (issue 21): how long settled
//! events, runs, audit rows and idempotency keys are kept, and where removed rows
//! are archived. Durations are written as `"7d"`, `"12h"`, `"5m"`, or `"never"`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use vocab::DeliveryStatus;

use crate::outbox::retention::{RetentionPolicy, MAX_CHUNK_ROWS};

/// A `[retention]` setting that could not be read (the settings turn it into
/// their `ConfigError::Invalid`).
#[derive(Debug, thiserror::Error)]
#[error("setting `{setting}`: {message}")]
pub struct RetentionError {
    pub setting: &'static str,
    pub message: String,
}

/// How long rows in one settled state are kept (each `None`: the default).
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct StateRetention {
    pub completed: Option<String>,
    pub skipped: Option<String>,
    pub failed: Option<String>,
    pub uncertain: Option<String>,
}

/// `[retention]` as written in the config file.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    pub completed: Option<String>,
    pub skipped: Option<String>,
    pub failed: Option<String>,
    pub uncertain: Option<String>,
    pub runs: Option<String>,
    pub audit: Option<String>,
    pub idempotency_keys: Option<String>,
    /// How often a pass starts.
    pub interval: Option<String>,
    pub chunk_rows: Option<u32>,
    pub archive_dir: Option<PathBuf>,
    /// A kind's own retention (`[retention.kinds.callback]`), per state it sets.
    #[serde(default)]
    pub kinds: BTreeMap<String, StateRetention>,
}

/// Defaults: delivered and skipped events a week, failed ones (the shelf) 90
/// days, uncertain ones until an operator settles them; runs and the audit trail
/// forever unless set; keys a day.
const DEFAULT_COMPLETED: &str = "7d";
const DEFAULT_SKIPPED: &str = "7d";
const DEFAULT_FAILED: &str = "90d";
const DEFAULT_UNCERTAIN: &str = "never";
const DEFAULT_RUNS: &str = "never";
const DEFAULT_AUDIT: &str = "never";
const DEFAULT_KEYS: &str = "24h";
const DEFAULT_INTERVAL: &str = "1m";

/// Every kind Herald enqueues (a kind's retention must name one).
pub const KNOWN_KINDS: [&str; 8] = [
    crate::jobs::kinds::CALLBACK,
    crate::jobs::kinds::DELIVERY,
    crate::jobs::kinds::DEAD_LETTER,
    vocab::run_approvals::APPROVAL_REQUEST,
    vocab::run_approvals::RUN_CONTINUATION,
    vocab::approvals::kinds::APPROVAL_PROMPT,
    vocab::approvals::kinds::ALERT,
    vocab::approvals::kinds::FIELD_UPDATE,
];

/// A retention as ms, `None` for `"never"`.
fn kept(setting: &'static str, value: &str) -> Result<Option<i64>, RetentionError> {
    let invalid = |message: String| RetentionError { setting, message };
    if value.trim() == "never" {
        return Ok(None);
    }
    let duration = humantime::parse_duration(value.trim()).map_err(|e| {
        invalid(format!(
            "{value:?} is not a duration ({e}); write e.g. \"7d\", \"12h\", \"30m\" or \"never\""
        ))
    })?;
    if duration.is_zero() {
        return Err(invalid(
            "must be longer than zero (\"never\" keeps rows forever)".into(),
        ));
    }
    i64::try_from(duration.as_millis())
        .map(Some)
        .map_err(|_| invalid(format!("{value:?} is too long")))
}

impl StateRetention {
    fn each(&self) -> [(DeliveryStatus, Option<&String>); 4] {
        [
            (DeliveryStatus::Completed, self.completed.as_ref()),
            (DeliveryStatus::Skipped, self.skipped.as_ref()),
            (DeliveryStatus::Failed, self.failed.as_ref()),
            (DeliveryStatus::Uncertain, self.uncertain.as_ref()),
        ]
    }
}

impl RetentionSettings {
    /// The policy these settings describe; errors name the setting.
    pub fn policy(&self) -> Result<RetentionPolicy, RetentionError> {
        let mut events = BTreeMap::new();
        let defaults = StateRetention {
            completed: self.completed.clone(),
            skipped: self.skipped.clone(),
            failed: self.failed.clone(),
            uncertain: self.uncertain.clone(),
        };
        for ((status, value), (setting, default)) in defaults.each().into_iter().zip([
            ("retention.completed", DEFAULT_COMPLETED),
            ("retention.skipped", DEFAULT_SKIPPED),
            ("retention.failed", DEFAULT_FAILED),
            ("retention.uncertain", DEFAULT_UNCERTAIN),
        ]) {
            events.insert(status, kept(setting, value.map_or(default, |v| v))?);
        }
        let mut kinds = BTreeMap::new();
        for (kind, states) in &self.kinds {
            if !KNOWN_KINDS.contains(&kind.as_str()) {
                return Err(RetentionError {
                    setting: "retention.kinds",
                    message: format!(
                        "no event kind is named {kind:?}; the kinds are {}",
                        KNOWN_KINDS.join(", ")
                    ),
                });
            }
            let mut own = BTreeMap::new();
            for (status, value) in states.each() {
                if let Some(value) = value {
                    let ms = kept("retention.kinds", value).map_err(|e| RetentionError {
                        setting: "retention.kinds",
                        message: format!("{kind}.{}: {}", status.as_str(), e.message),
                    })?;
                    own.insert(status, ms);
                }
            }
            kinds.insert(kind.clone(), own);
        }
        let chunk_rows = self.chunk_rows.unwrap_or(MAX_CHUNK_ROWS);
        if !(1..=MAX_CHUNK_ROWS).contains(&chunk_rows) {
            return Err(RetentionError {
                setting: "retention.chunk_rows",
                message: format!("must be between 1 and {MAX_CHUNK_ROWS}"),
            });
        }
        let interval = self.interval.as_deref().unwrap_or(DEFAULT_INTERVAL);
        let interval = kept("retention.interval", interval)?.ok_or(RetentionError {
            setting: "retention.interval",
            message: "must be a duration, not \"never\" (set every retention to \"never\" to remove nothing)".into(),
        })?;
        if let Some(dir) = &self.archive_dir {
            if dir.as_os_str().is_empty() {
                return Err(RetentionError {
                    setting: "retention.archive_dir",
                    message: "must name a folder".into(),
                });
            }
        }
        Ok(RetentionPolicy {
            events,
            kinds,
            runs: kept(
                "retention.runs",
                self.runs.as_deref().unwrap_or(DEFAULT_RUNS),
            )?,
            audit: kept(
                "retention.audit",
                self.audit.as_deref().unwrap_or(DEFAULT_AUDIT),
            )?,
            idempotency_keys: kept(
                "retention.idempotency_keys",
                self.idempotency_keys.as_deref().unwrap_or(DEFAULT_KEYS),
            )?,
            interval: Duration::from_millis(interval as u64),
            chunk_rows,
            archive_dir: self.archive_dir.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RetentionPolicy, String> {
        let settings: RetentionSettings = toml::from_str(text).map_err(|e| e.to_string())?;
        settings.policy().map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_keep_a_week_of_deliveries_and_uncertain_events_forever() {
        let policy = parse("").unwrap();
        let day = 86_400_000;
        assert_eq!(policy.events[&DeliveryStatus::Completed], Some(7 * day));
        assert_eq!(policy.events[&DeliveryStatus::Skipped], Some(7 * day));
        assert_eq!(policy.events[&DeliveryStatus::Failed], Some(90 * day));
        assert_eq!(policy.events[&DeliveryStatus::Uncertain], None);
        assert_eq!((policy.runs, policy.audit), (None, None));
        assert_eq!(policy.idempotency_keys, Some(day));
        assert_eq!(policy.interval, Duration::from_secs(60));
        assert_eq!(policy.chunk_rows, 1_000);
    }

    #[test]
    fn kinds_and_durations_are_read_and_bad_ones_name_the_setting() {
        let policy = parse(
            "completed = \"5m\"\nruns = \"30d\"\n[kinds.callback]\ncompleted = \"never\"\nfailed = \"1h\"\n",
        )
        .unwrap();
        assert_eq!(policy.events[&DeliveryStatus::Completed], Some(300_000));
        assert_eq!(
            policy.kinds["callback"],
            BTreeMap::from([
                (DeliveryStatus::Completed, None),
                (DeliveryStatus::Failed, Some(3_600_000))
            ])
        );
        assert_eq!(policy.runs, Some(30 * 86_400_000));

        for (text, expected) in [
            ("completed = \"soon\"", "retention.completed"),
            ("failed = \"0s\"", "retention.failed"),
            (
                "[kinds.calback]\ncompleted = \"1d\"",
                "no event kind is named \"calback\"",
            ),
            ("[kinds.callback]\ncompleted = \"x\"", "callback.completed"),
            ("chunk_rows = 5000", "retention.chunk_rows"),
            ("interval = \"never\"", "retention.interval"),
            ("completd = \"1d\"", "unknown field"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
