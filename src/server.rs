//! `herald serve`: one process hosting the console, the JSON API and housekeeping.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::serve::ListenerExt;
use leptos::prelude::LeptosOptions;
use tokio_util::sync::CancellationToken;
use vocab::Role;

use crate::auth::password::generate_password;
use crate::auth::session_store::DbSessionStore;
use crate::auth::throttle::LoginThrottle;
use crate::auth::token_cache::TokenCache;
use crate::config::Settings;
use crate::http::listener::{derived_max_connections, BoundedListener};
use crate::http::{self, AppState};
use crate::outbox::best_effort::BestEffortSender;
use crate::outbox::metrics::Metrics;
use crate::outbox::model::Source;
use crate::runtime::Runtime;
use crate::service::accounts::{AccountService, Actor};
use crate::service::approvals::ApprovalService;
use crate::service::deliveries::DeliveryService;
use crate::service::records::RecordService;
use crate::service::runs::RunService;
use crate::store::{SqlStore, StoreOptions};

/// Environment variable holding the first admin's password; generated when unset.
pub const ADMIN_PASSWORD_ENV: &str = "HERALD_ADMIN_PASSWORD";
pub const FIRST_ADMIN_NAME: &str = "admin";

pub async fn open_store(settings: &Settings) -> anyhow::Result<SqlStore> {
    let store = SqlStore::open(&StoreOptions {
        url: settings.database_url.clone(),
        max_connections: settings.database_max_connections,
    })
    .await?;
    Ok(store)
}

pub fn account_service(store: &SqlStore, settings: &Settings) -> AccountService {
    let store = Arc::new(store.clone());
    AccountService::new(
        store.clone(),
        store,
        LoginThrottle::new(
            settings.login_max_failures,
            Duration::from_secs(settings.login_window_secs),
            Duration::from_millis(settings.login_slowdown_ms),
        )
        .with_address_limit(settings.login_address_max_failures),
        TokenCache::new(Duration::from_millis(settings.api_token_cache_ms)),
    )
}

pub async fn serve(settings: Settings) -> anyhow::Result<()> {
    // First: a stop asked for while starting up is a drain.
    let shutdown = shutdown_signal();
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let first_admin_password = std::env::var(ADMIN_PASSWORD_ENV).ok();
    run(listener, settings, first_admin_password, shutdown).await
}

/// Serves on `listener` until `shutdown` resolves, then stops claiming work, drains
/// what was accepted (up to the drain deadline) and returns. On an empty store the
/// first admin gets `first_admin_password` (`HERALD_ADMIN_PASSWORD` for `serve`),
/// or a generated one printed once.
pub async fn run(
    listener: tokio::net::TcpListener,
    settings: Settings,
    first_admin_password: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let store = open_store(&settings).await?;
    let accounts = account_service(&store, &settings);
    ensure_first_admin(&accounts, first_admin_password).await?;

    let leptos = LeptosOptions::builder()
        .output_name("herald")
        .site_root(settings.site_root.to_string_lossy().to_string())
        .site_pkg_dir("pkg")
        .site_addr(settings.listen)
        .build();
    if !settings.site_root.join("pkg").join("herald.js").exists() {
        tracing::warn!(
            site_root = %settings.site_root.display(),
            "the console bundle is missing; pages render but will not hydrate (run .ci/build-site)"
        );
    }

    crate::config_check::log_config_notices(&settings);

    let metrics = Arc::new(Metrics::new());
    let stop = CancellationToken::new();
    let planner = Arc::new(crate::runtime::jobs_planner(&settings));
    let runtime =
        Runtime::start(&settings, &store, &planner, metrics.clone(), stop.clone()).await?;

    let jobs = runtime.source(Source::Jobs);
    let approvals_source = runtime.source(Source::Approvals);
    let deliveries = DeliveryService::new(
        jobs.outbox.store().clone(),
        Arc::new(store.clone()),
        jobs.registry.clone(),
        settings.max_attempts,
    );
    // With the approvals database apart, the console and the admin API read and
    // act on both stores.
    let mut deliveries = if settings.approvals_apart() {
        deliveries.with_separate_source(
            approvals_source.outbox.store().clone(),
            Arc::new(approvals_source.store.clone()),
            approvals_source.registry.clone(),
        )
    } else {
        deliveries.with_source(
            approvals_source.outbox.store().clone(),
            approvals_source.registry.clone(),
        )
    };
    if !store.has_durable_outbox() {
        tracing::warn!("memory:// keeps runs only while this process runs, and no outbox: notifications are sent once, best effort, and not recorded");
        deliveries = deliveries.without_durable_outbox();
    }
    // Without a durable outbox, approval steps that owe prompts, alerts or
    // field-update replays fail closed (see `ApprovalService::commit`).
    let approvals = ApprovalService::new(
        approvals_source.store.clone(),
        approvals_source
            .store
            .has_durable_outbox()
            .then(|| approvals_source.outbox.clone()),
        runtime.approval_planner.clone(),
    );
    let mut runs = RunService::new(
        Arc::new(store.clone()),
        jobs.outbox.clone(),
        planner,
        deliveries.clone(),
        settings.max_result_bytes,
    )
    .with_run_approvals(Arc::new(approvals_source.store.clone()))
    .with_idempotency_keys(Arc::new(store.clone()));
    if !store.has_durable_outbox() {
        runs = runs.with_best_effort(BestEffortSender::new(jobs.registry.clone()));
    }
    approvals
        .load_configured(&settings.approval_definitions)
        .await
        .map_err(|e| anyhow::anyhow!("approval_definitions: {e}"))?;
    let mut destinations = crate::service::destinations::DestinationService::for_store(&store);
    if settings.approvals_apart() {
        destinations = destinations.with_store(&approvals_source.store);
    }
    let state = AppState {
        leptos,
        runs,
        deliveries,
        destinations,
        records: RecordService::new(approvals_source.store.clone())
            .with_idempotency_keys(Arc::new(approvals_source.store.clone())),
        approvals: approvals.clone(),
        accounts,
        store: store.clone(),
        metrics: metrics.clone(),
        settings: Arc::new(settings.clone()),
        store_health: runtime.health.clone(),
        live_streams: Arc::new(tokio::sync::Semaphore::new(
            settings
                .live_max_streams
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        )),
        admission: http::Admission::new(
            settings.api_max_requests_in_flight,
            metrics.api_admission(settings.api_max_requests_in_flight),
        ),
        stopping: stop.clone(),
    };
    let sessions = DbSessionStore::new(Arc::new(store.clone()));
    spawn_session_cleanup(sessions.clone(), stop.clone());
    let app = http::router(state, sessions);

    let addr = listener.local_addr()?;
    tracing::info!(%addr, engine = store.engine().name(), "Herald is serving");
    println!("Herald console: http://{addr}/overview");

    let stop_on_signal = stop.clone();
    let max_connections = max_client_connections(&settings);
    let mut listener = BoundedListener::new(
        listener,
        max_connections,
        metrics.http_connections(max_connections),
    );
    if settings.http_idle_timeout_secs > 0 {
        listener = listener.closing_idle_after(
            Duration::from_secs(settings.http_idle_timeout_secs),
            metrics.http_connections_closed_idle(),
        );
    }
    // Pages are streamed in several writes: without TCP_NODELAY, Nagle's algorithm
    // and the client's delayed ACK hold the last part back ~40 ms.
    let listener = listener.tap_io(|tcp| {
        if let Err(err) = tcp.get_ref().set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        shutdown.await;
        // Stop claiming at once; HTTP requests in flight still finish.
        stop_on_signal.cancel();
    })
    .await?;
    stop.cancel();
    runtime.drain().await;
    store.close().await;
    tracing::info!("Herald stopped");
    Ok(())
}

