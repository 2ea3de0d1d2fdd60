//! The `herald` command line.

use std::io::Read;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use vocab::Role;

use crate::auth::password::generate_password;
use crate::config::{LogFormat, Settings, SettingsArgs};
use crate::server;

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

pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
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
            init_tracing(settings.log_format);
            server::serve(settings).await
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
                .add_user(None, &username, &password, role.into())
                .await?;
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
            let token = accounts.create_token(None, &name, role.into()).await?;
            println!(
                "Created API token {:?} with role {}. Send it as `Authorization: Bearer <token>`:\n{}\nThis token is shown only once.",
                token.name,
                token.role.as_str(),
                token.secret
            );
            store.close().await;
            Ok(())
        }
        Command::Archive {
            command: ArchiveCommand::Verify { dir },
        } => verify_archive(&dir),
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
            let store = crate::store::SqlStore::connect(&crate::store::StoreOptions {
                url: settings.database_url.clone(),
                max_connections: 1,
            })
            .await?;
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
