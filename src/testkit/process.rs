//! Real `herald serve` processes (spawned, signalled, SIGKILLed), the callback
//! event their scenes enqueue and the worker flags they run with.

use std::time::{Duration, Instant};

use herald::channels::webhook::WebhookPayload;
use herald::outbox::model::NewEvent;
use herald::outbox::model::Source;

use crate::server::{wait_ready, ADMIN_PASSWORD};

/// `herald serve` as a real child process.
pub struct HeraldProcess {
    pub child: std::process::Child,
    /// Where the child's log (stderr) goes.
    pub log: std::path::PathBuf,
    /// Where its standard output goes: the line naming the address it serves on.
    out: std::path::PathBuf,
}

impl HeraldProcess {
    /// Starts `herald serve` on `database_url`. Without `--listen` in `extra` it
    /// listens on a port the kernel picks (see [`HeraldProcess::base`]).
    pub fn spawn(database_url: &str, extra: &[&str]) -> HeraldProcess {
        Self::spawn_with_env(database_url, extra, &[])
    }

    /// `herald serve` on `database_url` whose callbacks may go to a loopback
    /// [`crate::Receiver`], signed with `secret`, its workers polling every 50 ms.
    pub fn spawn_for_loopback_callbacks(database_url: &str, secret: &str) -> HeraldProcess {
        Self::spawn_with_env(
            database_url,
            &[
                "--destination-allowlist",
                "127.0.0.0/8",
                "--worker-poll-interval-ms",
                "50",
            ],
            &[("HERALD_WEBHOOK_SECRET", secret)],
        )
    }

    /// [`HeraldProcess::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> HeraldProcess {
        Self::spawn_limited(database_url, extra, env, None)
    }

    /// [`HeraldProcess::spawn_with_env`] with its open-file limit (soft and hard)
    /// set to `open_files` before it starts (`prlimit`, which then runs it).
    pub fn spawn_with_open_file_limit(
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        open_files: u64,
    ) -> HeraldProcess {
        Self::spawn_limited(database_url, extra, env, Some(open_files))
    }

    fn spawn_limited(
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        open_files: Option<u64>,
    ) -> HeraldProcess {
        // `ready` asks the process over HTTP, whoever the caller is.
        herald::channels::install_crypto_provider();
        // Under target/tmp (kept for a failing test to read, gone with `cargo clean`).
        let name = uuid::Uuid::new_v4().simple().to_string();
        let dir = crate::target_tmp_dir();
        let dir = dir.as_path();
        let log_path = dir.join(format!("herald-child-{name}.log"));
        let out_path = dir.join(format!("herald-child-{name}.out"));
        let log = std::fs::File::create(&log_path).unwrap();
        let out = std::fs::File::create(&out_path).unwrap();
        let mut command = match open_files {
            Some(limit) => {
                let mut prlimit = std::process::Command::new("prlimit");
                prlimit
                    .arg(format!("--nofile={limit}:{limit}"))
                    .arg(crate::herald_bin());
                prlimit
            }
            None => std::process::Command::new(crate::herald_bin()),
        };
        command
            .arg("serve")
            .args(["--database-url", database_url])
            .args(["--site-root", std::env::temp_dir().to_str().unwrap()]);
        if !extra.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        let child = command
            .args(extra)
            .env("HERALD_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(out)
            .stderr(log)
            .spawn()
            .expect("spawn herald serve");
        HeraldProcess {
            child,
            log: log_path,
            out: out_path,
        }
    }

    /// `http://host:port` this process serves on, once it listens (it prints the
    /// address it bound, so no test hands it a port another socket may take).
    pub async fn base(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let printed = std::fs::read_to_string(&self.out).unwrap_or_default();
            let served = printed.lines().find_map(|line| {
                line.strip_prefix("Herald console: ")?
                    .strip_suffix("/overview")
            });
            if let Some(base) = served {
                return base.to_string();
            }
            if !self.is_running() || Instant::now() > deadline {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                panic!("herald serve never listened; its log:\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// [`HeraldProcess::base`], then waits until `/readyz` answers 2xx.
    pub async fn ready(&mut self) -> String {
        let base = self.base().await;
        wait_ready(&reqwest::Client::new(), &base).await;
        base
    }

    /// SIGKILL: no drain, no goodbye.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM (a graceful stop: drain, then exit).
    pub fn sigterm(&self) {
        let pid = self.child.id().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
    }

    /// The exit status, if the process exits within `within`.
    pub fn exited_within(
        &mut self,
        within: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// SIGTERM, then the exit status within `within` (SIGKILL if it has none).
    pub fn terminate(mut self, within: std::time::Duration) -> Option<std::process::ExitStatus> {
        self.sigterm();
        let status = self.exited_within(within);
        if status.is_none() {
            let _ = self.child.kill();
        }
        status
    }
}

impl Drop for HeraldProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A signed callback to `url`, as the crash and drain scenes enqueue it.
pub fn callback(id: &str, url: &str) -> NewEvent {
    NewEvent {
        event_id: id.to_string(),
        source: Source::Jobs,
        kind: "callback".into(),
        parent_type: "run".into(),
        parent_id: "crash-test".into(),
        payload: serde_json::to_string(&WebhookPayload {
            url: url.to_string(),
            body: serde_json::json!({ "run_id": "crash-test", "status": "succeeded" }),
            secret_ref: None,
        })
        .unwrap(),
        redeliverable: true,
        max_attempts: 6,
        delay_ms: 0,
        destination: herald::outbox::destinations::destination_of(url),
        trace_parent: None,
        lane: None,
    }
}

/// The worker flags of the process scenes (short polls, leases of `lease_secs`).
pub fn worker_flags(lease_secs: &'static str) -> Vec<&'static str> {
    vec![
        "--worker-concurrency",
        "8",
        "--worker-batch-size",
        "8",
        "--worker-poll-interval-ms",
        "100",
        "--lease-secs",
        lease_secs,
        "--maintenance-interval-ms",
        "200",
        "--initial-backoff-ms",
        "100",
        "--destination-allowlist",
        "127.0.0.0/8",
        "--listen",
        "127.0.0.1:0",
    ]
}
