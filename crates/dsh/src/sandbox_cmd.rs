//! `dsh sandbox check`: boots the configured plugins, selects the sandbox runner exactly as a
//! confined `bash` call would, and prints the runner on the first line (`runner: <name>` or
//! `runner: none`), then its enforcement level, the network setting and why every other
//! candidate was not chosen. Exit 0 when a runner is usable, 1 when none is (a confined command
//! would then fail with `SANDBOX_UNAVAILABLE`). See `docs/upstream/sandbox.md`.

use anyhow::Result;
use dsh_sandbox::SandboxService;

use crate::app::App;
use crate::settings::Config;

/// The `dsh sandbox` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum SandboxCommand {
    /// Select the sandbox runner and report it: exit 0 usable, 1 none.
    Check,
}

/// Runs `cmd`; returns the exit code.
///
/// # Errors
/// Boot failures of the configured plugins (exit 2 through the caller).
pub async fn run(config: Config, cmd: SandboxCommand) -> Result<i32> {
    match cmd {
        SandboxCommand::Check => check(config).await,
    }
}

async fn check(config: Config) -> Result<i32> {
    let app = App::boot(config).await?;
    let lines = match app.kernel.root().get::<SandboxService>() {
        None => vec![
            "runner: none".to_owned(),
            "the dsh-sandbox plugin is not booted: bash runs unconfined".to_owned(),
        ],
        Some(sandbox) => report(&sandbox),
    };
    let usable = lines.first().is_some_and(|l| l != "runner: none");
    app.shutdown().await;
    crate::cli::print_lines(&lines)?;
    Ok(if usable { 0 } else { 1 })
}

fn report(sandbox: &SandboxService) -> Vec<String> {
    let selection = sandbox.selection();
    let mut lines = Vec::new();
    match &selection.chosen {
        Some((runner, enforcement)) => {
            lines.push(format!("runner: {}", runner.name()));
            lines.push(format!("enforcement: {}", enforcement.as_str()));
        }
        None => {
            lines.push("runner: none".to_owned());
            lines.push(format!(
                "confined commands fail with SANDBOX_UNAVAILABLE: {}",
                dsh_sandbox::unavailable_message(sandbox.configured_mode())
            ));
        }
    }
    lines.push(format!("mode: {}", sandbox.configured_mode()));
    lines.push(format!(
        "network: {}",
        if sandbox.network() {
            "on ([sandbox] network = true)"
        } else {
            "off for confined commands"
        }
    ));
    for (name, why) in &selection.failures {
        lines.push(format!("not used: {name}: {why}"));
    }
    lines
}
