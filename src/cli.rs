//! The `herald` command line.

use std::io::Read;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use vocab::Role;

use crate::auth::password::generate_password;
use crate::config::{LogFormat, Settings, SettingsArgs};
use crate::server;
use crate::service::accounts::Actor;
use crate::service::export::{EventRows, Export, ExportQuery};
use crate::store::ports::DeliveryReads;

#[derive(Parser, Debug)]
#[command(
    name = "herald",
    version,
    about = "Durable side-effect engine with an operator console"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve the console, the JSON API and the workers
    Serve {
        #[command(flatten)]
        settings: SettingsArgs,
    },
    /// Apply pending database migrations, then exit
    Migrate {
        #[command(flatten)]
        settings: SettingsArgs,
    },
    /// Manage console users
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Manage API tokens for scripts
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Copy a SQLite store to FILE while Herald serves, then check the copy
    Backup {
        /// Where the copy goes (never overwritten)
        #[arg(long, value_name = "FILE")]
        to: std::path::PathBuf,
        /// Which store: the jobs store, or the approvals database when it is apart
        #[arg(long, value_enum, default_value = "jobs")]
        store: BackedUpStore,
        #[command(flatten)]
        settings: SettingsArgs,
    },
    /// Check the files retention archived (retention.archive_dir)
    Archive {
        #[command(subcommand)]
        command: ArchiveCommand,
    },
    /// Read the outbox's events (every store)
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum EventsCommand {
    /// Write every matching event to standard output as NDJSON (or CSV with
    /// `--format csv`), newest first (to
    /// reconcile sent event ids with a receiver's records); a count goes to
    /// standard error
    Export {
        #[command(flatten)]
        query: ExportQuery,
        /// Include each event's frozen payload (business data: keep the output safe)
        #[arg(long)]
        with_payloads: bool,
        #[command(flatten)]
        settings: SettingsArgs,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum BackedUpStore {
    Jobs,
    Approvals,
}

#[derive(Subcommand, Debug)]
pub enum ArchiveCommand {
    /// Check that every archive file in DIR decompresses and holds whole rows of its table
    Verify {
        /// The archive folder
        dir: std::path::PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Add a user; prints a generated password unless --password-stdin is given
    Add {
        /// The sign-in name
        username: String,
        #[arg(long, value_enum)]
        role: CliRole,
        /// Read the password from standard input instead of generating one
        #[arg(long)]
        password_stdin: bool,
        #[command(flatten)]
        settings: SettingsArgs,
    },
}

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Create an API token; the secret is printed once
    Create {
        /// A name that says who or what uses the token
        #[arg(long)]
        name: String,
        #[arg(long, value_enum)]
        role: CliRole,
        #[command(flatten)]
        settings: SettingsArgs,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum CliRole {
    Reader,
    Operator,
    Admin,
}

impl From<CliRole> for Role {
    fn from(role: CliRole) -> Role {
        match role {
            CliRole::Reader => Role::Reader,
            CliRole::Operator => Role::Operator,
            CliRole::Admin => Role::Admin,
        }
    }
}

/// Logs on stderr for a one-off command (no traces).
pub fn init_tracing(format: LogFormat) {
    let _ = crate::telemetry::init(format, None);
}

/// Refuses `memory://` to a one-off command: what it wrote (or copied) would be
/// another in-memory database than any server's, gone when it exits. `hint` ends
/// the message.
fn refuse_memory(settings: &Settings, command: &str, hint: &str) -> anyhow::Result<()> {
    if crate::store::Durability::of_url(&settings.database_url)
        == crate::store::Durability::Ephemeral
    {
        anyhow::bail!(
            "database_url: `herald {command}` cannot use memory://, which lives only inside one `herald serve` process{hint}"
        );
    }
    Ok(())
}

/// Opens (and migrates) the store for a one-off command, refusing `memory://`.
async fn open_lasting_store(
    settings: &Settings,
    command: &str,
) -> anyhow::Result<crate::store::SqlStore> {
    refuse_memory(
        settings,
        command,
        &format!(
            " (its first admin's password comes from {})",
            server::ADMIN_PASSWORD_ENV
        ),
    )?;
    server::open_store(settings).await
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { settings } => {
            let settings = Settings::resolve(&settings)?;
            let tracing = crate::telemetry::init(settings.log_format, settings.traces().as_ref())?;
            let served = server::serve(settings).await;
            // What the last requests and deliveries traced goes out before exit.
            if let Some(tracing) = tracing {
                tokio::task::spawn_blocking(move || tracing.shutdown())
                    .await
                    .ok();
            }
            served
        }
        Command::Migrate { settings } => {
            let settings = Settings::resolve(&settings)?;
            init_tracing(settings.log_format);
            let store = open_lasting_store(&settings, "migrate").await?;
            println!("Database migrated ({}).", store.engine().name());
            store.close().await;
            Ok(())
        }
        Command::User {
            command:
                UserCommand::Add {
                    username,
                    role,
                    password_stdin,
                    settings,
                },
        } => {
            let settings = Settings::resolve(&settings)?;
            init_tracing(settings.log_format);
            let (password, generated) = if password_stdin {
                let mut input = String::new();
                std::io::stdin()
                    .read_to_string(&mut input)
                    .context("cannot read the password from standard input")?;
                (input.trim_end_matches(['\r', '\n']).to_string(), false)
            } else {
                (generate_password(), true)
            };
            let store = open_lasting_store(&settings, "user add").await?;
            let accounts = server::account_service(&store, &settings);
            let user = accounts
                .add_user(Actor::Local, &username, Some(&password), role.into())
                .await?
                .user;
            println!(
                "Created user {:?} with role {}.",
                user.username,
                user.role.as_str()
            );
            if generated {
                println!("password: {password}\nThis password is shown only once.");
            }
            store.close().await;
            Ok(())
        }
        Command::Token {
            command:
                TokenCommand::Create {
                    name,
                    role,
                    settings,
                },
        } => {
            let settings = Settings::resolve(&settings)?;
            init_tracing(settings.log_format);
            let store = open_lasting_store(&settings, "token create").await?;
            let accounts = server::account_service(&store, &settings);
            let token = accounts
                .create_token(Actor::Local, &name, role.into())
                .await?;
            println!(
                "Created API token {:?} with role {}. Send it as `Authorization: Bearer <token>`:\n{}\nThis token is shown only once.",
                token.token.name,
                token.token.role.as_str(),
                token.secret
            );
            store.close().await;
            Ok(())
        }
        Command::Archive {
            command: ArchiveCommand::Verify { dir },
        } => verify_archive(&dir),
        Command::Events {
            command:
                EventsCommand::Export {
                    query,
                    with_payloads,
                    settings,
                },
        } => {
            let settings = Settings::resolve(&settings)?;
            init_tracing(settings.log_format);
            export_events(&settings, &query, with_payloads).await
        }
        Command::Backup {
            to,
            store,
            settings,
        } => {
            let mut settings = Settings::resolve(&settings)?;
            init_tracing(settings.log_format);
            if let BackedUpStore::Approvals = store {
                settings.database_url = settings.approvals_url().to_string();
            }
            // Connect only: a backup must not migrate the store it copies.
            refuse_memory(&settings, "backup", "")?;
            let store = connect_existing(&settings.database_url).await?;
            let copied = store.backup_to(&to).await;
            store.close().await;
            let check = copied?;
            println!(
                "Backed up to {} and checked it: {} migrations applied, {} runs, {} outbox events.",
                to.display(),
                check.migrations,
                check.runs,
                check.events
            );
            Ok(())
        }
    }
}

/// Connects to a store a one-off command only reads or copies: never creating a
/// SQLite file, never migrating.
async fn connect_existing(url: &str) -> anyhow::Result<crate::store::SqlStore> {
    let mut url = url.to_string();
    if crate::store::Engine::from_url(&url)? == crate::store::Engine::Sqlite
        && !url.contains("mode=")
    {
        url.push_str(if url.contains('?') {
            "&mode=rw"
        } else {
            "?mode=rw"
        });
    }
    let store = crate::store::SqlStore::connect(&crate::store::StoreOptions {
        url: url.clone(),
        max_connections: 1,
    })
    .await?;
    Ok(store)
}

/// [`connect_existing`], refusing a database Herald has not migrated to this
/// version (its tables would be missing or old).
async fn connect_migrated(url: &str) -> anyhow::Result<crate::store::SqlStore> {
    let store = connect_existing(url).await?;
    if !store.is_ready().await {
        store.close().await;
        anyhow::bail!(
            "{} is not a Herald store migrated to this version: run `herald migrate` with this binary, or check the URL",
            crate::store::engine::redact_url(url)
        );
    }
    Ok(store)
}

/// `herald events export`: the stores are connected to, not migrated (an export
/// only reads), and the filter is checked before either is.
async fn export_events(
    settings: &Settings,
    query: &ExportQuery,
    with_payloads: bool,
) -> anyhow::Result<()> {
    use std::io::Write;
    let filter = query.filter()?;
    let format = query.format()?;
    refuse_memory(settings, "events export", "")?;
    let mut urls = vec![settings.database_url.clone()];
    if settings.approvals_apart() {
        urls.push(settings.approvals_url().to_string());
    }
    let mut stores = Vec::new();
    for url in urls {
        match connect_migrated(&url).await {
            Ok(store) => stores.push(store),
            Err(err) => {
                for store in stores {
                    store.close().await;
                }
                return Err(err);
            }
        }
    }
    let reads = stores
        .iter()
        .map(|store| Arc::new(store.clone()) as Arc<dyn DeliveryReads>)
        .collect();
    let mut export = Export::new(EventRows::new(reads, filter, with_payloads), format);
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let written = async {
        while let Some(page) = export.next_page().await? {
            out.write_all(&page)?;
        }
        out.flush()?;
        anyhow::Ok(())
    }
    .await;
    for store in stores {
        store.close().await;
    }
    written.context("the export stopped before its end; what was written is incomplete")?;
    eprintln!("Exported {} events.", export.exported());
    Ok(())
}

fn verify_archive(dir: &std::path::Path) -> anyhow::Result<()> {
    let report = crate::outbox::archive::verify(dir)?;
    if report.files == 0 {
        anyhow::bail!("{} holds no archive files", dir.display());
    }
    println!("{} archive files checked.", report.files);
    for (table, rows) in &report.rows {
        println!("{table}: {rows} rows");
    }
    for (path, rows) in &report.truncated {
        println!(
            "{}: the last chunk was cut short after {rows} whole rows (a pass stopped while writing it; its rows were not removed from the store and a later pass archived them again)",
            path.display()
        );
    }
    println!("A row may appear twice when a pass stopped between archiving and removing it; both copies are identical, so load with insert-if-absent.");
    Ok(())
}
