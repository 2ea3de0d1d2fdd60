//! Settings: command-line flags, then `HERALD_*` environment variables, then an
//! optional TOML file, then defaults — in that order of precedence.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::routes::RouteConfig;

pub mod retention;
pub use retention::RetentionSettings;

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

/// Declares every setting once: as a flag with its `HERALD_*` variable, as a TOML
/// key, and resolved with its default.
macro_rules! settings {
    (
        file_only {
            $( $(#[doc = $fdoc:literal])* $fname:ident : $fty:ty = $fdefault:expr; )*
        }
        $( $(#[doc = $doc:literal])* $name:ident : $ty:ty = $default:expr, $env:literal; )*
    ) => {
        /// Settings as flags and environment variables; every one is optional here.
        #[derive(clap::Args, Debug, Default, Clone)]
        pub struct SettingsArgs {
            /// TOML file with settings (keys as the flags, in snake_case)
            #[arg(long, env = "HERALD_CONFIG", value_name = "FILE")]
            pub config: Option<PathBuf>,
            $( $(#[doc = $doc])* #[arg(long, env = $env, hide_env_values = true)] pub $name: Option<$ty>, )*
        }

        /// The same settings as read from the TOML file.
        #[derive(Deserialize, Debug, Default)]
        #[serde(deny_unknown_fields)]
        struct FileSettings {
            $( $name: Option<$ty>, )*
            $( $fname: Option<$fty>, )*
        }

        /// Resolved settings.
        #[derive(Debug, Clone)]
        pub struct Settings {
            $( $(#[doc = $doc])* pub $name: $ty, )*
            $( $(#[doc = $fdoc])* pub $fname: $fty, )*
        }

        impl Settings {
            fn merge(args: &SettingsArgs, file: FileSettings) -> Settings {
                Settings {
                    $( $name: args.$name.clone().or(file.$name).unwrap_or_else(|| $default), )*
                    $( $fname: file.$fname.unwrap_or_else(|| $fdefault), )*
                }
            }
        }
    };
}

settings! {
    file_only {
        /// Named delivery routes ([[routes]] tables in the config file)
        routes: Vec<RouteConfig> = Vec::new();
        /// Approval process definitions ([[approval_definitions]] tables in the config file)
        approval_definitions: Vec<crate::approvals::model::DefinitionSpec> = Vec::new();
        /// What is kept how long, and where removed rows are archived ([retention] in the config file)
        retention: RetentionSettings = RetentionSettings::default();
    }
    /// Jobs store URL: sqlite://PATH, postgres://…, mysql://… or memory:// (ephemeral, no durable outbox) [default: sqlite://data/herald.db]
    database_url: String = DEFAULT_DATABASE_URL.to_string(), "HERALD_DATABASE_URL";
    /// Approvals store URL, when approvals live in another database [default: the jobs store]
    approvals_database_url: String = String::new(), "HERALD_APPROVALS_DATABASE_URL";
    /// Maximum database connections per store [default: 8]
    database_max_connections: u32 = 8, "HERALD_DATABASE_MAX_CONNECTIONS";
    /// Address the console, API and metrics listen on [default: 127.0.0.1:3000]
    listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 3000)), "HERALD_LISTEN";
    /// Folder holding the built console (pkg/ with the WASM bundle and CSS) [default: target/site]
    site_root: PathBuf = PathBuf::from("target/site"), "HERALD_SITE_ROOT";
    /// Mark session cookies Secure (set when serving over HTTPS) [default: false]
    secure_cookies: bool = false, "HERALD_SECURE_COOKIES";
    /// Hours a console session lasts without activity [default: 12]
    session_idle_hours: u32 = 12, "HERALD_SESSION_IDLE_HOURS";
    /// Failed sign-ins allowed per user and client address in the window [default: 5]
    login_max_failures: u32 = 5, "HERALD_LOGIN_MAX_FAILURES";
    /// The failed sign-in window, in seconds [default: 900]
    login_window_secs: u64 = 900, "HERALD_LOGIN_WINDOW_SECS";
    /// Once over its limit across addresses, a user is let through once per this many ms [default: 5000]
    login_slowdown_ms: u64 = 5_000, "HERALD_LOGIN_SLOWDOWN_MS";
    /// Failed sign-ins allowed per client address across all usernames in the window [default: 100]
    login_address_max_failures: u32 = crate::auth::throttle::DEFAULT_ADDRESS_LIMIT, "HERALD_LOGIN_ADDRESS_MAX_FAILURES";
    /// How long an API token found valid is trusted without a store lookup, in milliseconds; a revocation is refused at once by the node that made it and by other nodes after at most this long (0: every request looks its token up; at most 300000) [default: 1000]
    api_token_cache_ms: u64 = 1_000, "HERALD_API_TOKEN_CACHE_MS";
    /// Reverse proxies whose X-Forwarded-For names the client, e.g. "10.0.0.0/8" [default: none]
    trusted_proxies: String = String::new(), "HERALD_TRUSTED_PROXIES";
    /// Live-update streams (console tabs) this server keeps open at once; past it a tab polls [default: 500]
    live_max_streams: usize = 500, "HERALD_LIVE_MAX_STREAMS";
    /// Client connections held open at once; past it new ones wait in the listen backlog, so clients never take the descriptors the store and deliveries need [default: 0, what the open-file limit leaves after the deliveries, the database connections and 256]
    http_max_connections: usize = 0, "HERALD_HTTP_MAX_CONNECTIONS";
    /// Seconds a client connection may stay with nothing read from it or written to it before it is closed, so idle keep-alive connections and clients that stopped reading give their places back; an answer must begin within it (live streams write a keep-alive at a third of it) (0: never; at most 86400) [default: 75]
    http_idle_timeout_secs: u64 = 75, "HERALD_HTTP_IDLE_TIMEOUT_SECS";
    /// Producer API requests (`/api/v1`) served at once; past it a request is refused at once with 503 and Retry-After, before anything is recorded, so a producer that outruns the store is told to back off instead of piling up connections (0: no bound) [default: 1024]
    api_max_requests_in_flight: usize = 1_024, "HERALD_API_MAX_REQUESTS_IN_FLIGHT";
    /// Largest request body accepted, in bytes [default: 1048576]
    max_body_bytes: usize = 1024 * 1024, "HERALD_MAX_BODY_BYTES";
    /// Log format: text or json [default: text]
    log_format: LogFormat = LogFormat::Text, "HERALD_LOG_FORMAT";
    /// OpenTelemetry: the collector's OTLP/HTTP URL, e.g. http://127.0.0.1:4318 (traces are off without it) [default: none]
    otlp_endpoint: String = String::new(), "HERALD_OTLP_ENDPOINT";
    /// OpenTelemetry: the share of new traces kept, 0 to 1 (a caller's sampled traceparent is always kept) [default: 1]
    otlp_sampling: f64 = 1.0, "HERALD_OTLP_SAMPLING";
    /// Handlers running at once per store [default: 256]
    worker_concurrency: usize = 256, "HERALD_WORKER_CONCURRENCY";
    /// Events claimed per statement [default: 256]
    worker_batch_size: u32 = 256, "HERALD_WORKER_BATCH_SIZE";
    /// How often idle workers look for due work, in milliseconds [default: 1000]
    worker_poll_interval_ms: u64 = 1000, "HERALD_WORKER_POLL_INTERVAL_MS";
    /// How long a claim holds an event before another worker may recover it, in seconds [default: 60]
    lease_secs: u64 = 60, "HERALD_LEASE_SECS";
    /// Lease an event to this node's worker as it is written when the worker can send it at once, instead of leaving it for a claim [default: true]
    lease_at_insert: bool = true, "HERALD_LEASE_AT_INSERT";
    /// Sending attempts per automatic cycle [default: 6]
    max_attempts: u32 = 6, "HERALD_MAX_ATTEMPTS";
    /// First retry delay, in milliseconds [default: 5000]
    initial_backoff_ms: u64 = 5_000, "HERALD_INITIAL_BACKOFF_MS";
    /// Longest retry delay, in milliseconds [default: 600000]
    max_backoff_ms: u64 = 600_000, "HERALD_MAX_BACKOFF_MS";
    /// Add random jitter to retry delays [default: true]
    backoff_jitter: bool = true, "HERALD_BACKOFF_JITTER";
    /// On SIGTERM, how long to finish accepted work before exiting, in seconds [default: 30]
    drain_deadline_secs: u64 = 30, "HERALD_DRAIN_DEADLINE_SECS";
    /// How often the maintenance sweep and metrics refresh run, in milliseconds [default: 5000]
    maintenance_interval_ms: u64 = 5_000, "HERALD_MAINTENANCE_INTERVAL_MS";
    /// How often the overview's per-minute rollups are recounted (by one node), in milliseconds [default: 10000]
    rollup_interval_ms: u64 = 10_000, "HERALD_ROLLUP_INTERVAL_MS";
    /// Timeout of one outbound delivery request, in milliseconds [default: 15000]
    http_timeout_ms: u64 = 15_000, "HERALD_HTTP_TIMEOUT_MS";
    /// Non-public networks deliveries may reach, e.g. "127.0.0.0/8,::1" [default: none]
    destination_allowlist: String = String::new(), "HERALD_DESTINATION_ALLOWLIST";
    /// Signing secret of run callbacks, by reference: env:NAME or file:/path [default: env:HERALD_WEBHOOK_SECRET]
    callback_secret_ref: String = "env:HERALD_WEBHOOK_SECRET".to_string(), "HERALD_CALLBACK_SECRET_REF";
    /// Deliver run callbacks one at a time per run or per tenant, in commit order (docs/ORDERING.md): none, run or tenant [default: none]
    callback_ordered_by: CallbackOrder = CallbackOrder::Unordered, "HERALD_CALLBACK_ORDERED_BY";
    /// The route that is told about every event that ends failed [default: none]
    dead_letter_route: String = String::new(), "HERALD_DEAD_LETTER_ROUTE";
    /// Deliveries in flight at once per destination origin, for callbacks and routes without their own max_in_flight [default: 16]
    destination_max_in_flight: usize = 16, "HERALD_DESTINATION_MAX_IN_FLIGHT";
    /// Consecutive retryable failures that open a destination's circuit breaker [default: 5]
    breaker_failures: u32 = 5, "HERALD_BREAKER_FAILURES";
    /// How long an open breaker waits before its half-open probe, in milliseconds; doubled after each failed probe, up to breaker_max_open_ms [default: 30000]
    breaker_open_ms: u64 = 30_000, "HERALD_BREAKER_OPEN_MS";
    /// The longest wait before a half-open probe, in milliseconds, however many probes failed [default: 600000]
    breaker_max_open_ms: u64 = 600_000, "HERALD_BREAKER_MAX_OPEN_MS";
    /// Largest chat message part, in characters [default: 3000]
    chat_max_chars: usize = 3_000, "HERALD_CHAT_MAX_CHARS";
    /// Largest run result snapshot, in bytes of JSON [default: 262144]
    max_result_bytes: usize = 256 * 1024, "HERALD_MAX_RESULT_BYTES";
    /// Field-update replay (every lifecycle event's FieldUpdates): attempts per automatic cycle [default: 6]
    replay_max_attempts: u32 = 6, "HERALD_REPLAY_MAX_ATTEMPTS";
    /// Field-update replay (every lifecycle event's FieldUpdates): first retry delay, in milliseconds [default: 1000]
    replay_initial_backoff_ms: u64 = 1_000, "HERALD_REPLAY_INITIAL_BACKOFF_MS";
    /// Field-update replay (every lifecycle event's FieldUpdates): longest retry delay, in milliseconds [default: 300000]
    replay_max_backoff_ms: u64 = 300_000, "HERALD_REPLAY_MAX_BACKOFF_MS";
    /// Field-update replay (every lifecycle event's FieldUpdates): how often the replay worker looks for due rows, in milliseconds [default: 1000]
    replay_poll_interval_ms: u64 = 1_000, "HERALD_REPLAY_POLL_INTERVAL_MS";
    /// Field-update replay (every lifecycle event's FieldUpdates): rows claimed per statement [default: 32]
    replay_batch_size: u32 = 32, "HERALD_REPLAY_BATCH_SIZE";
    /// Field-update replay (every lifecycle event's FieldUpdates): lease of a claimed row, in seconds [default: 30]
    replay_lease_secs: u64 = 30, "HERALD_REPLAY_LEASE_SECS";
}

#[derive(clap::ValueEnum, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Whether run callbacks are ordered, and by what (`callback_ordered_by`).
#[derive(clap::ValueEnum, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum CallbackOrder {
    /// No order: today's behaviour.
    #[default]
    #[value(name = "none")]
    #[serde(rename = "none")]
    Unordered,
    Run,
    Tenant,
}

impl CallbackOrder {
    /// The route setting's equivalent, if callbacks are ordered.
    pub fn ordered_by(self) -> Option<crate::routes::OrderedBy> {
        match self {
            CallbackOrder::Unordered => None,
            CallbackOrder::Run => Some(crate::routes::OrderedBy::Run),
            CallbackOrder::Tenant => Some(crate::routes::OrderedBy::Tenant),
        }
    }
}

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/herald.db";
/// Five minutes: longer, a token revoked on one node would be trusted by others
/// for longer than an operator would guess.
pub const MAX_API_TOKEN_CACHE_MS: u64 = 300_000;
/// The longest idle timeout a client connection may be given.
pub const MAX_HTTP_IDLE_TIMEOUT_SECS: u64 = 86_400;

impl Settings {
    pub fn resolve(args: &SettingsArgs) -> Result<Settings, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileSettings::default(),
        };
        let settings = Settings::merge(args, file);
        settings.validate()?;
        Ok(settings)
    }

    /// Where traces go, if anywhere.
    pub fn traces(&self) -> Option<crate::telemetry::TraceSettings> {
        (!self.otlp_endpoint.trim().is_empty()).then(|| crate::telemetry::TraceSettings {
            endpoint: self.otlp_endpoint.trim().to_string(),
            sampling: self.otlp_sampling,
        })
    }

    /// The approvals store's URL (the jobs store's unless set).
    pub fn approvals_url(&self) -> &str {
        if self.approvals_database_url.is_empty() {
            &self.database_url
        } else {
            &self.approvals_database_url
        }
    }

    /// Whether the approvals store is a database of its own (not the jobs store).
    pub fn approvals_apart(&self) -> bool {
        self.approvals_url() != self.database_url
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(traces) = self.traces() {
            traces.check().map_err(|err| ConfigError::Invalid {
                setting: err.setting(),
                message: err.to_string(),
            })?;
        }
        for (setting, url) in [
            ("database_url", self.database_url.as_str()),
            ("approvals_database_url", self.approvals_url()),
        ] {
            crate::store::Engine::from_url(url).map_err(|e| ConfigError::Invalid {
                setting,
                message: e.to_string(),
            })?;
        }
        let positive = [
            (
                "database_max_connections",
                self.database_max_connections as u64,
            ),
            ("session_idle_hours", self.session_idle_hours as u64),
            ("login_max_failures", self.login_max_failures as u64),
            ("login_window_secs", self.login_window_secs),
            ("login_slowdown_ms", self.login_slowdown_ms),
            (
                "login_address_max_failures",
                self.login_address_max_failures as u64,
            ),
            ("max_body_bytes", self.max_body_bytes as u64),
            ("live_max_streams", self.live_max_streams as u64),
            ("worker_concurrency", self.worker_concurrency as u64),
            ("worker_batch_size", self.worker_batch_size as u64),
            ("worker_poll_interval_ms", self.worker_poll_interval_ms),
            ("lease_secs", self.lease_secs),
            ("max_attempts", self.max_attempts as u64),
            ("initial_backoff_ms", self.initial_backoff_ms),
            ("max_backoff_ms", self.max_backoff_ms),
            ("maintenance_interval_ms", self.maintenance_interval_ms),
            ("rollup_interval_ms", self.rollup_interval_ms),
            ("http_timeout_ms", self.http_timeout_ms),
            ("chat_max_chars", self.chat_max_chars as u64),
            (
                "destination_max_in_flight",
                self.destination_max_in_flight as u64,
            ),
            ("breaker_failures", self.breaker_failures as u64),
            ("breaker_open_ms", self.breaker_open_ms),
            ("breaker_max_open_ms", self.breaker_max_open_ms),
            ("max_result_bytes", self.max_result_bytes as u64),
            ("replay_max_attempts", self.replay_max_attempts as u64),
            ("replay_initial_backoff_ms", self.replay_initial_backoff_ms),
            ("replay_max_backoff_ms", self.replay_max_backoff_ms),
            ("replay_poll_interval_ms", self.replay_poll_interval_ms),
            ("replay_batch_size", self.replay_batch_size as u64),
            ("replay_lease_secs", self.replay_lease_secs),
        ];
        for (setting, value) in positive {
            if value == 0 {
                return Err(ConfigError::Invalid {
                    setting,
                    message: "must be greater than zero".into(),
                });
            }
        }
        if self.http_idle_timeout_secs > MAX_HTTP_IDLE_TIMEOUT_SECS {
            return Err(ConfigError::Invalid {
                setting: "http_idle_timeout_secs",
                message: format!(
                    "must be at most {MAX_HTTP_IDLE_TIMEOUT_SECS} (a day); 0 never closes an idle connection"
                ),
            });
        }
        if self.api_token_cache_ms > MAX_API_TOKEN_CACHE_MS {
            return Err(ConfigError::Invalid {
                setting: "api_token_cache_ms",
                message: format!(
                    "must be at most {MAX_API_TOKEN_CACHE_MS}: other nodes trust a revoked token this long"
                ),
            });
        }
        crate::channels::guard::DestinationGuard::parse_allowlist(&self.destination_allowlist)
            .map_err(|message| ConfigError::Invalid {
                setting: "destination_allowlist",
                message,
            })?;
        crate::channels::guard::DestinationGuard::parse_allowlist(&self.trusted_proxies).map_err(
            |message| ConfigError::Invalid {
                setting: "trusted_proxies",
                message,
            },
        )?;
        if !self.callback_secret_ref.is_empty() {
            crate::channels::secrets::validate_reference(&self.callback_secret_ref).map_err(
                |e| ConfigError::Invalid {
                    setting: "callback_secret_ref",
                    message: e.to_string(),
                },
            )?;
        }
        let mut names = std::collections::HashSet::new();
        for route in &self.routes {
            let invalid = |message: String| ConfigError::Invalid {
                setting: "routes",
                message,
            };
            route.check_name().map_err(invalid)?;
            if !names.insert(route.name.as_str()) {
                return Err(invalid(format!("route {:?} is defined twice", route.name)));
            }
            route.check().map_err(invalid)?;
        }
        let mut definition_ids = std::collections::HashSet::new();
        for definition in &self.approval_definitions {
            if !definition_ids.insert(definition.id.as_str()) {
                return Err(ConfigError::Invalid {
                    setting: "approval_definitions",
                    message: format!("definition {:?} is defined twice", definition.id),
                });
            }
            definition
                .validate(|route| names.contains(route))
                .map_err(|(part, message)| ConfigError::Invalid {
                    setting: "approval_definitions",
                    message: format!("definition {:?}: {part}: {message}", definition.id),
                })?;
        }
        if self.replay_max_backoff_ms < self.replay_initial_backoff_ms {
            return Err(ConfigError::Invalid {
                setting: "replay_max_backoff_ms",
                message: "must not be less than replay_initial_backoff_ms".into(),
            });
        }
        if !self.dead_letter_route.is_empty() && !names.contains(self.dead_letter_route.as_str()) {
            return Err(ConfigError::Invalid {
                setting: "dead_letter_route",
                message: format!("no route is named {:?}", self.dead_letter_route),
            });
        }
        self.retention.policy().map_err(|e| ConfigError::Invalid {
            setting: e.setting,
            message: e.message,
        })?;
        if self.max_backoff_ms < self.initial_backoff_ms {
            return Err(ConfigError::Invalid {
                setting: "max_backoff_ms",
                message: "must not be below initial_backoff_ms".into(),
            });
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
    fn routes_come_from_the_file_and_are_checked() {
        let file = write(
            "dead_letter_route = \"ops\"\n[[routes]]\nname = \"ops\"\nchannel = \"chat\"\nurl = \"https://chat.example.com/hook\"\nbrand = \"Acme\"\n",
        );
        let settings = Settings::resolve(&SettingsArgs {
            config: Some(file.path().to_path_buf()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            settings.routes[0].channel,
            crate::routes::RouteChannel::Chat
        );
        let file = write("dead_letter_route = \"nobody\"\n");
        let err = Settings::resolve(&SettingsArgs {
            config: Some(file.path().to_path_buf()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("dead_letter_route"), "{err}");
        let file =
            write("[[routes]]\nname = \"x\"\nchannel = \"pager\"\nurl = \"https://a.example\"\n");
        let err = Settings::resolve(&SettingsArgs {
            config: Some(file.path().to_path_buf()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("pager"), "{err}");
        let long = "r".repeat(crate::routes::MAX_ROUTE_NAME_LEN + 1);
        let file = write(&format!(
            "[[routes]]\nname = \"{long}\"\nchannel = \"chat\"\nurl = \"https://a.example\"\n"
        ));
        let err = Settings::resolve(&SettingsArgs {
            config: Some(file.path().to_path_buf()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("longer than 64"), "{err}");
    }

    #[test]
    fn email_routes_are_checked_and_their_settings_named() {
        let resolve = |text: &str| {
            let file = write(text);
            Settings::resolve(&SettingsArgs {
                config: Some(file.path().to_path_buf()),
                ..Default::default()
            })
        };
        let ok = resolve(
            "[[routes]]\nname = \"mail\"\nchannel = \"email\"\nurl = \"smtps://mail.example.com\"\nto = \"ops@example.com\"\nsubject = \"run {run_id}\"\nmax_in_flight = 2\n",
        )
        .unwrap();
        assert_eq!(ok.routes[0].to, vec!["ops@example.com".to_string()]);
        assert_eq!(ok.routes[0].max_in_flight, Some(2));
        for (text, wanted) in [
            ("channel = \"email\"\nurl = \"smtp://m.example.com\"\nto = \"not an address\"\n", "`to`"),
            ("channel = \"email\"\nurl = \"smtp://m.example.com\"\n", "`to`"),
            ("channel = \"email\"\nurl = \"https://m.example.com\"\nto = \"a@b.example\"\n", "`url`"),
            ("channel = \"email\"\nurl = \"smtp://m.example.com\"\nto = \"a@b.example\"\nbody = \"{secret}\"\n", "`body`"),
            ("channel = \"webhook\"\nurl = \"https://h.example.com\"\nto = \"a@b.example\"\n", "only for email"),
            ("channel = \"webhook\"\nurl = \"https://h.example.com\"\nmax_in_flight = 0\n", "max_in_flight"),
        ] {
            let err = resolve(&format!("[[routes]]\nname = \"r\"\n{text}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("routes") && err.contains(wanted), "{err}");
        }
    }

    #[test]
    fn ordered_routes_name_their_lane_and_an_unknown_order_is_refused() {
        let resolve = |text: &str| {
            let file = write(text);
            Settings::resolve(&SettingsArgs {
                config: Some(file.path().to_path_buf()),
                ..Default::default()
            })
        };
        let route =
            "[[routes]]\nname = \"ops\"\nchannel = \"webhook\"\nurl = \"https://h.example.com\"\n";
        let by_tenant = resolve(&format!("{route}ordered_by = \"tenant\"\n")).unwrap();
        assert_eq!(
            by_tenant.routes[0].lane("run-1", "acme").as_deref(),
            Some("route:ops:tenant:acme")
        );
        let by_run = resolve(&format!("{route}ordered_by = \"run\"\n")).unwrap();
        assert_eq!(
            by_run.routes[0].lane("run-1", "acme").as_deref(),
            Some("route:ops:run:run-1")
        );
        assert_eq!(
            resolve(route).unwrap().routes[0].lane("run-1", "acme"),
            None
        );
        // The longest route name and tenant still make a key a store keeps.
        let longest = format!(
            "{}ordered_by = \"tenant\"\n",
            route.replace("ops", &"o".repeat(64))
        );
        let long = resolve(&longest).unwrap().routes[0]
            .lane("run-1", &"t".repeat(128))
            .unwrap();
        assert!(long.starts_with("sha256:") && long.len() <= crate::routes::MAX_LANE_LEN);
        let err = resolve(&format!("{route}ordered_by = \"sometimes\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ordered_by") || err.contains("sometimes"),
            "{err}"
        );
    }

    #[test]
    fn callback_order_is_none_run_or_tenant() {
        let resolve = |text: &str| {
            let file = write(text);
            Settings::resolve(&SettingsArgs {
                config: Some(file.path().to_path_buf()),
                ..Default::default()
            })
        };
        assert_eq!(resolve("").unwrap().callback_ordered_by.ordered_by(), None);
        assert_eq!(
            resolve("callback_ordered_by = \"tenant\"\n")
                .unwrap()
                .callback_ordered_by
                .ordered_by(),
            Some(crate::routes::OrderedBy::Tenant)
        );
        assert_eq!(
            resolve("callback_ordered_by = \"none\"\n")
                .unwrap()
                .callback_ordered_by,
            CallbackOrder::Unordered
        );
        let err = resolve("callback_ordered_by = \"sometimes\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("sometimes"), "{err}");
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
        let err = Settings::resolve(&SettingsArgs {
            api_token_cache_ms: Some(MAX_API_TOKEN_CACHE_MS + 1),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("api_token_cache_ms"), "{err}");
        let err = Settings::resolve(&SettingsArgs {
            http_idle_timeout_secs: Some(u64::MAX),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("http_idle_timeout_secs"), "{err}");
    }
}
