//! What the benches that drive a real `herald serve` share: a fresh database per
//! engine, the release binary, an admin token, the server process, and what
//! `/proc` says about a process (CPU time, peak RSS).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use herald::store::Engine;

use crate::db::TestDb;

/// A fresh database for a bench (dropped again by [`TestDb::drop_db`]);
/// PostgreSQL comes from HERALD_BENCH_POSTGRES_URL (default: the local server).
pub async fn fresh_db(engine: Engine, label: &str) -> TestDb {
    assert!(
        engine != Engine::MySql,
        "the benches cover SQLite and PostgreSQL"
    );
    let name = format!(
        "herald_bench_{label}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    TestDb::create(engine, name, || {
        std::env::var("HERALD_BENCH_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
    })
    .await
}

/// The `herald` binary of this build (release under `cargo bench`).
pub fn herald() -> Command {
    Command::new(crate::herald_bin())
}

pub fn admin_token(db_url: &str) -> String {
    let out = herald()
        .args(["token", "create", "--name", "bench", "--role", "admin"])
        .args(["--database-url", db_url])
        .output()
        .expect("herald token create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .map(str::trim)
        .find(|line| line.starts_with(herald::auth::token::TOKEN_PREFIX))
        .map(str::to_string)
        .expect("a token in the output")
}

/// `herald serve` in its own process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Where the server's output goes: the file `HERALD_BENCH_SERVER_LOG` names
/// (appended to, so a bench's log can be read beside its figures), else nowhere.
fn server_output() -> (Stdio, Stdio) {
    let Some(path) = std::env::var_os("HERALD_BENCH_SERVER_LOG") else {
        return (Stdio::null(), Stdio::null());
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|err| panic!("HERALD_BENCH_SERVER_LOG {path:?}: {err}"));
    let copy = file.try_clone().expect("a second handle on the server log");
    (file.into(), copy.into())
}

/// Starts `herald serve` on `db_url` with `extra` flags and environment, and waits
/// until `/readyz` answers.
pub async fn serve(db_url: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
    let (stdout, stderr) = server_output();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = herald()
        .arg("serve")
        .args(["--database-url", db_url])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--site-root", std::env::temp_dir().to_str().unwrap()])
        .args(extra)
        .env("HERALD_ADMIN_PASSWORD", "bench-admin-password")
        .envs(env.iter().copied())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("herald serve");
    let server = Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(resp) = client.get(format!("{}/readyz", server.base)).send().await {
            if resp.status().is_success() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "herald did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server
}

/// User + system CPU time a process has used so far (`/proc/<pid>/stat`).
pub fn cpu_time(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let total = ticks(11) + ticks(12);
    Duration::from_secs_f64(total as f64 / CLOCK_TICKS_PER_SECOND)
}

/// CPU time used so far by every process whose command is `name` (e.g. the
/// PostgreSQL server's backends; ones that exited meanwhile are not counted).
pub fn cpu_time_of_all(name: &str) -> Duration {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|pid| pid.chars().all(|c| c.is_ascii_digit()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
        .map(|pid| cpu_time(&pid))
        .sum()
}

/// `sysconf(_SC_CLK_TCK)`: 100 on every Linux this runs on.
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// Peak resident memory of a process in MB (`VmHWM` of `/proc/<pid>/status`).
pub fn peak_rss_mb(pid: &str) -> f64 {
    status_mb(pid, "VmHWM:")
}

/// Resident memory of a process now, in MB (`VmRSS`).
pub fn rss_mb(pid: &str) -> f64 {
    status_mb(pid, "VmRSS:")
}

fn status_mb(pid: &str, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}
