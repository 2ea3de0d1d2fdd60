//! Several `herald serve` nodes and the load they share, for the multi-node tests
//! (`process/multi_node.rs`) and the nodes benchmark (`benches/nodes.rs`): the
//! 3-node Galera cluster of `scripts/galera-cluster`, real Herald processes on loopback ports they pick and report, and an API client that moves
//! on to the next node when one is down, as a load balancer would.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald::store::ports::RecordRepository;
use serde_json::{json, Value};
use sqlx::Row;

use crate::HeraldProcess;

/// The approvals configuration of the multi-node scenes: a recall resets the
/// deal's account (a `field_update` replay through the outbox).
pub const APPROVALS_CONFIG: &str = r#"
[[approval_definitions]]
id = "deal"
object = "Opportunity"

[[approval_definitions.steps]]
name = "Manager"
approver = { role = "admin" }

[[approval_definitions.actions.recall]]
type = "FieldUpdate"
id = "acct"
field_path = "Account.Status"
value = "Prospect"
"#;

/// The secret the nodes sign callbacks with (`callback_secret_ref`'s default
/// `env:HERALD_WEBHOOK_SECRET`); receivers verify with it.
pub const CALLBACK_SECRET: &str = "whsec_bm9kZXMtY2FsbGJhY2stc2VjcmV0LWZvci10ZXN0cw==";

/// The 3-node Galera cluster of `scripts/galera-cluster`.
pub struct Galera {
    script: PathBuf,
}

impl Galera {
    /// Starts the cluster (a no-op when it runs). Outside CI a machine that cannot
    /// run it skips the caller (None); under `CI=true` that is a failure.
    pub fn ensure() -> Option<Galera> {
        let galera = Galera {
            script: Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/galera-cluster"),
        };
        let mut started = galera.run(&["start"]);
        if started.is_err() {
            // A cluster an earlier run left without quorum cannot rejoin itself:
            // begin again from empty data folders.
            let _ = galera.run(&["destroy"]);
            started = galera.run(&["start"]);
        }
        if started.is_ok() {
            return Some(galera);
        }
        let why = started.unwrap_err();
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("the Galera cluster must run under CI: {why}");
        }
        eprintln!("skipping: the Galera cluster cannot start here: {why}");
        None
    }

    fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = std::process::Command::new("bash")
            .arg(&self.script)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.script.display()))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }

    fn must(&self, args: &[&str]) {
        if let Err(why) = self.run(args) {
            panic!("galera-cluster {args:?} failed: {why}");
        }
    }

    /// SIGKILL of database node `n`.
    pub fn kill(&self, n: usize) {
        self.must(&["kill", &n.to_string()]);
    }

    /// Starts node `n` again (an incremental rejoin when a primary component exists).
    pub fn restart(&self, n: usize) {
        self.must(&["restart", &n.to_string()]);
    }

    /// Makes node `n` primary after a quorum loss.
    pub fn bootstrap(&self, n: usize) {
        self.must(&["bootstrap", &n.to_string()]);
    }

    /// Brings every node back (a test that killed some leaves the cluster whole).
    pub fn heal(&self) {
        self.must(&["start"]);
    }

    /// The URL of database `name` on node `n`.
    pub fn url(n: usize, name: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{name}", 3310 + n)
    }

    /// A fresh database (replicated to every node); returns its name.
    pub async fn create_database(&self) -> String {
        use sqlx::{Connection, Executor};
        sqlx::any::install_default_drivers();
        let name = format!(
            "herald_g_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let mut conn = sqlx::AnyConnection::connect(&Self::url(1, "mysql"))
            .await
            .expect("connect to Galera node 1");
        conn.execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create the Galera test database");
        conn.close().await.ok();
        name
    }

    pub async fn drop_database(&self, name: &str) {
        use sqlx::{Connection, Executor};
        if let Ok(mut conn) = sqlx::AnyConnection::connect(&Self::url(1, "mysql")).await {
            let _ = conn
                .execute(format!("DROP DATABASE IF EXISTS {name}").as_str())
                .await;
            let _ = conn.close().await;
        }
    }
}

