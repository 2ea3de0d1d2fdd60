//! Settings: command-line flags, then `HERALD_*` environment variables, then an
//! optional TOML file, then defaults — in that order of precedence.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A setting that could not be read; the message names the setting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("setting `{setting}`: {message}")]
    Invalid {
        setting: &'static str,
        message: String,
    },
}

/// Settings as flags and environment variables; every one is optional here.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct SettingsArgs {
    /// TOML file with settings (keys as below, in snake_case).
    #[arg(long, env = "HERALD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Database URL: sqlite://path, postgres://… or mysql://… [default: sqlite://data/herald.db]
    #[arg(
        long,
        env = "HERALD_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
    /// Maximum database connections in the pool [default: 8]
    #[arg(long, env = "HERALD_DATABASE_MAX_CONNECTIONS", value_name = "N")]
    pub database_max_connections: Option<u32>,
    /// Address the console, API and metrics listen on [default: 127.0.0.1:3000]
    #[arg(long, env = "HERALD_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Folder holding the built console (pkg/ with the WASM bundle and CSS) [default: target/site]
    #[arg(long, env = "HERALD_SITE_ROOT", value_name = "DIR")]
    pub site_root: Option<PathBuf>,
    /// Mark session cookies Secure (set when serving over HTTPS) [default: false]
    #[arg(long, env = "HERALD_SECURE_COOKIES", value_name = "BOOL")]
    pub secure_cookies: Option<bool>,
    /// Hours a console session lasts without activity [default: 12]
    #[arg(long, env = "HERALD_SESSION_IDLE_HOURS", value_name = "HOURS")]
    pub session_idle_hours: Option<u32>,
    /// Failed logins allowed per user and client address in the window [default: 5]
    #[arg(long, env = "HERALD_LOGIN_MAX_FAILURES", value_name = "N")]
    pub login_max_failures: Option<u32>,
    /// The failed-login window, in seconds [default: 900]
    #[arg(long, env = "HERALD_LOGIN_WINDOW_SECS", value_name = "SECS")]
    pub login_window_secs: Option<u64>,
    /// Largest request body accepted, in bytes [default: 1048576]
    #[arg(long, env = "HERALD_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Log format: text or json [default: text]
    #[arg(long, env = "HERALD_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
}

#[derive(clap::ValueEnum, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The same settings as read from the TOML file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    database_url: Option<String>,
    database_max_connections: Option<u32>,
    listen: Option<SocketAddr>,
    site_root: Option<PathBuf>,
    secure_cookies: Option<bool>,
    session_idle_hours: Option<u32>,
    login_max_failures: Option<u32>,
    login_window_secs: Option<u64>,
    max_body_bytes: Option<usize>,
    log_format: Option<LogFormat>,
}

/// Resolved settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub database_url: String,
    pub database_max_connections: u32,
    pub listen: SocketAddr,
    pub site_root: PathBuf,
    pub secure_cookies: bool,
    pub session_idle_hours: u32,
    pub login_max_failures: u32,
    pub login_window_secs: u64,
    pub max_body_bytes: usize,
    pub log_format: LogFormat,
}

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/herald.db";

impl Settings {
    pub fn resolve(args: &SettingsArgs) -> Result<Settings, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileSettings::default(),
        };
        let settings = Settings {
            database_url: args
                .database_url
                .clone()
                .or(file.database_url)
                .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_string()),
            database_max_connections: args
                .database_max_connections
                .or(file.database_max_connections)
                .unwrap_or(8),
            listen: args
                .listen
                .or(file.listen)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 3000))),
            site_root: args
                .site_root
                .clone()
                .or(file.site_root)
                .unwrap_or_else(|| PathBuf::from("target/site")),
            secure_cookies: args.secure_cookies.or(file.secure_cookies).unwrap_or(false),
            session_idle_hours: args
                .session_idle_hours
                .or(file.session_idle_hours)
                .unwrap_or(12),
            login_max_failures: args
                .login_max_failures
                .or(file.login_max_failures)
                .unwrap_or(5),
            login_window_secs: args
                .login_window_secs
                .or(file.login_window_secs)
                .unwrap_or(900),
            max_body_bytes: args
                .max_body_bytes
                .or(file.max_body_bytes)
                .unwrap_or(1024 * 1024),
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
        };
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        crate::store::Engine::from_url(&self.database_url).map_err(|e| ConfigError::Invalid {
            setting: "database_url",
            message: e.to_string(),
        })?;
        let positive = [
            (
                "database_max_connections",
                self.database_max_connections as u64,
            ),
            ("session_idle_hours", self.session_idle_hours as u64),
            ("login_max_failures", self.login_max_failures as u64),
            ("login_window_secs", self.login_window_secs),
            ("max_body_bytes", self.max_body_bytes as u64),
        ];
        for (setting, value) in positive {
            if value == 0 {
                return Err(ConfigError::Invalid {
                    setting,
                    message: "must be greater than zero".into(),
                });
            }
        }
        Ok(())
    }
}

fn read_file(path: &Path) -> Result<FileSettings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn flags_beat_file_and_file_beats_defaults() {
        let file = write("listen = \"127.0.0.1:4000\"\nlogin_max_failures = 9\n");
        let args = SettingsArgs {
            config: Some(file.path().to_path_buf()),
            listen: Some("127.0.0.1:5000".parse().unwrap()),
            ..Default::default()
        };
        let settings = Settings::resolve(&args).unwrap();
        assert_eq!(settings.listen.port(), 5000);
        assert_eq!(settings.login_max_failures, 9);
        assert_eq!(settings.database_url, DEFAULT_DATABASE_URL);
    }

    #[test]
    fn unknown_or_mistyped_file_keys_name_the_setting() {
        let file = write("lisen = \"127.0.0.1:4000\"\n");
        let err = Settings::resolve(&SettingsArgs {
            config: Some(file.path().to_path_buf()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("lisen"), "{err}");

        let file = write("login_max_failures = \"many\"\n");
        let err = Settings::resolve(&SettingsArgs {
            config: Some(file.path().to_path_buf()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("login_max_failures"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_setting() {
        let err = Settings::resolve(&SettingsArgs {
            database_url: Some("oracle://db".into()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("database_url"), "{err}");
        let err = Settings::resolve(&SettingsArgs {
            login_window_secs: Some(0),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("login_window_secs"), "{err}");
    }
}
