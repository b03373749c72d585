//! `dsh sessions …`: list, show, fork, verify and import stored sessions through the persistence
//! seam only ([`crate::app::Storage`]): which backend stores them is the `[persistence]` setting's
//! business, and which backend reads a standalone file is decided by the registered backends.
//!
//! - `list [--json]` ([`list`]): the seam's session summaries, newest first by last activity.
//! - `show ID [--json] [--seq]` ([`show`]): a readable transcript (with `--seq`, each line
//!   prefixed by its event's seq), or every event as a JSON line (the `inspect` view: stored
//!   events plus the in-memory crash-repair closers a load would add).
//! - `fork ID [--at SEQ | --turn N]` ([`fork`]): a new stored session seeded with the prefix
//!   through `SEQ`, or through the `turn/end` of turn `N`.
//!
//! `ID` may be any unambiguous prefix of a stored session's id (`show`, `fork`, `export`,
//! `delete`; `Storage::resolve_id`).
//! - `verify PATH [--json]` ([`verify`]): checks a session file read-only (or, when `PATH` is not
//!   a file, the stored session of that id); exit 0 only for a clean log, 1 otherwise.
//! - `import PATH` ([`import`]): stores such a file under its header id, repaired like a load.
//! - `export ID --to BACKEND` ([`export`]): copies a stored session into another registered
//!   backend over the same sessions directory.
//! - `delete ID` ([`delete`]): removes a stored session with its own folder (spilled tool
//!   output); a session another process is writing is refused (`SESSION_LOCKED`, exit 1).
//!
//! Behaviour: `docs/persistence.md` ("Inspection", "Verify").

use dsh_kernel::ErrorCode;
mod delete;
mod export;
mod fmt;
mod fork;
mod import;
mod list;
mod show;
mod verify;

pub(crate) use fmt::fmt_utc;

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Result, anyhow};
use clap::Subcommand;
use dsh_persistence::PersistenceError;

use crate::app::{Storage, UsageError};
use crate::settings::Config;

/// Session subcommands.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List stored sessions, newest first.
    List {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a stored session's transcript.
    Show {
        /// Session id.
        id: String,
        /// The session's events as JSON lines instead.
        #[arg(long)]
        json: bool,
        /// Prefix each line of the transcript with the seq of the event it shows (`#12`), for
        /// `fork --at SEQ`.
        #[arg(long)]
        seq: bool,
    },
    /// Fork a stored session into a new one seeded with a prefix of its log.
    Fork {
        /// Session id.
        id: String,
        /// Last seq of the prefix (inclusive; default: the last event).
        #[arg(long, value_name = "SEQ", conflicts_with = "turn")]
        at: Option<u64>,
        /// Fork after turn N (through its `turn/end`; turns count from 1 as `show` numbers
        /// them).
        #[arg(long, value_name = "N")]
        turn: Option<u64>,
    },
    /// Check a session file (read-only); exit 0 only when it loads cleanly.
    Verify {
        /// Path of a session file (`session.jsonl`, `session.jsonl.zstd`, a session database),
        /// or the id of a stored session.
        path: PathBuf,
        /// A JSON report object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Copy a session file into the store (repairing it like a load would).
    Import {
        /// Path of a session file.
        path: PathBuf,
    },
    /// Copy a stored session into another backend (same sessions directory).
    Export {
        /// Session id.
        id: String,
        /// Name of the backend to copy into (e.g. `sqlite`).
        #[arg(long, value_name = "BACKEND")]
        to: String,
    },
    /// Delete a stored session and its own folder (spilled tool output); refuses a session
    /// another process is writing.
    Delete {
        /// Session id.
        id: String,
    },
    /// Compact an idle stored session now (summarise its older history with the model);
    /// `BUSY` (exit 1) while another process holds it.
    Compact {
        /// Session id.
        id: String,
    },
}

/// Runs a session subcommand; returns the process exit code (0 ok, 1 failure/not clean,
/// 2 usage: unknown id, bad fork boundary).
///
/// # Errors
/// Storage errors (opening the store, corrupt or unsupported logs) and usage errors
/// ([`UsageError`]).
pub async fn run(config: Config, cmd: SessionsCommand) -> Result<i32> {
    let storage = Storage::open(&config).await?;
    // A session may be named by any unambiguous prefix of its id.
    let resolved = |id: &str| storage.resolve_id(id);
    let result = match cmd {
        SessionsCommand::List { json } => list::run(&storage, json),
        SessionsCommand::Show { id, json, seq } => {
            resolved(&id).and_then(|id| show::run(&storage, &id, json, seq))
        }
        SessionsCommand::Fork { id, at, turn } => {
            resolved(&id).and_then(|id| fork::run(&storage, &id, at, turn))
        }
        SessionsCommand::Verify { path, json } => verify::run(&storage, &path, json),
        SessionsCommand::Import { path } => import::run(&storage, &path),
        SessionsCommand::Export { id, to } => {
            resolved(&id).and_then(|id| export::run(&storage, &id, &to))
        }
        SessionsCommand::Delete { id } => resolved(&id).and_then(|id| delete::run(&storage, &id)),
        // Dispatched by the command line before the store is opened (it boots the harness).
        SessionsCommand::Compact { .. } => Ok(crate::exit::USAGE),
    };
    storage.close().await;
    result
}

/// Writes `text` to stdout.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// A seam error about session `id` as the user sees it: an unknown id or a bad argument is a
/// usage error (exit 2).
fn storage_error(id: &str, e: PersistenceError) -> anyhow::Error {
    match e {
        PersistenceError::NotFound { .. } => UsageError(format!("no stored session `{id}`")).into(),
        PersistenceError::InvalidArgument { detail } => UsageError(detail).into(),
        other => anyhow!("session `{id}`: {other} ({})", other.code()),
    }
}
