//! The outbox machinery of one `herald serve` process, built from the configured
//! sources: per store, one availability view, one breaker view with its sync loop,
//! one maintenance loop and (on PostgreSQL) a LISTEN/NOTIFY wake-up so events
//! committed by other nodes do not wait a poll interval; per source, an outbox for
//! its producers and its worker pools. A store without a durable outbox
//! (`memory://`) gets none of the loops: its sources' gauges are declared and stay
//! at "unavailable", and its events are sent best effort (see
//! [`crate::outbox::best_effort`]).
//!
//! Adding a source means adding a [`SourceSpec`] in [`Runtime::start`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vocab::run_approvals;

use crate::approvals::planner::ApprovalPlanner;
use crate::approvals::registry::registries as approval_registries;
use crate::approvals::run_requests::RunApprovalOpener;
use crate::channels::chat::ChatHandler;
use crate::channels::email::EmailHandler;
use crate::channels::guard::DestinationGuard;
use crate::channels::webhook::{delivery_client, WebhookHandler};
use crate::config::Settings;
use crate::jobs::continuations::RunContinuer;
use crate::jobs::{JobsPlan, JobsPlanner};
use crate::outbox::availability::StoreHealth;
use crate::outbox::destinations::{DestinationHealth, HealthConfig};
use crate::outbox::hand_off::HandOff;
use crate::outbox::handler::Registry;
use crate::outbox::maintenance::Maintenance;
use crate::outbox::metrics::Metrics;
use crate::outbox::model::Source;
use crate::outbox::policy::RetryPolicy;
use crate::outbox::retention::Retention;
use crate::outbox::rollup::RollupPasses;
use crate::outbox::worker::{DrainReport, Worker, WorkerConfig};
use crate::outbox::Outbox;
use crate::routes::{DeliveryHandler, Routes};
use crate::store::{Engine, GroupCommitter, GroupLimits, SqlStore, StoreOptions};

/// One source as the rest of the process sees it.
#[derive(Clone)]
pub struct SourceRuntime {
    pub source: Source,
    /// The store the source's state and events live in.
    pub store: SqlStore,
    /// The source's outbox, for its producers.
    pub outbox: Outbox,
    /// Every kind of the source with its handler and policy (retries, best effort).
    pub registry: Arc<Registry>,
}

pub struct Runtime {
    /// The configured sources, jobs first.
    pub sources: Vec<SourceRuntime>,
    pub approval_planner: Arc<ApprovalPlanner>,
    /// Each durable store's availability as its workers see it (for `/readyz`).
    pub health: Vec<Arc<StoreHealth>>,
    workers: Vec<JoinHandle<DrainReport>>,
    background: Vec<JoinHandle<()>>,
    /// Stores this runtime opened (closed after the drain).
    opened_stores: Vec<SqlStore>,
}

/// What a source brings: its store, its kinds, and the worker pools that run them.
struct SourceSpec {
    source: Source,
    /// The store's URL: sources with one URL share one store.
    url: String,
    store: SqlStore,
    /// Its producers' outbox (its commits grouped where the source and engine allow).
    outbox: Outbox,
    /// Every kind of the source.
    registry: Arc<Registry>,
    pools: Vec<Pool>,
}

/// One worker pool of a source: some of its kinds, under one worker setting.
struct Pool {
    registry: Arc<Registry>,
    config: WorkerConfig,
    /// Woken by commits (its source's and other nodes'), or polling only.
    wakes_on_commit: bool,
    /// Held to per-destination caps and breakers.
    capped: bool,
}

/// A source's outbox over `store`, its commits grouped where `group_commit` and
/// the engine allow.
fn source_outbox(store: &SqlStore, group_commit: bool) -> Outbox {
    let outbox = Outbox::new(Arc::new(store.clone()), Arc::new(Notify::new()));
    if group_commit && store.engine().groups_commits() {
        return outbox
            .with_group_commit(GroupCommitter::start(store.clone(), GroupLimits::default()));
    }
    outbox
}

/// The jobs source's planner (routes, callback signing, dead-letter route).
pub fn jobs_planner(settings: &Settings) -> JobsPlanner {
    JobsPlanner::new(
        Arc::new(Routes::new(&settings.routes)),
        JobsPlan {
            callback_secret_ref: Some(settings.callback_secret_ref.clone())
                .filter(|s| !s.is_empty()),
            dead_letter_route: Some(settings.dead_letter_route.clone()).filter(|s| !s.is_empty()),
            max_attempts: settings.max_attempts,
            callback_ordered_by: settings.callback_ordered_by.ordered_by(),
        },
    )
}

