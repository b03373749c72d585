//! dsh-persistence: the session persistence seam of dsh and the plugin that wires it in.
//!
//! The crate holds the [`SessionPersistence`] trait and its shared implementation
//! [`Persistence`] over any [`StorageBackend`], the batching [`WriteCoordinator`], the
//! checkpoint policy, cold-session crash repair ([`interrupted_turn_closers`]), the one
//! session-header validator ([`validate_header`]), inspection (summaries, fork, import, export,
//! [`verify_log`]) and the backend registry ([`PersistenceBackends`]). Storage backends are
//! plugins that register a [`BackendFactory`].
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
mod lookup;
mod plugin;
mod repair;
mod seam;
mod service;
mod settings;
mod verify;

pub use backends::{BackendConfig, BackendFactory, PersistenceBackends};
pub use coordinator::{DEFAULT_WRITE_BATCH_MAX_DELAY_MS, WriteCoordinator};
pub use error::{PersistenceError, Result, UnsupportedReason};
pub use header::{
    MAX_SAFE_INTEGER, SESSION_FORMAT_VERSION, SessionHeader, check_version, header_to_line,
    normalize_header, parse_header_line, parse_header_value, validate_header,
};
pub use inspect::{SessionSummary, copy_sessions, summarize};
pub use lookup::{IdLookupError, MAX_LISTED_CANDIDATES, resolve_id, sort_by_activity};
pub use plugin::install;
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

dsh_kernel::plugin! {
    after = [dsh_session::PLUGIN, dsh_llm::PLUGIN, dsh_tools::PLUGIN],
    settings = PersistenceSettings,
    aliases = ["persistence"],
    restricted = ["dir"],
    start = plugin::start,
}
