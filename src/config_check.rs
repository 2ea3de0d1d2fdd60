//! What this node's configuration keeps it from doing, checked when asked (at
//! start-up, on `/readyz`, by the console), so a fixed setting stops being
//! reported without a restart. A notice names the setting and the problem, never
//! a secret's value.

use app::dto::ConfigNotice;

use crate::config::Settings;

/// Every problem the settings cause now (empty: none).
pub fn config_notices(settings: &Settings) -> Vec<ConfigNotice> {
    let mut notices = Vec::new();
    let reference = &settings.callback_secret_ref;
    let unreadable = if reference.is_empty() {
        Some("no callback signing secret is set".to_string())
    } else {
        crate::channels::secrets::resolve_keys(reference)
            .err()
            .map(|err| format!("the callback signing secret cannot be read ({err})"))
    };
    if let Some(why) = unreadable {
        notices.push(ConfigNotice {
            setting: "callback_secret_ref".into(),
            problem: format!(
                "{why}: run callbacks are kept and retried, unsent, until it can be; \
                 their receivers' breakers are not affected"
            ),
        });
    }
    notices
}

/// Says each notice once at start-up, as an error line an operator will see.
pub fn log_config_notices(settings: &Settings) {
    for notice in config_notices(settings) {
        tracing::error!(setting = %notice.setting, "{}", notice.problem);
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