pub fn retry_policy(settings: &Settings) -> RetryPolicy {
    RetryPolicy {
        max_attempts: settings.max_attempts,
        initial_backoff: Duration::from_millis(settings.initial_backoff_ms),
        max_backoff: Duration::from_millis(settings.max_backoff_ms),
        jitter: settings.backoff_jitter,
        lease: Duration::from_secs(settings.lease_secs),
    }
}

/// The retry policy of the field-update replay (`replay_*` settings).
pub fn replay_policy(settings: &Settings) -> RetryPolicy {
    RetryPolicy {
        max_attempts: settings.replay_max_attempts,
        initial_backoff: Duration::from_millis(settings.replay_initial_backoff_ms),
        max_backoff: Duration::from_millis(settings.replay_max_backoff_ms),
        jitter: settings.backoff_jitter,
        lease: Duration::from_secs(settings.replay_lease_secs),
    }
}

/// The route delivery every source sends over, and the callbacks' webhook sender:
/// one HTTP client (one connection pool) and one destination guard for all.
pub fn delivery_handler(
    settings: &Settings,
) -> anyhow::Result<(Arc<DeliveryHandler>, WebhookHandler)> {
    let guard = DestinationGuard::new(
        DestinationGuard::parse_allowlist(&settings.destination_allowlist)
            .map_err(|e| anyhow::anyhow!("destination_allowlist: {e}"))?,
    );
    let client = delivery_client(Duration::from_millis(settings.http_timeout_ms), &guard)?;
    let deliveries = Arc::new(DeliveryHandler {
        webhook: WebhookHandler::new(client.clone(), guard.clone()),
        chat: ChatHandler::new(client.clone(), guard.clone(), settings.chat_max_chars),
        email: EmailHandler::new(
            guard.clone(),
            Duration::from_millis(settings.http_timeout_ms),
        ),
    });
    Ok((deliveries, WebhookHandler::new(client, guard)))
}

/// Per-destination caps and breakers: configured routes by their origin.
pub fn health_config(settings: &Settings) -> HealthConfig {
    let mut routes = HashMap::new();
    for route in &settings.routes {
        if let Some(origin) = crate::routes::origin(&route.url) {
            let cap = route
                .max_in_flight
                .unwrap_or(settings.destination_max_in_flight);
            // Routes sharing an origin share its tightest cap (first name labels it).
            routes
                .entry(origin)
                .and_modify(|(_, c): &mut (String, usize)| *c = (*c).min(cap))
                .or_insert((route.name.clone(), cap));
        }
    }
    HealthConfig {
        failures: settings.breaker_failures,
        open: Duration::from_millis(settings.breaker_open_ms),
        // Its own cap, not the retries' (`max_backoff_ms`): a short retry backoff
        // must not stop the probe wait from doubling.
        max_open: Duration::from_millis(settings.breaker_max_open_ms.max(settings.breaker_open_ms)),
        default_max_in_flight: settings.destination_max_in_flight,
        routes,
        stale_probe: Duration::from_secs(settings.lease_secs)
            + Duration::from_millis(settings.http_timeout_ms),
    }
}

/// A worker's settings for the outbox kinds that follow the general `worker_*` ones.
fn worker_config(settings: &Settings) -> WorkerConfig {
    WorkerConfig {
        batch_size: settings.worker_batch_size,
        concurrency: settings.worker_concurrency,
        poll_interval: Duration::from_millis(settings.worker_poll_interval_ms),
        drain_deadline: Duration::from_secs(settings.drain_deadline_secs),
        ..WorkerConfig::default()
    }
}

/// The replay worker polls on its own interval and batch (seed 000's worker config).
fn replay_worker_config(settings: &Settings) -> WorkerConfig {
    WorkerConfig {
        batch_size: settings.replay_batch_size,
        concurrency: (settings.replay_batch_size as usize).min(settings.worker_concurrency),
        poll_interval: Duration::from_millis(settings.replay_poll_interval_ms),
        drain_deadline: Duration::from_secs(settings.drain_deadline_secs),
        ..WorkerConfig::default()
    }
}

/// What one store serves: its sources, their wake-ups and registries.
struct StoreGroup {
    store: SqlStore,
    url: String,
    sources: Vec<&'static str>,
    wakes: Vec<Arc<Notify>>,
    registries: Vec<Arc<Registry>>,
}

/// A store's shared views: its availability and its breakers.
struct StoreLoops {
    group: StoreGroup,
    health: Arc<StoreHealth>,
    destinations: Arc<DestinationHealth>,
}