/// Worker settings of the multi-node scenes: short leases (a killed node's work is
/// recovered in seconds), frequent maintenance, loopback receivers allowed.
pub fn node_flags(lease_secs: &str) -> Vec<String> {
    [
        "--worker-concurrency",
        "32",
        "--worker-batch-size",
        "32",
        "--worker-poll-interval-ms",
        "200",
        "--lease-secs",
        lease_secs,
        "--replay-lease-secs",
        lease_secs,
        "--replay-poll-interval-ms",
        "200",
        "--maintenance-interval-ms",
        "300",
        "--initial-backoff-ms",
        "100",
        "--destination-allowlist",
        "127.0.0.0/8",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// One `herald serve` process of a multi-node scene.
pub struct Node {
    pub process: HeraldProcess,
    pub base: String,
    pub pid: u32,
}

impl Node {
    /// Starts a node on `database_url` and waits until it is ready.
    pub async fn start(
        database_url: &str,
        config: Option<&Path>,
        lease_secs: &str,
        env: &[(&str, &str)],
    ) -> Node {
        herald::channels::install_crypto_provider();
        let mut flags = node_flags(lease_secs);
        // A setting given in `env` wins over the same setting's flag here (a flag
        // would beat the environment).
        for (name, _) in env {
            let Some(setting) = name.strip_prefix("HERALD_") else {
                continue;
            };
            let flag = format!("--{}", setting.to_lowercase().replace('_', "-"));
            if let Some(at) = flags.iter().position(|f| *f == flag) {
                flags.drain(at..at + 2);
            }
        }
        if let Some(config) = config {
            flags.extend(["--config".to_string(), config.display().to_string()]);
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let mut env = env.to_vec();
        env.push(("HERALD_WEBHOOK_SECRET", CALLBACK_SECRET));
        let mut process = HeraldProcess::spawn_with_env(database_url, &flags, &env);
        let pid = process.child.id();
        let base = process.ready().await;
        Node { process, base, pid }
    }

    /// Whether a lease holder or attempt-log worker name is this process's.
    pub fn holds(&self, holder: &str) -> bool {
        holder_is(holder, self.pid)
    }
}

/// Whether a worker name (`host:pid:nonce`) belongs to process `pid`.
pub fn holder_is(holder: &str, pid: u32) -> bool {
    holder.split(':').nth(1) == Some(pid.to_string().as_str())
}

/// An API client over several nodes that fails over like a load balancer: a
/// refused connection, a timeout or a 5xx moves the request to the next node.
pub struct Api {
    pub bases: Vec<String>,
    token: String,
    client: reqwest::Client,
    /// How long one request may keep failing over before it is given up.
    pub patience: Duration,
    /// Until when each node is passed over after failing a request (a load
    /// balancer's failed health check), so one hung node does not hold up every
    /// request that starts there.
    benched: Vec<std::sync::Mutex<Option<Instant>>>,
}

/// How long a node that failed a request is passed over.
const BENCH_FOR: Duration = Duration::from_secs(2);

/// How a request ended.
#[derive(Debug)]
pub enum Answer {
    Ok(Value),
    /// A 4xx: the node answered and refused.
    Refused(u16, String),
    /// No node answered with anything but errors until the patience ran out.
    GaveUp(String),
}

impl Api {
    pub fn new(bases: Vec<String>, token: String) -> Arc<Api> {
        herald::channels::install_crypto_provider();
        Arc::new(Api {
            benched: bases.iter().map(|_| Default::default()).collect(),
            bases,
            token,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
            patience: Duration::from_secs(180),
        })
    }

    /// POSTs `body` to `path`, first on node `first`.
    pub async fn post(&self, first: usize, path: &str, body: &Value) -> Answer {
        let deadline = Instant::now() + self.patience;
        let mut node = first;
        let mut last = String::new();
        while Instant::now() < deadline {
            let index = node % self.bases.len();
            node += 1;
            let benched = *self.benched[index].lock().unwrap();
            let every_node_benched = self.benched.iter().all(|b| {
                b.lock()
                    .unwrap()
                    .is_some_and(|until| until > Instant::now())
            });
            if benched.is_some_and(|until| until > Instant::now()) && !every_node_benched {
                continue;
            }
            let base = &self.bases[index];
            let sent = self
                .client
                .post(format!("{base}{path}"))
                .bearer_auth(&self.token)
                .json(body)
                .send()
                .await;
            match sent {
                Ok(resp) if resp.status().is_success() => {
                    return Answer::Ok(resp.json().await.unwrap_or(Value::Null))
                }
                Ok(resp) if resp.status().is_client_error() => {
                    let status = resp.status().as_u16();
                    return Answer::Refused(status, resp.text().await.unwrap_or_default());
                }
                Ok(resp) => last = format!("{base}: {}", resp.status()),
                Err(err) => last = format!("{base}: {err}"),
            }
            *self.benched[index].lock().unwrap() = Some(Instant::now() + BENCH_FOR);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Answer::GaveUp(last)
    }

    async fn must(&self, first: usize, path: &str, body: &Value) -> Result<Value, String> {
        match self.post(first, path, body).await {
            Answer::Ok(v) => Ok(v),
            Answer::Refused(status, text) => Err(format!("{path}: refused {status}: {text}")),
            Answer::GaveUp(last) => Err(format!("{path}: gave up after {last}")),
        }
    }

    /// A run created and taken to `succeeded` (two transitions, each retried on
    /// another node until acknowledged: a repeated transition is a replay). Its
    /// callback goes to `callback`. Returns the run id once both are acknowledged.
    pub async fn run_to_success(&self, first: usize, callback: &str) -> Result<String, String> {
        let run = self
            .must(
                first,
                "/api/v1/runs",
                &json!({"type": "load", "tenant": "nodes", "callback_url": callback}),
            )
            .await?;
        let id = run["id"].as_str().ok_or("no run id")?.to_string();
        for to in ["running", "succeeded"] {
            self.must(
                first,
                &format!("/api/v1/runs/{id}/transitions"),
                &json!({"to": to, "result": {"ok": true}}),
            )
            .await?;
        }
        Ok(id)
    }

    /// An account, a deal on it, an approval of the deal and its recall, which owes
    /// a `field_update` replay setting the account's Status to "Prospect". Returns
    /// the replay's event id once the recall is acknowledged.
    pub async fn recall(&self, first: usize) -> Result<String, String> {
        let account = self
            .must(
                first,
                "/api/v1/records/Account",
                &json!({"fields": {"Status": "Customer"}}),
            )
            .await?;
        let account = account["id"].as_str().ok_or("no account id")?;
        let deal = self
            .must(
                first,
                "/api/v1/records/Opportunity",
                &json!({"fields": {"AccountId": account}}),
            )
            .await?;
        let deal = deal["id"].as_str().ok_or("no deal id")?;
        let approval = self
            .must(
                first,
                "/api/v1/approvals",
                &json!({"definition_id": "deal", "record_id": deal}),
            )
            .await?;
        let id = approval["id"].as_str().ok_or("no approval id")?.to_string();
        let recalled = self
            .must(first, &format!("/api/v1/approvals/{id}/recall"), &json!({}))
            .await?;
        Ok(format!("recall_{id}_{}", recalled["transition_seq"]))
    }
}

/// What a load run acknowledged.
#[derive(Debug, Default)]
pub struct Acknowledged {
    /// Runs whose both transitions were acknowledged.
    pub runs: Vec<String>,
    /// Replay event ids of acknowledged recalls.
    pub replays: Vec<String>,
    /// Lifecycles that did not complete (a request given up or refused).
    pub abandoned: Vec<String>,
}

/// Drives `runs` run lifecycles (and `recalls` recalls) through the API with
/// `concurrency` clients, spreading them over the nodes.
pub async fn drive(
    api: Arc<Api>,
    runs: usize,
    recalls: usize,
    concurrency: usize,
    callback: String,
) -> Acknowledged {
    let next = Arc::new(AtomicUsize::new(0));
    let total = runs + recalls;
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (api, next, callback) = (api.clone(), next.clone(), callback.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = Acknowledged::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return mine;
                }
                // Recalls are spread through the load rather than bunched at its start.
                let is_recall = recalls > 0 && i % (total / recalls).max(1) == 0;
                let result = if is_recall {
                    api.recall(i).await.map(|r| mine.replays.push(r))
                } else {
                    api.run_to_success(i, &callback)
                        .await
                        .map(|r| mine.runs.push(r))
                };
                if let Err(why) = result {
                    mine.abandoned.push(why);
                }
            }
        }));
    }
    let mut all = Acknowledged::default();
    for task in tasks {
        let mine = task.await.expect("a load task panicked");
        all.runs.extend(mine.runs);
        all.replays.extend(mine.replays);
        all.abandoned.extend(mine.abandoned);
    }
    all
}

