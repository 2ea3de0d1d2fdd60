//! What this node's configuration keeps it from doing, checked when asked (at
//! start-up, on `/readyz`, by the console), so a fixed setting stops being
//! reported without a restart. A notice names the setting and the problem; only
//! the start-up log adds the detail (the reference that failed: a file path or a
//! variable name), never a secret's value.

use app::dto::ConfigNotice;

use crate::config::Settings;
use crate::routes::{RouteChannel, RouteConfig};

/// A problem, and its detail for the log.
struct Finding {
    notice: ConfigNotice,
    detail: String,
}

fn findings(settings: &Settings) -> Vec<Finding> {
    let mut found = Vec::new();
    found.extend(callback_secret(settings));
    found.extend(settings.routes.iter().filter_map(route_secret));
    found
}

/// A route whose secret reference cannot be read: its webhooks wait unsigned, its
/// e-mails unsent (the SMTP credentials), as run callbacks do.
fn route_secret(route: &RouteConfig) -> Option<Finding> {
    use crate::channels::secrets::{resolve_keys, resolve_text};
    let reference = route.secret_ref.as_deref()?;
    let failed = match route.channel {
        RouteChannel::Webhook => resolve_keys(reference).err(),
        RouteChannel::Email => resolve_text(reference).err(),
        RouteChannel::Chat => None,
    }?;
    Some(Finding {
        notice: ConfigNotice {
            setting: format!("routes.{}.secret_ref", route.name),
            problem: "the route's secret cannot be read: its deliveries wait, unsent and without \
                      spending attempts, and go once it can be read"
                .into(),
        },
        detail: failed.to_string(),
    })
}

fn callback_secret(settings: &Settings) -> Option<Finding> {
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
    let (why, detail) = unreadable?;
    Some(Finding {
        notice: ConfigNotice {
            setting: "callback_secret_ref".into(),
            problem: format!(
                "{why}: run callbacks wait, unsent and without spending attempts, and go \
                 once it can be read; their receivers' breakers are not affected"
            ),
        },
        detail,
    })
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

    #[test]
    fn a_route_whose_secret_cannot_be_read_is_a_notice_by_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        std::fs::write(&good, "whsec_c2VjcmV0LW9uZQ==").unwrap();
        let config = dir.path().join("herald.toml");
        std::fs::write(
            &config,
            format!(
                "callback_secret_ref = \"file:{good}\"\n\
                 [[routes]]\nname = \"partner\"\nchannel = \"webhook\"\n\
                 url = \"https://partner.example/hook\"\nsecret_ref = \"file:{gone}\"\n\
                 [[routes]]\nname = \"fine\"\nchannel = \"webhook\"\n\
                 url = \"https://fine.example/hook\"\nsecret_ref = \"file:{good}\"\n",
                good = good.display(),
                gone = dir.path().join("gone").display(),
            ),
        )
        .unwrap();
        let settings = Settings::resolve(&SettingsArgs {
            config: Some(config),
            ..Default::default()
        })
        .unwrap();
        let notices = config_notices(&settings);
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert_eq!(notices[0].setting, "routes.partner.secret_ref");
        assert!(!notices[0].problem.contains("gone"), "{notices:?}");
    }
}