impl Runtime {
    pub async fn start(
        settings: &Settings,
        jobs_store: &SqlStore,
        planner: &Arc<JobsPlanner>,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> anyhow::Result<Runtime> {
        let (deliveries, callbacks) = delivery_handler(settings)?;
        let policy = retry_policy(settings);
        let replay = replay_policy(settings);
        let mut opened_stores = Vec::new();
        let approvals_store = if settings.approvals_apart() {
            let store = SqlStore::open(&StoreOptions {
                url: settings.approvals_url().to_string(),
                max_connections: settings.database_max_connections,
            })
            .await?;
            opened_stores.push(store.clone());
            store
        } else {
            jobs_store.clone()
        };

        // One route book for every source: the jobs planner's.
        let approval_planner = Arc::new(ApprovalPlanner::new(
            planner.routes().clone(),
            &policy,
            &replay,
        ));
        // The outboxes first: each source's handlers of a run approval's hops
        // write through the other source's outbox (DESIGN §9).
        let jobs_outbox = source_outbox(jobs_store, true);
        let approvals_outbox = source_outbox(&approvals_store, false);

        let mut jobs = crate::jobs::registry(planner, &policy, deliveries.clone(), callbacks);
        jobs.register(
            run_approvals::APPROVAL_REQUEST,
            Source::Jobs,
            policy.clone(),
            Arc::new(RunApprovalOpener::new(
                Arc::new(approvals_store.clone()),
                approvals_outbox.clone(),
                approval_planner.clone(),
            )),
        );
        let jobs = Arc::new(jobs);
        let mut approvals = approval_registries(&policy, &replay, &approvals_store, &deliveries);
        let continuer = Arc::new(RunContinuer::new(
            Arc::new(jobs_store.clone()),
            jobs_outbox.clone(),
            planner.clone(),
        ));
        for registry in [&mut approvals.notices, &mut approvals.all] {
            registry.register(
                run_approvals::RUN_CONTINUATION,
                Source::Approvals,
                policy.clone(),
                continuer.clone(),
            );
        }
        let specs = vec![
            SourceSpec {
                source: Source::Jobs,
                url: settings.database_url.clone(),
                store: jobs_store.clone(),
                outbox: jobs_outbox,
                registry: jobs.clone(),
                pools: vec![Pool {
                    registry: jobs,
                    config: worker_config(settings),
                    wakes_on_commit: true,
                    capped: true,
                }],
            },
            SourceSpec {
                source: Source::Approvals,
                url: settings.approvals_url().to_string(),
                store: approvals_store,
                outbox: approvals_outbox,
                registry: Arc::new(approvals.all),
                pools: vec![
                    Pool {
                        registry: Arc::new(approvals.notices),
                        config: worker_config(settings),
                        wakes_on_commit: true,
                        capped: true,
                    },
                    Pool {
                        registry: Arc::new(approvals.replays),
                        config: replay_worker_config(settings),
                        wakes_on_commit: false,
                        capped: false,
                    },
                ],
            },
        ];
        let mut runtime = Runtime {
            sources: Vec::new(),
            approval_planner,
            health: Vec::new(),
            workers: Vec::new(),
            background: Vec::new(),
            opened_stores,
        };

        // Sources that share a store share its health, breakers and maintenance.
        let mut shared: Vec<StoreGroup> = Vec::new();
        for spec in &specs {
            match shared.iter_mut().find(|g| g.url == spec.url) {
                Some(group) => {
                    group.sources.push(spec.source.as_str());
                    group.registries.push(spec.registry.clone());
                }
                None => shared.push(StoreGroup {
                    store: spec.store.clone(),
                    url: spec.url.clone(),
                    sources: vec![spec.source.as_str()],
                    wakes: Vec::new(),
                    registries: vec![spec.registry.clone()],
                }),
            }
        }
        let mut groups: Vec<StoreLoops> = shared
            .into_iter()
            .map(|group| StoreLoops {
                health: StoreHealth::new(metrics.clone(), group.sources.clone()),
                destinations: Arc::new(DestinationHealth::new(
                    health_config(settings),
                    Arc::new(group.store.clone()),
                    metrics.clone(),
                )),
                group,
            })
            .collect();

        for spec in specs {
            let loops = groups
                .iter_mut()
                .find(|l| l.group.url == spec.url)
                .expect("every source has its store's group");
            let outbox = spec.outbox;
            let wake = outbox.wake_handle();
            for kind in spec.registry.kinds() {
                metrics.declare(spec.source.as_str(), &kind);
            }
            metrics.set_durable(spec.source.as_str(), spec.store.has_durable_outbox());
            if spec.store.has_durable_outbox() {
                for pool in spec.pools {
                    // Events this pool can send at once skip their claim
                    // (`outbox::hand_off`); a pool only polled is not there
                    // to take them.
                    let hand_off = (settings.lease_at_insert && pool.wakes_on_commit).then(|| {
                        let hand_off = HandOff::new(
                            pool.config.holder.clone(),
                            pool.registry.clone(),
                            pool.config.concurrency,
                            pool.capped.then(|| loops.destinations.clone()),
                            metrics.clone(),
                        );
                        outbox.add_hand_off(hand_off.clone());
                        hand_off
                    });
                    let mut worker = Worker::new(
                        outbox.store().clone(),
                        pool.registry,
                        metrics.clone(),
                        pool.config,
                        if pool.wakes_on_commit {
                            wake.clone()
                        } else {
                            Arc::new(Notify::new())
                        },
                    )
                    .with_health(loops.health.clone());
                    if pool.capped {
                        worker = worker.with_destinations(loops.destinations.clone());
                    }
                    if let Some(hand_off) = hand_off {
                        worker = worker.with_hand_off(hand_off);
                    }
                    runtime.workers.push(tokio::spawn(worker.run(stop.clone())));
                }
            }
            loops.group.wakes.push(wake);
            runtime.sources.push(SourceRuntime {
                source: spec.source,
                store: spec.store,
                outbox,
                registry: spec.registry,
            });
        }

        let sync_every = Duration::from_millis(settings.maintenance_interval_ms.min(1_000));
        let interval = Duration::from_millis(settings.maintenance_interval_ms);
        let retention = settings.retention.policy()?;
        // This node in the retention lease (one node at a time runs a pass).
        let node = format!("node-{}", uuid::Uuid::new_v4().simple());
        for StoreLoops {
            group,
            health,
            destinations,
        } in groups
        {
            if !group.store.has_durable_outbox() {
                continue;
            }
            runtime.health.push(health.clone());
            // One breaker view per store: its breakers table is what every node shares.
            runtime.background.push(tokio::spawn(destinations.run_sync(
                sync_every,
                health.clone(),
                stop.clone(),
            )));
            let dead_letter = group
                .registries
                .iter()
                .find_map(|r| r.dead_letter_notifier().cloned());
            if !retention.targets().is_empty() {
                let passes = Retention {
                    store: Arc::new(group.store.clone()),
                    policy: retention.clone(),
                    metrics: metrics.clone(),
                    store_name: group.sources.join("+"),
                    holder: node.clone(),
                };
                runtime
                    .background
                    .push(tokio::spawn(passes.run(stop.clone())));
            }
            let maintenance = Maintenance {
                store: Arc::new(group.store.clone()),
                metrics: metrics.clone(),
                sources: group.sources,
                interval,
                dead_letter,
                registries: group.registries,
                passes: Default::default(),
                health,
                rollups: Some(RollupPasses::new(
                    Arc::new(group.store.clone()),
                    node.clone(),
                    Duration::from_millis(settings.rollup_interval_ms),
                )),
            };
            runtime
                .background
                .push(tokio::spawn(maintenance.run(stop.clone())));
            if group.store.engine() == Engine::Postgres {
                runtime.background.push(tokio::spawn(listen_for_commits(
                    group.url,
                    group.wakes,
                    stop.clone(),
                )));
            }
        }
        Ok(runtime)
    }

    /// One configured source (every source is configured).
    pub fn source(&self, source: Source) -> &SourceRuntime {
        self.sources
            .iter()
            .find(|s| s.source == source)
            .expect("the runtime starts every source")
    }

    /// Waits for the workers to drain (the stop token must be cancelled first).
    pub async fn drain(self) {
        for worker in self.workers {
            match worker.await {
                Ok(report) if report.drained => tracing::info!("outbox workers drained"),
                Ok(_) => tracing::warn!("outbox workers stopped before draining"),
                Err(err) => tracing::error!(error = %err, "an outbox worker crashed"),
            }
        }
        for task in self.background {
            let _ = task.await;
        }
        for store in self.opened_stores {
            store.close().await;
        }
    }
}

/// Wakes local workers when any node commits events (the PostgreSQL NOTIFY that
/// `outbox::peer_notice` sends after commits).
async fn listen_for_commits(url: String, wakes: Vec<Arc<Notify>>, stop: CancellationToken) {
    loop {
        let listened = async {
            let mut listener = sqlx::postgres::PgListener::connect(&url).await?;
            listener.listen("herald_outbox").await?;
            loop {
                listener.recv().await?;
                for wake in &wakes {
                    wake.notify_one();
                }
            }
            #[allow(unreachable_code)]
            Ok::<(), sqlx::Error>(())
        };
        tokio::select! {
            result = listened => {
                if let Err(err) = result {
                    tracing::warn!(error = %err, "outbox LISTEN connection lost; polling until it is back");
                }
            }
            _ = stop.cancelled() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {},
            _ = stop.cancelled() => return,
        }
    }
}
