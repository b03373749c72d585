//! dsh-process: the process executor every dsh component that runs a command uses (the bash
//! tool, hooks, MCP servers), so none of them depends on the shell tool plugin.
//!
//! - [`exec`]: [`ProcessSpec`] → [`run`] (foreground: timeout, cancellation, bounded head+tail
//!   capture) or [`start`] (background: output rings, a [`BackgroundProcess`] handle). Every
//!   child runs in a new session without a controlling terminal (`setsid`), stdin `/dev/null`,
//!   in its own process group that is terminated as a whole (SIGTERM, then SIGKILL) on timeout,
//!   cancellation and exit.
//! - [`env`](mod@env): the child environment (credential scrub, non-interactive overrides such as
//!   `GIT_TERMINAL_PROMPT=0` and `EDITOR=true`, caller entries, managed `DSH_*`).
//! - [`capture`]: bounded output capture with exact totals; the whole of an overflowing stream
//!   in an output file ([`OutputFiles`]).
//! - [`proc`]: process-group liveness and signalling, pipe holders, signal names.
//! - [`terminal`]: recognising a command that failed for want of a terminal.
//!
//! It is a library (a seam crate with no plugin and no service): callers build a
//! [`ProcessSpec`] and await the run. Behaviour notes: `docs/tools.md` ("Process executor").

pub mod capture;
pub mod env;
mod error;
pub mod exec;
pub mod proc;
pub mod terminal;

pub use capture::{
    CollectedOutput, DiskBudget, HeadTail, OutputFiles, OutputRing, RingRead, Spool,
};
pub use error::ProcessError;
pub use exec::{
    BackgroundProcess, ProcessOutcome, ProcessRun, ProcessSpec, run, run_with_stdin, spawn, start,
};
pub use terminal::{NO_TERMINAL_NOTE, wanted_terminal};
