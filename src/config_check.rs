//! What this node's configuration keeps it from doing, checked when asked (at
//! start-up, on `/readyz`, by the console), so a fixed setting stops being
//! reported without a restart. A notice names the setting and the problem; only
//! the start-up log adds the detail (the reference that failed: a file path or a
//! variable name), never a secret's value.

use app::dto::ConfigNotice;

use crate::config::Settings;

/// A problem, and its detail for the log.
struct Finding {
    notice: ConfigNotice,
    detail: String,
}

fn findings(settings: &Settings) -> Vec<Finding> {
    let mut found = Vec::new();
    let reference = &settings.callback_secret_ref;
    let unreadable = if reference.is_empty() {
        Some((
            "no callback signing secret is set",
            "callback_secret_ref is empty".to_string(),
        ))
    } else {
        crate::channels::secrets::resolve_keys(reference)
            .err()
            .map(|err| {
                (
                    "the callback signing secret cannot be read",
                    err.to_string(),
                )
            })
    };
    if let Some((why, detail)) = unreadable {
        found.push(Finding {
            notice: ConfigNotice {
                setting: "callback_secret_ref".into(),
                problem: format!(
                    "{why}: run callbacks wait, unsent and without spending attempts, and go \
                     once it can be read; their receivers' breakers are not affected"
                ),
            },
            detail,
        });
    }
    found
}

/// Every problem the settings cause now (empty: none).
pub fn config_notices(settings: &Settings) -> Vec<ConfigNotice> {
    findings(settings).into_iter().map(|f| f.notice).collect()
}

/// Says each problem once at start-up, as an error line an operator will see,
/// with the detail that names what failed.
pub fn log_config_notices(settings: &Settings) {
    for Finding { notice, detail } in findings(settings) {
        tracing::error!(setting = %notice.setting, detail = %detail, "{}", notice.problem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SettingsArgs;

    fn settings(secret_ref: &str) -> Settings {
        Settings::resolve(&SettingsArgs {
            callback_secret_ref: Some(secret_ref.into()),
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn an_unreadable_or_missing_callback_secret_is_a_notice_without_its_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "whsec_c2VjcmV0LW9uZQ==").unwrap();
        let good = format!("file:{}", path.display());
        assert!(config_notices(&settings(&good)).is_empty());

        let gone = format!("file:{}", dir.path().join("gone").display());
        let notices = config_notices(&settings(&gone));
        assert_eq!(notices.len(), 1);
        assert_eq!(notices[0].setting, "callback_secret_ref");
        assert!(notices[0].problem.contains("cannot be read"), "{notices:?}");
        assert!(
            !notices[0].problem.contains("gone"),
            "no path in a notice /readyz shows anyone: {notices:?}"
        );
        assert!(
            findings(&settings(&gone))[0].detail.contains("gone"),
            "the log's detail names it"
        );

        std::fs::write(&path, "not base64 at all!").unwrap();
        let notices = config_notices(&settings(&good));
        assert_eq!(notices.len(), 1, "a malformed secret too");
        assert!(
            !notices[0].problem.contains("not base64"),
            "never the value: {notices:?}"
        );
        assert!(!config_notices(&settings("")).is_empty(), "none set");
    }
}
