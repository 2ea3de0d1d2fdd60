//! The outbox machinery of one `herald serve` process: a worker pool per store with
//! handlers, a maintenance loop per store, and (on PostgreSQL) a LISTEN/NOTIFY
//! wake-up so events committed by other nodes do not wait a poll interval. A store
//! without a durable outbox (`memory://`) gets none of these: its sources' gauges
//! are declared and stay at "unavailable", and its events are sent best effort
//! (see [`crate::best_effort`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::approvals::model::kinds as approval_kinds;
use crate::approvals::planner::ApprovalPlanner;
use crate::approvals::prompts::PromptHandler;
use crate::approvals::replay::ReplayHandler;
use crate::channels::chat::ChatHandler;
use crate::channels::email::EmailHandler;
use crate::channels::guard::DestinationGuard;
use crate::channels::webhook::{delivery_client, WebhookHandler};
use crate::config::Settings;
use crate::notifications::{kinds, DeliveryHandler, NotificationPlanner};
use crate::outbox::availability::StoreHealth;
use crate::outbox::destinations::{origin_of_url, DestinationHealth, HealthConfig};
use crate::outbox::handler::Registry;
use crate::outbox::maintenance::Maintenance;
use crate::outbox::metrics::Metrics;
use crate::outbox::model::Source;
use crate::outbox::policy::RetryPolicy;
use crate::outbox::worker::{DrainReport, Worker, WorkerConfig};
use crate::outbox::Outbox;
use crate::store::{Engine, GroupCommitter, GroupLimits, SqlStore, StoreOptions};

