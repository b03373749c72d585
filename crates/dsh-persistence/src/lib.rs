//! `dsh-persistence`: durable session storage for dsh — the [`SessionPersistence`] seam, the
//! batching [`WriteCoordinator`], the checkpoint policy, cold-session crash repair
//! ([`interrupted_turn_closers`]) and the default JSONL backend ([`JsonlBackend`]).
//!
//! Spec: `../shared/spec/persistence.md`; bug cases BC-24 (crash between call and result), BC-25
//! (torn last line, garbage mid-file), BC-27 (linear-time, bounded-memory resume).
//!
//! Layers:
//! - [`StorageBackend`]: durable primitives of one backend (`load_stored`, `append_batch`,
//!   `adopt` = take the writer role + commit repair, `list`, `release`).
//! - [`Persistence<B>`]: the seam over any backend (lazy create, contiguous-batch check, format
//!   checks, repair sequencing: `load` commits, `inspect` repairs in memory only).
//! - [`WriteCoordinator`]: the `session/event` → batch → `append` write path.
//! - [`install`]: provides [`PersistenceService`] and wires `session/event`, `session/flush`,
//!   `session/disposed` and the checkpoint barriers (`llm/stream`, `tools/execute`).
//!
//! The plugin (`dsh_kernel::plugin!`, id `dsh-persistence`) installs the JSONL backend when the
//! settings section `dsh-persistence` has a `root` (and `backend` is not `"none"`):
//! `{"root": "/abs/dir", "packChunks": true, "writeBatchMaxDelayMs": 200}`. Hosts using SQLite call
//! [`install`] with `dsh_persistence_sqlite::open_persistence(..)` instead.
//!
//! Resume: [`PersistenceService::resume`] returns the repaired [`LoadedSession`] (header + events)
//! for `Session::from_restore`, and sets the coordinator's cursor so the restored events are not
//! re-appended.

pub mod checkpoint;
pub mod codec;
mod coordinator;
mod error;
pub mod fsio;
mod header;
pub mod jsonl;
pub mod path;
mod repair;
mod seam;

use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_session::{SessionCreated, SessionDisposed, SessionEventEmitted, SessionFlush};

pub use coordinator::{DEFAULT_WRITE_BATCH_MAX_DELAY_MS, WriteCoordinator};
pub use error::{PersistenceError, Result, UnsupportedReason};
pub use header::{
    MAX_SAFE_INTEGER, SESSION_FORMAT_VERSION, SessionHeader, check_version, header_to_line,
    normalize_header, parse_header_line, parse_header_value, validate_header,
};
pub use jsonl::{Compression, JsonlBackend, JsonlConfig};
pub use path::{encode_segment, log_path, project_dir, project_key, session_dir};
pub use repair::{
    NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN,
    interrupted_turn_closers,
};
pub use seam::{
    LoadedSession, Persistence, RepairReport, Revision, SessionLocation, SessionPersistence,
    SessionSnapshot, SharedPersistence, StorageBackend, StoredPrefix,
};

/// The JSONL seam.
pub type JsonlPersistence = Persistence<JsonlBackend>;

/// A JSONL seam over `config`.
pub fn jsonl_persistence(config: JsonlConfig) -> Arc<JsonlPersistence> {
    Arc::new(Persistence::new(JsonlBackend::new(config)))
}

/// The kernel service (`ctx.sessionPersistence`): the backend seam plus the write coordinator.
pub struct PersistenceService {
    /// The backend seam.
    pub backend: SharedPersistence,
    /// The write coordinator fed by `session/event`.
    pub coordinator: WriteCoordinator,
}

impl PersistenceService {
    /// Loads (and durably repairs) a stored session for resume, and registers the coordinator
    /// cursor at its length so restored events are never re-appended. Blocking I/O runs on
    /// `spawn_blocking`. Feed the result to `Session::from_restore(id, loaded.events,
    /// Some(loaded.header))`.
    ///
    /// # Errors
    /// As [`SessionPersistence::prepare`].
    pub async fn resume(&self, id: &str) -> Result<LoadedSession> {
        let backend = self.backend.clone();
        let owned = id.to_owned();
        let loaded = tokio::task::spawn_blocking(move || backend.prepare(&owned))
            .await
            .map_err(|e| PersistenceError::Backend {
                backend: "coordinator",
                detail: e.to_string(),
            })??;
        self.coordinator
            .attach_restored(&loaded.header, loaded.events.len() as u64);
        Ok(loaded)
    }

