//! dsh-persistence-sqlite: the opt-in SQLite session store behind `dsh-persistence`'s seam.
//!
//! The store (schema version 17, `application_id = 0x44534850`) implements `dsh-persistence`'s
//! [`StorageBackend`] so it gets the same seam semantics and the same crash repair through
//! [`dsh_persistence::Persistence`]. The plugin (id `dsh-persistence-sqlite`, applied after
//! `dsh-persistence`) registers it with the seam as backend `sqlite` (selected by
//! `[persistence] backend = "sqlite"`); the database is `<dir>/sessions.sqlite`. Its own
//! settings section `dsh-persistence-sqlite` is [`SqliteSettings`].
//!
//! Behaviour: `docs/persistence.md` ("SQLite backend"; the schema is upstream's).
//! - Connection: `journal_mode=WAL`, `synchronous=FULL`, `foreign_keys=ON`; a fresh file gets the
//!   schema, `application_id`, `user_version = 17` and a `persistence_state` store id (UUID v4);
//!   any other identity/version is refused (no migrations).
//! - One row per logical event (`ignorable` = 1 only for ignorable events, else NULL), or one row
//!   per packed chunk run (`type` = `text-chunks|reasoning-chunks|tool-call-chunks`, `ignorable = 0`
//!   as the physical discriminator, seq/time of the first member, NULL surface fields).
//! - `data` is TEXT JSON below 4 KiB, else a zstd (level 3) BLOB when that is smaller.
//! - `source_event_seqs` is a BLOB: first seq as a varint, then ZigZag-varint deltas ([`varint`]).
//! - Appends run in `BEGIN IMMEDIATE`: validate the tail (first seq = stored next seq), insert,
//!   bump `sessions.revision` once. Transactions are atomic, so there is never a torn tail; repair
//!   only appends closers ([`dsh_persistence::interrupted_turn_closers`], shared with JSONL).
//! - One writer per session: the first append or load of a session in a process takes an
//!   exclusive lock on `<database>.d/<encoded id>/session.lock` (as JSONL's `session.lock`), so a
//!   second process resuming it is refused with `SESSION_LOCKED` before it does any work. That
//!   folder is the session's own (spilled tool output lives there) and is removed with it
//!   (`delete`).
//!
//! [`StorageBackend`]: dsh_persistence::StorageBackend

mod backend;
mod factory;
mod schema;
mod store;
pub mod varint;

pub use backend::{
    LOCK_FILE_NAME, SqliteBackend, SqliteConfig, SqlitePersistence, default_db_path,
    encode_segment, open_persistence, sessions_dir,
};
pub use factory::{SqliteFactory, SqliteSettings};
pub use schema::{APPLICATION_ID, PACKED_TYPES, SCHEMA_SQL, SCHEMA_VERSION};
pub use store::COMPRESS_THRESHOLD_BYTES;

/// The name this backend registers under (the `backend` setting value that selects it).
pub const BACKEND_NAME: &str = "sqlite";

dsh_kernel::plugin! {
    after = [dsh_persistence::PLUGIN],
    settings = SqliteSettings,
    start = factory::apply,
}
