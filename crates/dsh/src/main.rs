//! `dsh`: the default harness binary — headless `exec`, a line-mode interactive shell, and
//! session management — over the default plugin set linked in [`plugins`].

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the CLI's job is to print"
)]

mod app;
mod exec;
mod interactive;
mod plugins;
mod render;
mod sessions;
mod settings;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::{Args, Parser, Subcommand};

/// dsh — a fast, reliable, extensible coding-agent harness.
#[derive(Parser, Debug)]
#[command(name = "dsh", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Args, Debug, Clone, Default)]
struct Global {
    /// Workspace root (default: the current directory).
    #[arg(short = 'C', long = "cwd", global = true, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Model id (default from settings, else deepseek-v4-flash).
    #[arg(short = 'm', long, global = true)]
    model: Option<String>,
    /// Provider route id (default from settings, else deepseek).
    #[arg(long, global = true)]
    provider: Option<String>,
    /// read-only | workspace-write | danger-full-access (default workspace-write).
    #[arg(long = "permission-mode", global = true, value_name = "MODE")]
    permission_mode: Option<String>,
    /// Override a setting: `-c key=value` (TOML value; repeatable).
    #[arg(short = 'c', long = "config", global = true, value_name = "KEY=VALUE")]
    config: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one task headlessly on a fresh persisted session and print the answer.
    Exec(ExecArgs),
    /// Continue a stored session interactively.
    Resume {
        /// Session id.
        id: Option<String>,
        /// The newest session of this workspace.
        #[arg(long)]
        last: bool,
    },
    /// Manage stored sessions.
    #[command(subcommand)]
    Sessions(sessions::SessionsCommand),
    /// Print the version and the plugins linked into this binary.
    Plugins,
}

#[derive(Args, Debug)]
struct ExecArgs {
    /// The task. `-` reads it from stdin.
    prompt: String,
    /// JSON Lines on stdout: every session event, then a terminal `result` line.
    #[arg(long)]
    json: bool,
    /// Run the prompt as a new turn of a stored session.
    #[arg(long, value_name = "ID", conflicts_with = "continue_last")]
    resume: Option<String>,
    /// Run the prompt as a new turn of this workspace's newest session.
    #[arg(long = "continue")]
    continue_last: bool,
    /// Do not persist the session.
    #[arg(long)]
    ephemeral: bool,
}

fn workspace(global: &Global) -> Result<PathBuf> {
    let cwd = match &global.cwd {
        Some(p) => p.clone(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    std::fs::canonicalize(&cwd).with_context(|| format!("workspace {}", cwd.display()))
}

fn load_config(global: &Global, ephemeral: bool) -> Result<settings::Config> {
    let cwd = workspace(global).map_err(|e| app::UsageError(format!("{e:#}")))?;
    settings::load(
        &cwd,
        &settings::Overrides {
            pairs: global.config.clone(),
            provider: global.provider.clone(),
            model: global.model.clone(),
            permission_mode: global.permission_mode.clone(),
            ephemeral,
        },
    )
    .map_err(|e| app::UsageError(format!("{e:#}")).into())
}

fn print_plugins() {
    println!("dsh {}", env!("CARGO_PKG_VERSION"));
    for d in dsh_kernel::linked_plugins() {
        println!("  {}", d.id);
    }
}

async fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Some(Command::Plugins) => {
            print_plugins();
            Ok(0)
        }
        Some(Command::Exec(args)) => {
            let prompt = if args.prompt == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .context("reading the prompt from stdin")?;
                s
            } else {
                args.prompt
            };
            if prompt.trim().is_empty() {
                return Err(app::UsageError("the prompt is empty".into()).into());
            }
            let config = load_config(&cli.global, args.ephemeral)?;
            let app = app::App::boot(config).await?;
            exec::run(
                app,
                exec::ExecRequest {
                    prompt,
                    format: if args.json {
                        render::Format::Json
                    } else {
                        render::Format::Text
                    },
                    resume: args.resume,
                    continue_last: args.continue_last,
                },
            )
            .await
        }
        Some(Command::Sessions(cmd)) => {
            let config = load_config(&cli.global, false)?;
            sessions::run(config, cmd).await
        }
        Some(Command::Resume { id, last }) => {
            let config = load_config(&cli.global, false)?;
            let app = app::App::boot(config).await?;
            let id = match (id, last) {
                (Some(id), _) => Some(id),
                (None, true) => Some(app.last_session_id()?),
                (None, false) => {
                    return Err(app::UsageError("dsh resume needs an ID or --last".into()).into());
                }
            };
            interactive::run(app, id).await
        }
        None => {
            let config = load_config(&cli.global, false)?;
            let app = app::App::boot(config).await?;
            interactive::run(app, None).await
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DSH_LOG")
                // Failures reach the user as one `error:` line; `DSH_LOG=warn` shows more.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(run(cli));
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            let usage = e.downcast_ref::<app::UsageError>().is_some();
            eprintln!("error: {e:#}");
            if usage { 2 } else { 1 }
        }
    };
    // Do not wait for background tasks (a hung provider connection) on the way out.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