    /// Flushes one session (as `session/flush` does).
    ///
    /// # Errors
    /// As [`WriteCoordinator::flush`].
    pub async fn flush(&self, id: &str) -> Result<()> {
        self.coordinator.flush(id).await
    }
}

/// Installs `backend` in `ctx`: provides `Arc<PersistenceService>`, registers global listeners
/// for `session/created` (admits seed events, which are not published), `session/event` (admit,
/// never blocks), `session/flush` (drain; failure surfaces to the
/// flusher), `session/disposed` (final drain, release; failure logged) and the checkpoint barriers.
///
/// # Errors
/// Kernel registration failures.
pub fn install(
    ctx: &Context,
    backend: SharedPersistence,
    write_batch_max_delay: Duration,
) -> std::result::Result<Arc<PersistenceService>, BoxError> {
    let coordinator = WriteCoordinator::new(backend.clone(), write_batch_max_delay);
    let service = Arc::new(PersistenceService {
        backend,
        coordinator: coordinator.clone(),
    });
    ctx.provide(service.clone())?.detach();
    let c = coordinator.clone();
    ctx.on_emit_with::<SessionEventEmitted>(ListenOptions::global(), move |n| {
        c.admit(n.session.header(), &n.event);
    })?
    .detach();
    let c = coordinator.clone();
    // Seed events (fork/replay) are not published as `session/event`: admit them at creation.
    ctx.on_emit_with::<SessionCreated>(ListenOptions::global(), move |n| {
        let header = n.session.header().clone();
        for e in n.session.events() {
            c.admit(&header, &e);
        }
    })?
    .detach();
    let c = coordinator.clone();
    ctx.on_parallel_with::<SessionFlush, _, _>(ListenOptions::global(), move |n| {
        let c = c.clone();
        let id = n.session.id().to_owned();
        async move { c.flush(&id).await.map_err(|e| Box::new(e) as BoxError) }
    })?
    .detach();
    let c = coordinator.clone();
    ctx.on_emit_with::<SessionDisposed>(ListenOptions::global(), move |n| {
        let c = c.clone();
        let id = n.session.id().to_owned();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                if let Err(e) = c.release(&id).await {
                    tracing::error!(session = %id, code = e.code(), error = %e, "final session drain failed");
                }
            });
        }
    })?
    .detach();
    checkpoint::register(ctx, &coordinator)?;
    Ok(service)
}

/// Settings section `dsh-persistence` (also `[persistence]`), snake_case.
#[derive(Debug, Clone, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PersistenceSettings {
    /// The sessions directory; default `<dsh_home>/sessions` (run fact `dsh_home`), else the
    /// plugin installs nothing.
    pub dir: Option<std::path::PathBuf>,
    /// Pack chunk runs (default true when absent).
    pub pack_chunks: Option<bool>,
    /// Batching window in ms (default 200).
    pub write_batch_ms: Option<u64>,
    /// `"none"` (default, plain `session.jsonl`) or `"zstd"` (`session.jsonl.zstd`).
    pub compression: Option<jsonl::Compression>,
    /// `"jsonl"` (default), `"sqlite"` or `"none"`.
    pub backend: Option<String>,
}

fn apply(ctx: &Context) -> std::result::Result<(), BoxError> {
    let settings: PersistenceSettings = ctx.settings_section("dsh-persistence")?;
    let facts = ctx.settings();
    if facts.fact_flag("ephemeral") {
        return Ok(());
    }
    let Some(root) = settings.dir.clone().or_else(|| {
        facts
            .fact_str("dsh_home")
            .map(|h| std::path::Path::new(h).join("sessions"))
    }) else {
        return Ok(());
    };
    if settings.backend.as_deref().is_some_and(|b| b != "jsonl") {
        return Ok(());
    }
    let config = JsonlConfig {
        root,
        pack_chunks: settings.pack_chunks.unwrap_or(true),
        compression: settings.compression.unwrap_or_default(),
    };
    let registry = ctx
        .get::<dsh_session::EventTypeRegistry>()
        .unwrap_or_else(dsh_session::EventTypeRegistry::shared_default);
    let backend = Arc::new(Persistence::with_registry(
        JsonlBackend::new(config),
        registry,
    ));
    let delay = Duration::from_millis(
        settings
            .write_batch_ms
            .unwrap_or(DEFAULT_WRITE_BATCH_MAX_DELAY_MS),
    );
    install(ctx, backend, delay)?;
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_session::PLUGIN, dsh_llm::PLUGIN, dsh_tools::PLUGIN],
    settings = PersistenceSettings,
    aliases = ["persistence"],
    start = apply,
}