/// One outbox row, as the checks need it.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub event_id: String,
    pub kind: String,
    pub parent_id: String,
    pub status: String,
    pub lease_holder: Option<String>,
    pub payload: String,
}

/// Every outbox row of the store at `pool`.
pub async fn events(pool: &sqlx::AnyPool) -> Vec<EventRow> {
    use herald::store::row::{opt_text, text};
    sqlx::query(
        "SELECT event_id, kind, parent_id, status, lease_holder, payload FROM outbox_events",
    )
    .fetch_all(pool)
    .await
    .expect("read the outbox")
    .iter()
    .map(|r| EventRow {
        event_id: text(r, "event_id").unwrap(),
        kind: text(r, "kind").unwrap(),
        parent_id: text(r, "parent_id").unwrap(),
        status: text(r, "status").unwrap(),
        lease_holder: opt_text(r, "lease_holder").unwrap(),
        payload: text(r, "payload").unwrap(),
    })
    .collect()
}

/// Pairs of attempts of one event by different workers whose [started, finished]
/// intervals overlap: the event was held by two nodes at once.
pub async fn overlapping_attempts(pool: &sqlx::AnyPool) -> Vec<String> {
    use herald::store::row::text;
    sqlx::query(
        "SELECT a.event_id AS event_id, a.worker AS first, b.worker AS second \
         FROM outbox_attempts a JOIN outbox_attempts b \
           ON a.event_id = b.event_id AND a.attempt < b.attempt AND a.worker <> b.worker \
          AND b.started_at < a.finished_at AND a.started_at < b.finished_at",
    )
    .fetch_all(pool)
    .await
    .expect("read the attempt log")
    .iter()
    .map(|r| {
        format!(
            "{} by {} and {}",
            text(r, "event_id").unwrap(),
            text(r, "first").unwrap(),
            text(r, "second").unwrap()
        )
    })
    .collect()
}

