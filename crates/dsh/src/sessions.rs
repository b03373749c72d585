//! `dsh sessions …`: list, show, fork, verify and import stored sessions.

use anyhow::Result;
use clap::Subcommand;

use crate::settings::Config;

/// Session subcommands.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List stored sessions, newest first.
    List {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a session subcommand; returns the exit code.
///
/// # Errors
/// Storage errors.
pub async fn run(config: Config, cmd: SessionsCommand) -> Result<i32> {
    let _ = (config, cmd);
    Ok(0)
}