pub struct Runtime {
    /// The jobs store's outbox, for producers.
    pub jobs: Outbox,
    /// The jobs source's handlers and their policies.
    pub jobs_registry: Arc<Registry>,
    /// The approvals store (the jobs store unless `approvals_database_url` is set).
    pub approvals_store: SqlStore,
    /// The approvals store's outbox, for the approvals source's producers.
    pub approvals: Outbox,
    /// Every approvals kind's handler and policy (prompts, alerts, replay).
    pub approvals_registry: Arc<Registry>,
    pub approval_planner: Arc<ApprovalPlanner>,
    /// Each durable store's availability as its workers see it (for `/readyz`).
    pub health: Vec<Arc<StoreHealth>>,
    workers: Vec<JoinHandle<DrainReport>>,
    background: Vec<JoinHandle<()>>,
    extra_stores: Vec<SqlStore>,
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

/// The retry policy of recall field-update replay (`replay_*` settings).
pub fn replay_policy(settings: &Settings) -> RetryPolicy {
    RetryPolicy {
        max_attempts: settings.replay_max_attempts,
        initial_backoff: Duration::from_millis(settings.replay_initial_backoff_ms),
        max_backoff: Duration::from_millis(settings.replay_max_backoff_ms),
        jitter: settings.backoff_jitter,
        lease: Duration::from_secs(settings.replay_lease_secs),
    }
}

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

/// The approvals source's handlers: prompts and alerts on one worker, the recall
/// replay on its own (its poll interval and batch are its own settings); and all
/// three together, for retries and maintenance.
fn approvals_registries(
    settings: &Settings,
    store: &SqlStore,
    deliveries: &Arc<DeliveryHandler>,
) -> (Registry, Registry, Registry) {
    let policy = retry_policy(settings);
    let prompts = Arc::new(PromptHandler {
        store: store.clone(),
        delivery: deliveries.clone(),
    });
    let replayer = Arc::new(ReplayHandler::new(store.clone()));
    let add_notices = |registry: &mut Registry| {
        registry
            .register(
                approval_kinds::APPROVAL_PROMPT,
                Source::Approvals,
                policy.clone(),
                prompts.clone(),
            )
            .register(
                approval_kinds::ALERT,
                Source::Approvals,
                policy.clone(),
                deliveries.clone(),
            );
    };
    let add_replay = |registry: &mut Registry| {
        registry.register(
            approval_kinds::FIELD_UPDATE,
            Source::Approvals,
            replay_policy(settings),
            replayer.clone(),
        );
    };
    let (mut notices, mut replays, mut all) = (Registry::new(), Registry::new(), Registry::new());
    add_notices(&mut notices);
    add_replay(&mut replays);
    add_notices(&mut all);
    add_replay(&mut all);
    (notices, replays, all)
}

/// The handlers of the jobs source: callbacks, route deliveries, dead-letter notices.
fn jobs_registry(
    settings: &Settings,
    planner: &Arc<NotificationPlanner>,
    deliveries: Arc<DeliveryHandler>,
    webhook: WebhookHandler,
) -> Registry {
    let policy = retry_policy(settings);
    let mut registry = Registry::new();
    registry
        .register(
            kinds::CALLBACK,
            Source::Jobs,
            policy.clone(),
            Arc::new(webhook),
        )
        .register(
            kinds::DELIVERY,
            Source::Jobs,
            policy.clone(),
            deliveries.clone(),
        )
        .register(kinds::DEAD_LETTER, Source::Jobs, policy, deliveries);
    if let Some(notifier) = planner.dead_letter_notifier() {
        registry.set_dead_letter_notifier(notifier);
    }
    registry
}

/// Per-destination caps and breakers: configured routes by their origin.
pub fn health_config(settings: &Settings) -> HealthConfig {
    let mut routes = HashMap::new();
    for route in &settings.routes {
        if let Some(origin) = origin_of_url(&route.url) {
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
        max_open: Duration::from_millis(settings.max_backoff_ms.max(settings.breaker_open_ms)),
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

impl Runtime {
    pub async fn start(
        settings: &Settings,
        jobs_store: &SqlStore,
        planner: &Arc<NotificationPlanner>,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> anyhow::Result<Runtime> {
        let wake = Arc::new(Notify::new());
        let mut jobs = Outbox::new(Arc::new(jobs_store.clone()), wake.clone());
        if jobs_store.engine().groups_commits() {
            jobs = jobs.with_group_commit(GroupCommitter::start(
                jobs_store.clone(),
                GroupLimits::default(),
            ));
        }
        // One HTTP client (one connection pool) and one destination guard for every
        // source's handlers.
        let (deliveries, webhook) = delivery_handler(settings)?;
        let registry = Arc::new(jobs_registry(
            settings,
            planner,
            deliveries.clone(),
            webhook,
        ));
        let separate_approvals = settings.approvals_url() != settings.database_url;
        let approvals_store = if separate_approvals {
            SqlStore::open(&StoreOptions {
                url: settings.approvals_url().to_string(),
                max_connections: settings.database_max_connections,
            })
            .await?
        } else {
            jobs_store.clone()
        };
        let approvals_wake = Arc::new(Notify::new());
        let approvals = Outbox::new(Arc::new(approvals_store.clone()), approvals_wake.clone());
        let (notices, replays, all) = approvals_registries(settings, &approvals_store, &deliveries);
        let approvals_registry = Arc::new(all);
        for (reg, source) in [
            (&*registry, Source::Jobs),
            (&*approvals_registry, Source::Approvals),
        ] {
            for kind in reg.kinds() {
                metrics.declare(source.as_str(), &kind);
            }
        }
        let approval_planner = Arc::new(ApprovalPlanner::new(
            planner.clone(),
            &retry_policy(settings),
            &replay_policy(settings),
        ));
        let mut runtime = Runtime {
            jobs: jobs.clone(),
            jobs_registry: registry.clone(),
            approvals_store: approvals_store.clone(),
            approvals: approvals.clone(),
            approvals_registry,
            approval_planner,
            health: Vec::new(),
            workers: Vec::new(),
            background: Vec::new(),
            extra_stores: Vec::new(),
        };

        let jobs_durable = jobs_store.has_durable_outbox();
        let approvals_durable = approvals_store.has_durable_outbox();
        // One health per store, shared by its workers and its maintenance.
        let jobs_sources = if separate_approvals {
            vec![Source::Jobs.as_str()]
        } else {
            vec![Source::Jobs.as_str(), Source::Approvals.as_str()]
        };
        let jobs_health = StoreHealth::new(metrics.clone(), jobs_sources.clone());
        let approvals_health = if separate_approvals {
            StoreHealth::new(metrics.clone(), vec![Source::Approvals.as_str()])
        } else {
            jobs_health.clone()
        };
        if jobs_durable {
            runtime.health.push(jobs_health.clone());
        }
        if separate_approvals && approvals_durable {
            runtime.health.push(approvals_health.clone());
        }
        // One health view per store: its breakers table is what every node shares.
        let destinations_of = |store: &SqlStore| {
            Arc::new(DestinationHealth::new(
                health_config(settings),
                Arc::new(store.clone()),
                metrics.clone(),
            ))
        };
        let jobs_destinations = destinations_of(jobs_store);
        let approvals_destinations = if separate_approvals {
            destinations_of(&approvals_store)
        } else {
            jobs_destinations.clone()
        };
        let sync_every = Duration::from_millis(settings.maintenance_interval_ms.min(1_000));
        if jobs_durable {
            runtime
                .background
                .push(tokio::spawn(jobs_destinations.clone().run_sync(
                    sync_every,
                    jobs_health.clone(),
                    stop.clone(),
                )));
        }
        if separate_approvals && approvals_durable {
            runtime
                .background
                .push(tokio::spawn(approvals_destinations.clone().run_sync(
                    sync_every,
                    approvals_health.clone(),
                    stop.clone(),
                )));
        }
        if jobs_durable {
            let worker = Worker::new(
                jobs.store().clone(),
                registry.clone(),
                metrics.clone(),
                worker_config(settings),
                wake.clone(),
            )
            .with_health(jobs_health.clone())
            .with_destinations(jobs_destinations);
            runtime.workers.push(tokio::spawn(worker.run(stop.clone())));
        }
        if approvals_durable {
            let notices = Worker::new(
                approvals.store().clone(),
                Arc::new(notices),
                metrics.clone(),
                worker_config(settings),
                approvals_wake.clone(),
            )
            .with_health(approvals_health.clone())
            .with_destinations(approvals_destinations);
            runtime
                .workers
                .push(tokio::spawn(notices.run(stop.clone())));
            // The replay worker polls on its own interval (seed 000's worker config).
            let replayer = Worker::new(
                approvals.store().clone(),
                Arc::new(replays),
                metrics.clone(),
                WorkerConfig {
                    batch_size: settings.replay_batch_size,
                    concurrency: (settings.replay_batch_size as usize)
                        .min(settings.worker_concurrency),
                    poll_interval: Duration::from_millis(settings.replay_poll_interval_ms),
                    drain_deadline: Duration::from_secs(settings.drain_deadline_secs),
                    ..WorkerConfig::default()
                },
                Arc::new(Notify::new()),
            )
            .with_health(approvals_health.clone());
            runtime
                .workers
                .push(tokio::spawn(replayer.run(stop.clone())));
        }
        let interval = Duration::from_millis(settings.maintenance_interval_ms);
        let dead_letter = registry.dead_letter_notifier().cloned();
        let approvals_registry = runtime.approvals_registry.clone();
        let jobs_registries = if separate_approvals {
            vec![registry.clone()]
        } else {
            vec![registry.clone(), approvals_registry.clone()]
        };
        if jobs_durable {
            runtime.spawn_maintenance(
                Maintenance {
                    store: Arc::new(jobs_store.clone()),
                    metrics: metrics.clone(),
                    sources: jobs_sources,
                    interval,
                    dead_letter,
                    registries: jobs_registries,
                    passes: Default::default(),
                    health: jobs_health,
                },
                &stop,
            );
        }
        if separate_approvals && approvals_durable {
            runtime.spawn_maintenance(
                Maintenance {
                    store: Arc::new(approvals_store.clone()),
                    metrics: metrics.clone(),
                    sources: vec![Source::Approvals.as_str()],
                    interval,
                    dead_letter: None,
                    registries: vec![approvals_registry],
                    passes: Default::default(),
                    health: approvals_health,
                },
                &stop,
            );
        }
        if separate_approvals {
            runtime.extra_stores.push(approvals_store.clone());
        }
        // Approval prompts and alerts wake on commits by other nodes too (the replay
        // worker polls on its own interval).
        let mut listeners: Vec<(String, Vec<Arc<Notify>>)> = Vec::new();
        if jobs_store.engine() == Engine::Postgres {
            listeners.push((settings.database_url.clone(), vec![wake]));
        }
        if approvals_store.engine() == Engine::Postgres {
            if separate_approvals {
                listeners.push((settings.approvals_url().to_string(), vec![approvals_wake]));
            } else if let Some((_, wakes)) = listeners.first_mut() {
                wakes.push(approvals_wake);
            }
        }
        for (url, wakes) in listeners {
            runtime
                .background
                .push(tokio::spawn(listen_for_commits(url, wakes, stop.clone())));
        }
        Ok(runtime)
    }

    fn spawn_maintenance(&mut self, maintenance: Maintenance, stop: &CancellationToken) {
        self.background
            .push(tokio::spawn(maintenance.run(stop.clone())));
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
        for store in self.extra_stores {
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