/// How many attempts each worker logged.
pub async fn attempts_by_worker(pool: &sqlx::AnyPool) -> Vec<(String, i64)> {
    use herald::store::row::{int, text};
    sqlx::query("SELECT worker, COUNT(*) AS n FROM outbox_attempts GROUP BY worker")
        .fetch_all(pool)
        .await
        .expect("read the attempt log")
        .iter()
        .map(|r| (text(r, "worker").unwrap(), int(r, "n").unwrap()))
        .collect()
}

/// The Prometheus text of the node at `base`, or "" when it does not answer.
pub async fn metrics_of(base: &str) -> String {
    match reqwest::get(format!("{base}/metrics")).await {
        Ok(resp) => resp.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// `/readyz` of the node at `base`: its status code and body.
pub async fn readiness(base: &str) -> (u16, Value) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    match client.get(format!("{base}/readyz")).send().await {
        Ok(resp) => (
            resp.status().as_u16(),
            resp.json().await.unwrap_or(Value::Null),
        ),
        Err(_) => (0, Value::Null),
    }
}

/// The Status and version of every record targeted by these `field_update` replays.
pub async fn replay_targets(
    store: &herald::store::SqlStore,
    replays: &[EventRow],
) -> Vec<(String, Value, i64)> {
    let mut out = Vec::new();
    for event in replays {
        let payload: herald::approvals::model::ReplayPayload =
            serde_json::from_str(&event.payload).expect("replay payload");
        for instruction in payload.instructions {
            let id = instruction.target.record_id;
            let record = store
                .get_record(&id)
                .await
                .expect("read the target")
                .expect("the replay's target record exists");
            let status = record.fields.get("Status").cloned().unwrap_or(Value::Null);
            out.push((id, status, record.version));
        }
    }
    out
}

/// The row count of `sql` (a `SELECT COUNT(*) AS n …`).
pub async fn count(pool: &sqlx::AnyPool, sql: &str) -> i64 {
    sqlx::query(sql)
        .fetch_one(pool)
        .await
        .expect("count")
        .try_get::<i64, _>("n")
        .expect("a count")
}
