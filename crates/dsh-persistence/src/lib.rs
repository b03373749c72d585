//! `dsh-persistence`: the session persistence seam of dsh — the [`SessionPersistence`] trait and
//! its shared implementation [`Persistence`] over any [`StorageBackend`], the batching
//! [`WriteCoordinator`], the checkpoint policy, cold-session crash repair
//! ([`interrupted_turn_closers`]), the one session-header validator ([`validate_header`]),
//! inspection (summaries, fork, import, export, [`verify_log`]) and the backend registry
//! ([`PersistenceBackends`]). Storage backends are plugins that register a [`BackendFactory`].
//!
//! Behaviour: `docs/persistence.md`.
//!
//! Layers:
//! - [`StorageBackend`]: durable primitives of one backend (`load_stored`, `append_batch`,
//!   `adopt` = take the writer role + commit repair, `list`, `release`).
//! - [`Persistence<B>`]: the seam over any backend (lazy create, contiguous-batch check, format
//!   checks, repair sequencing: `load` commits, `inspect` repairs in memory only).
//! - [`WriteCoordinator`]: the `session/event` → batch → `append` write path.
//! - [`PersistenceService`]: the chosen backend plus the coordinator, wired into the kernel by
//!   this crate's plugin (or by [`install`] for a host-given backend).
//!
//! The plugin (id `dsh-persistence`) reads settings section `dsh-persistence`
//! ([`PersistenceSettings`]: `{"backend": "jsonl", "dir": "/abs/dir", "write_batch_ms": 200}`),
//! provides `Arc<PersistenceBackends>` (backend plugins, applied after it, register there),
//! `Arc<PersistenceService>` and the resume loader `Arc<dsh_agent::SessionLoader>`. The backend is
//! opened once every plugin is applied: on [`PersistenceService::resolve`] (the host calls it
//! after boot) or on first use.

mod backends;
pub mod checkpoint;
pub mod codec;
mod coordinator;
mod error;
mod header;
mod inspect;
mod repair;
mod seam;
mod service;
mod settings;
mod verify;

use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, Context};

pub use backends::{BackendConfig, BackendFactory, PersistenceBackends};
pub use coordinator::{DEFAULT_WRITE_BATCH_MAX_DELAY_MS, WriteCoordinator};
pub use error::{PersistenceError, Result, UnsupportedReason};
pub use header::{
    MAX_SAFE_INTEGER, SESSION_FORMAT_VERSION, SessionHeader, check_version, header_to_line,
    normalize_header, parse_header_line, parse_header_value, validate_header,
};
pub use inspect::{SessionSummary, copy_sessions, summarize};
pub use repair::{
    NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN,
    interrupted_turn_closers,
};
pub use seam::{
    LoadedSession, Persistence, RepairReport, Revision, SessionLocation, SessionPersistence,
    SessionSnapshot, SharedPersistence, StorageBackend, StoredPrefix,
};
pub use service::PersistenceService;
pub use settings::{DEFAULT_BACKEND, NO_BACKEND, PersistenceSettings};
pub use verify::{RawItem, RawLog, VerifyError, VerifyReport, restore_envelope, verify_log};

/// Installs a host-given `backend` in `ctx` (no registry, no settings): provides
/// `Arc<PersistenceService>` and the resume loader and registers the write-path listeners and
/// checkpoint barriers (see [`PersistenceService`]). For tests and embedders; the binary uses the
/// plugin.
///
/// # Errors
/// Kernel registration failures.
pub fn install(
    ctx: &Context,
    backend: SharedPersistence,
    write_batch_max_delay: Duration,
) -> std::result::Result<Arc<PersistenceService>, BoxError> {
    let service = Arc::new(PersistenceService::with_backend(
        backend,
        write_batch_max_delay,
    ));
    service::wire(ctx, service.clone())?;
    Ok(service)
}

/// Provides the backend registry and the (not yet resolved) service, which the backend plugins
/// (started after this one) register their factories with; the host resolves it once boot is
/// done (`PersistenceService::resolve`), else the first use does. The run facts
/// fill in what the user left out: `ephemeral` turns persistence off, `dir` defaults to
/// `<dsh_home>/sessions`, and a relative `dir` (or one starting with `~/`) is made absolute
/// against `launch_dir` (or `$HOME`).
fn start(ctx: &Context) -> std::result::Result<(), BoxError> {
    let mut settings: PersistenceSettings = ctx.settings_section(env!("CARGO_PKG_NAME"))?;
    let facts = ctx.settings();
    if facts.fact_flag("ephemeral") {
        settings.backend = Some(NO_BACKEND.to_owned());
    }
    settings.dir = match settings.dir.take() {
        Some(dir) => Some(absolute_dir(dir, facts.fact_str("launch_dir"))),
        None => facts
            .fact_str("dsh_home")
            .map(|h| std::path::Path::new(h).join("sessions")),
    };
    let backends = Arc::new(PersistenceBackends::new());
    ctx.provide(backends.clone())?.detach();
    let registry = ctx
        .get::<dsh_session::EventTypeRegistry>()
        .unwrap_or_else(dsh_session::EventTypeRegistry::shared_default);
    let service = Arc::new(PersistenceService::from_settings(
        settings, backends, registry,
    ));
    service::wire(ctx, service)?;
    Ok(())
}

fn absolute_dir(dir: std::path::PathBuf, launch_dir: Option<&str>) -> std::path::PathBuf {
    if let Ok(rest) = dir.strip_prefix("~")
        && let Some(home) = std::env::var_os("HOME")
    {
        return std::path::Path::new(&home).join(rest);
    }
    match launch_dir {
        Some(base) if dir.is_relative() => std::path::Path::new(base).join(dir),
        _ => dir,
    }
}

dsh_kernel::plugin! {
    after = [dsh_session::PLUGIN, dsh_llm::PLUGIN, dsh_tools::PLUGIN],
    settings = PersistenceSettings,
    aliases = ["persistence"],
    start = start,
}