/// `http_max_connections`, or what the open-file limit (raised first to its
/// hard limit) leaves once every other need is counted: the deliveries' sockets
/// and the database connections of both stores.
fn max_client_connections(settings: &Settings) -> usize {
    let open_file_limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(err) => {
            tracing::warn!(error = %err, "cannot raise the open-file limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1_024, |(soft, _)| soft)
        }
    };
    // Per store: its workers' sockets, its pool and SQLite's read pool beside it.
    let per_store =
        settings.worker_concurrency as u64 + settings.database_max_connections as u64 + 8;
    let derived = derived_max_connections(open_file_limit, 2 * per_store);
    let max = match settings.http_max_connections {
        0 => derived,
        set => {
            if set > derived {
                tracing::warn!(
                    open_file_limit,
                    http_max_connections = set,
                    leaves_room_for = derived,
                    "http_max_connections leaves the store and the deliveries fewer file descriptors than they may need"
                );
            }
            set
        }
    };
    tracing::info!(
        open_file_limit,
        max_connections = max,
        "client connections held open at once (http_max_connections)"
    );
    max
}

/// On first start (no users), creates `admin` with `password` (from
/// `HERALD_ADMIN_PASSWORD`), or a generated one printed once.
async fn ensure_first_admin(
    accounts: &AccountService,
    password: Option<String>,
) -> anyhow::Result<()> {
    if accounts.user_count().await? > 0 {
        return Ok(());
    }
    let (password, generated) = match password {
        Some(password) if !password.is_empty() => (password, false),
        _ => (generate_password(), true),
    };
    match accounts
        .add_user(Actor::Local, FIRST_ADMIN_NAME, Some(&password), Role::Admin)
        .await
    {
        Ok(_) => {}
        // Several nodes started together on an empty store: another one won.
        Err(crate::service::ServiceError::Conflict(_)) => {
            tracing::info!("another node created the first admin user");
            return Ok(());
        }
        Err(err) => {
            return Err(anyhow::Error::new(err).context(format!(
                "cannot create the first admin user (check {ADMIN_PASSWORD_ENV})"
            )))
        }
    }
    if generated {
        println!(
            "Created the first admin user.\n  username: {FIRST_ADMIN_NAME}\n  password: {password}\nThis password is shown only once."
        );
    } else {
        println!("Created the first admin user {FIRST_ADMIN_NAME:?} with the password from {ADMIN_PASSWORD_ENV}.");
    }
    Ok(())
}

fn spawn_session_cleanup(sessions: DbSessionStore, stop: CancellationToken) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(600));
        loop {
            tokio::select! {
                _ = tick.tick() => {},
                _ = stop.cancelled() => return,
            }
            if let Err(err) = sessions.delete_expired().await {
                tracing::warn!(error = %err, "expired session cleanup failed");
            }
        }
    });
}

/// Resolves on SIGTERM or Ctrl-C, listening from the moment it is called rather
/// than from its first poll: `run` polls it only once it serves HTTP, after the
/// workers have started, and a SIGTERM in between would otherwise kill the process
/// (the signal's default) instead of draining it.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let (mut terminate, mut interrupt) = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::terminate()).ok(),
            signal(SignalKind::interrupt()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = next_of(&mut terminate) => {},
                _ = next_of(&mut interrupt) => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown requested");
    }
}

/// The next delivery of `signal`; never, if it could not be listened for.
#[cfg(unix)]
async fn next_of(signal: &mut Option<tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}
