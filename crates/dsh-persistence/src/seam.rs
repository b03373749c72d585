//! The `SessionPersistence` seam (`ctx.sessionPersistence`), the backend hook trait
//! [`StorageBackend`], and [`Persistence`], the shared implementation of the seam over any
//! backend (lazy create, first-seq check, cold repair sequencing, format checks).
//!
//! Behaviour: `docs/persistence.md` ("Seam API", "Crash recovery", "Backend hooks",
//! "Inspection").

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_session::{EventTypeRegistry, SessionEvent};

use crate::codec;
use crate::error::{PersistenceError, Result};
use crate::header::{SessionHeader, normalize_header, validate_header};
use crate::repair::interrupted_turn_closers;

/// Where a backend keeps one session's artifact (`kind` names the artifact type, e.g. a file
/// format; backends without a per-session artifact return none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLocation {
    /// Artifact kind (backend-defined).
    pub kind: &'static str,
    /// The artifact path.
    pub path: PathBuf,
}

/// An opaque stored-state revision: changes on every append and every repair (each backend
/// documents its form).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Revision(pub String);

/// A header plus the revision of the stored session it belongs to (upstream `listSnapshots`).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSnapshot {
    /// The stored header.
    pub header: SessionHeader,
    /// The stored revision.
    pub revision: Revision,
    /// Time of the last durable write, epoch ms, when the backend records one cheaply (a file
    /// backend's modification time); `None` ⇒ inspection uses the last event's `time`.
    pub updated_at: Option<u64>,
}

/// What a repair did (or, for `inspect`, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// A torn final record (unterminated line / partial tail) was dropped.
    pub torn_tail_dropped: bool,
    /// Number of synthetic closer events appended (tool results, `step/end`, `turn/end`).
    pub closers: usize,
}

/// A loaded session: header plus the balanced event log (`events[i].seq == i`), the input of
/// `Session::from_restore` for `AgentRegistry::resume(id)`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedSession {
    /// The stored header.
    pub header: SessionHeader,
    /// All events, repaired closers included. Memory is proportional to the log (≈ the decoded
    /// size of every event; no second copy of the file is kept).
    pub events: Vec<SessionEvent>,
    /// The repair applied (`load`/`prepare`: committed; `inspect`: in memory only).
    pub repair: RepairReport,
}

/// The durable session store seam. All methods block on I/O; call them from
/// `tokio::task::spawn_blocking` (the [`crate::WriteCoordinator`] does).
pub trait SessionPersistence: Send + Sync + 'static {
    /// Backend name (the name it is registered under, e.g. `"jsonl"`).
    fn name(&self) -> &'static str;

    /// The artifact location of a session, without I/O (`None` for backends without one).
    fn locate(&self, header: &SessionHeader) -> Option<SessionLocation>;

    /// Registers a new session. Lazy: nothing is written until the first `append`.
    ///
    /// # Errors
    /// [`PersistenceError::AlreadyExists`] (stored or created in this process);
    /// [`PersistenceError::InvalidHeader`] / [`PersistenceError::FormatUnsupported`] (invalid header).
    fn create(&self, header: SessionHeader) -> Result<()>;

    /// Appends events durably (returns only after fsync/commit). The first event's seq must equal
    /// the stored next seq and the batch must be contiguous. An empty batch is a no-op.
    ///
    /// # Errors
    /// [`PersistenceError::SeqMismatch`]; [`PersistenceError::NotFound`] (never created/stored);
    /// [`PersistenceError::InvalidEvent`]; [`PersistenceError::Locked`]; I/O or backend errors
    /// (nothing partial stays stored).
    fn append(&self, id: &str, events: &[Arc<SessionEvent>]) -> Result<()>;

    /// Reserves a stored session for resume in this process and commits any pending cold repair.
    /// Same result as [`SessionPersistence::load`].
    ///
    /// # Errors
    /// As [`SessionPersistence::load`].
    fn prepare(&self, id: &str) -> Result<LoadedSession> {
        self.load(id)
    }

    /// Loads a balanced log: a torn final record is dropped and an open trailing turn is closed
    /// with [`interrupted_turn_closers`]; the repair is committed durably before returning.
    /// A session live in this process is never repaired (an open turn ⇒ `LiveOpenTurn`).
    ///
    /// # Errors
    /// [`PersistenceError::NotFound`]; [`PersistenceError::Corruption`] (committed prefix damaged);
    /// [`PersistenceError::FormatUnsupported`] (version / unknown non-ignorable type);
    /// [`PersistenceError::LiveOpenTurn`]; [`PersistenceError::Locked`]; I/O errors.
    fn load(&self, id: &str) -> Result<LoadedSession>;

    /// An immutable view: like `load`, but the repair is applied only in memory (no writes, no lock).
    ///
    /// # Errors
    /// As [`SessionPersistence::load`] minus `Locked`.
    fn inspect(&self, id: &str) -> Result<LoadedSession>;

    /// Stored events with `seq >= from_seq` (past the end ⇒ empty), without repair (a torn tail is
    /// not returned; no closers). `from_seq` is a `u64`, so upstream's negative/non-integer
    /// rejection is enforced by the type.
    ///
    /// # Errors
    /// As [`SessionPersistence::inspect`].
    fn read_from(&self, id: &str, from_seq: u64) -> Result<Vec<SessionEvent>>;

    /// Headers of stored sessions (reads headers only; never-appended sessions are absent).
    ///
    /// # Errors
    /// I/O or backend errors on the root; unreadable individual sessions are skipped (logged).
    fn list(&self) -> Result<Vec<SessionHeader>> {
        Ok(self
            .list_snapshots()?
            .into_iter()
            .map(|s| s.header)
            .collect())
    }

    /// Headers plus revisions of stored sessions.
    ///
    /// # Errors
    /// As [`SessionPersistence::list`].
    fn list_snapshots(&self) -> Result<Vec<SessionSnapshot>>;

    /// Forgets per-session writer state and releases the writer lock (`session/disposed`).
    fn release(&self, id: &str);

    /// The folder a session owns beside its log (`None` for backends without one): files that
    /// belong to the session and die with it (spilled tool output) live here. JSONL: the
    /// session's directory holding `session.jsonl`; SQLite: `<database>.d/<encoded id>/`. No I/O.
    fn session_dir(&self, header: &SessionHeader) -> Option<PathBuf> {
        let _ = header;
        None
    }

    /// Deletes a stored session: its log (or rows) and its [`SessionPersistence::session_dir`].
    /// The writer lock is taken first, so a session another process (or this one) is writing is
    /// refused and nothing is removed.
    ///
    /// # Errors
    /// [`PersistenceError::NotFound`]; [`PersistenceError::Locked`] (live in this or another
    /// process); I/O or backend errors.
    fn delete(&self, id: &str) -> Result<()> {
        Err(PersistenceError::Backend {
            backend: self.name(),
            detail: format!("deleting session \"{id}\" is not supported by this backend"),
        })
    }

    /// Summaries of every stored session ([`crate::SessionSummary`]: header, first prompt, turn
    /// count from the parsed events, last activity), in [`SessionPersistence::list_snapshots`]
    /// order. A session whose events cannot be read is kept with an empty title and 0 turns
    /// (logged).
    ///
    /// # Errors
    /// As [`SessionPersistence::list`].
    fn summaries(&self) -> Result<Vec<crate::SessionSummary>> {
        crate::inspect::summaries(self)
    }

    /// The summary of one stored session (the `inspect` view: repair closers included).
    ///
    /// # Errors
    /// As [`SessionPersistence::inspect`].
    fn summary(&self, id: &str) -> Result<crate::SessionSummary> {
        crate::inspect::summary(self, id)
    }

    /// Forks a stored session into a new stored one seeded with its events through `at`
    /// (inclusive seq; `None` = all) and ending with `session/end-seed`; returns the new id.
    ///
    /// # Errors
    /// [`PersistenceError::NotFound`]; [`PersistenceError::InvalidArgument`] when `at` is past the
    /// end or the prefix ends inside an open turn; [`PersistenceError::Corruption`] when the
    /// prefix does not replay; write errors.
    fn fork(&self, id: &str, at: Option<u64>) -> Result<String> {
        crate::inspect::fork(self, id, at)
    }

    /// Stores a verified log ([`crate::VerifyReport`] without errors) under its header id,
    /// closers included (the repair a load would make); returns the id.
    ///
    /// # Errors
    /// [`PersistenceError::InvalidArgument`] for a report with errors, no header or no events;
    /// [`PersistenceError::AlreadyExists`]; write errors.
    fn import(&self, report: &crate::VerifyReport) -> Result<String> {
        crate::inspect::import(self, report)
    }

    /// Copies one stored session (its `inspect` view) into `to` under the same id and header.
    ///
    /// # Errors
    /// Load errors of this store; `create`/`append` errors of `to`.
    fn export(&self, id: &str, to: &dyn SessionPersistence) -> Result<()> {
        crate::inspect::export(self, id, to)
    }

    /// Verifies one stored session read-only, like `verify` of a file: the stored events are
    /// replayed through the session rules and the repair a load would make is reported.
    ///
    /// # Errors
    /// As [`SessionPersistence::inspect`] (a stored session that cannot be read at all).
    fn verify_stored(
        &self,
        id: &str,
        registry: &Arc<EventTypeRegistry>,
    ) -> Result<crate::VerifyReport> {
        crate::inspect::verify_stored(self, id, registry)
    }
}

/// A stored prefix as read by a backend: the header, the valid contiguous events, the revision,
/// and the torn-tail marker (JSONL: byte offset to truncate to; SQLite: first seq to delete).
#[derive(Debug, Clone)]
pub struct StoredPrefix {
    /// The stored header.
    pub header: SessionHeader,
    /// The valid contiguous events (`events[i].seq == i`).
    pub events: Vec<SessionEvent>,
    /// Revision of exactly this stored state.
    pub revision: Revision,
    /// `Some(marker)` iff there is a torn tail to cut before appending.
    pub torn_marker: Option<u64>,
    /// `Some(seq)` when the events from `seq` on were recovered from the torn tail itself (the
    /// complete records of a torn zstd frame): `adopt` re-appends them after cutting the tail.
    pub rewrite_from: Option<u64>,
}

/// The durable primitives a concrete backend supplies to [`Persistence`].
pub trait StorageBackend: Send + Sync + 'static {
    /// Backend name.
    fn name(&self) -> &'static str;
    /// Artifact location (no I/O).
    fn locate(&self, header: &SessionHeader) -> Option<SessionLocation>;
    /// Reads the stored prefix; `Ok(None)` when nothing is stored under `id`.
    ///
    /// # Errors
    /// `Corruption`, `FormatUnsupported` (header version), I/O/backend errors.
    fn load_stored(&self, id: &str) -> Result<Option<StoredPrefix>>;
    /// Whether anything is stored under `id` (cheap probe; default reads the prefix).
    ///
    /// # Errors
    /// I/O/backend errors.
    fn exists(&self, id: &str) -> Result<bool> {
        Ok(self.load_stored(id)?.is_some())
    }
    /// Appends a contiguous batch atomically and durably; materialises the session (header + batch)
    /// when nothing is stored yet. Must verify `events[0].seq` equals its stored next seq.
    ///
    /// # Errors
    /// `SeqMismatch`, `Locked`, I/O/backend errors (nothing partial stays stored).
    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>]) -> Result<()>;
    /// Takes the writer role for a loaded session (lock, cursor) and commits its cold repair:
    /// truncate at `prefix.torn_marker` if present, then append `closers` durably.
    ///
    /// # Errors
    /// `Locked`; `Conflict` when the stored revision changed since `prefix` was read; I/O/backend
    /// errors.
    fn adopt(&self, prefix: &StoredPrefix, closers: &[Arc<SessionEvent>]) -> Result<()>;
    /// Headers and revisions of every stored session.
    ///
    /// # Errors
    /// I/O/backend errors.
    fn list(&self) -> Result<Vec<SessionSnapshot>>;
    /// Releases per-session writer state (lock, open handles).
    fn release(&self, id: &str);
    /// The session's own folder (see [`SessionPersistence::session_dir`]); default none.
    fn session_dir(&self, header: &SessionHeader) -> Option<PathBuf> {
        let _ = header;
        None
    }
    /// Takes the writer lock of stored session `id`, then removes its data and its
    /// [`StorageBackend::session_dir`]; default: unsupported.
    ///
    /// # Errors
    /// `NotFound`, `Locked`, I/O/backend errors.
    fn delete(&self, id: &str) -> Result<()> {
        Err(PersistenceError::Backend {
            backend: self.name(),
            detail: format!("deleting session \"{id}\" is not supported by this backend"),
        })
    }
}

/// The shared [`SessionPersistence`] implementation over a [`StorageBackend`].
pub struct Persistence<B: StorageBackend> {
    backend: B,
    registry: Arc<EventTypeRegistry>,
    state: Mutex<SeamState>,
}

#[derive(Default)]
struct SeamState {
    /// Created in this process, nothing stored yet: header kept until the first append.
    pending: HashMap<String, SessionHeader>,
    /// Headers of sessions this process has written or loaded (skips re-reading for appends).
    headers: HashMap<String, SessionHeader>,
    /// Sessions written (appended) by this process since their create/load: never cold-repaired.
    live: HashSet<String>,
}

impl<B: StorageBackend> Persistence<B> {
    /// Wraps a backend; loads accept the types of [`EventTypeRegistry::shared_default`].
    pub fn new(backend: B) -> Self {
        Self::with_registry(backend, EventTypeRegistry::shared_default())
    }

    /// Wraps a backend; loads accept core types, ignorable events and the types of `registry`
    /// (use the kernel's `Arc<EventTypeRegistry>` service so plugin-declared types load).
    pub fn with_registry(backend: B, registry: Arc<EventTypeRegistry>) -> Self {
        Self {
            backend,
            registry,
            state: Mutex::new(SeamState::default()),
        }
    }

    /// The wrapped backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SeamState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read(&self, id: &str) -> Result<StoredPrefix> {
        let prefix = self
            .backend
            .load_stored(id)?
            .ok_or_else(|| PersistenceError::NotFound { id: id.to_owned() })?;
        if prefix.header.id != id {
            return Err(PersistenceError::corruption(
                id,
                Some(1),
                format!("stored header names session \"{}\"", prefix.header.id),
            ));
        }
        codec::check_known_types(
            &self.registry,
            id,
            &prefix.events,
            self.backend.locate(&prefix.header).map(|l| l.path),
        )?;
        Ok(prefix)
    }
}

impl<B: StorageBackend> SessionPersistence for Persistence<B> {
    fn name(&self) -> &'static str {
        self.backend.name()
    }

    fn locate(&self, header: &SessionHeader) -> Option<SessionLocation> {
        self.backend.locate(header)
    }

    fn create(&self, header: SessionHeader) -> Result<()> {
        validate_header(&header)?;
        let header = normalize_header(&header);
        let id = header.id.clone();
        {
            let st = self.lock();
            if st.pending.contains_key(&id) || st.headers.contains_key(&id) {
                return Err(PersistenceError::AlreadyExists { id });
            }
        }
        if self
            .backend
            .load_stored(&id)
            .map(|p| p.is_some())
            .unwrap_or(true)
        {
            // Stored (or unreadable: never shadow an existing artifact).
            return Err(PersistenceError::AlreadyExists { id });
        }
        let mut st = self.lock();
        if st.pending.contains_key(&id) || st.headers.contains_key(&id) {
            return Err(PersistenceError::AlreadyExists { id });
        }
        st.pending.insert(id, header);
        Ok(())
    }

    fn append(&self, id: &str, events: &[Arc<SessionEvent>]) -> Result<()> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        for (k, e) in events.iter().enumerate() {
            if e.seq != first.seq + k as u64 {
                return Err(PersistenceError::SeqMismatch {
                    id: id.to_owned(),
                    expected: first.seq + k as u64,
                    got: e.seq,
                });
            }
        }
        let header = {
            let st = self.lock();
            st.headers.get(id).or_else(|| st.pending.get(id)).cloned()
        };
        let header = match header {
            Some(h) => h,
            None => self.read(id)?.header,
        };
        self.backend.append_batch(&header, events)?;
        let mut st = self.lock();
        st.pending.remove(id);
        st.headers.insert(id.to_owned(), header);
        st.live.insert(id.to_owned());
        Ok(())
    }

    fn load(&self, id: &str) -> Result<LoadedSession> {
        let prefix = self.read(id)?;
        let closers = interrupted_turn_closers(&prefix.events);
        let live = self.lock().live.contains(id);
        if live {
            if !closers.is_empty() {
                return Err(PersistenceError::LiveOpenTurn { id: id.to_owned() });
            }
            return Ok(LoadedSession {
                header: prefix.header,
                events: prefix.events,
                repair: RepairReport::default(),
            });
        }
        let repair = RepairReport {
            torn_tail_dropped: prefix.torn_marker.is_some(),
            closers: closers.len(),
        };
        let shared: Vec<Arc<SessionEvent>> = closers.iter().cloned().map(Arc::new).collect();
        self.backend.adopt(&prefix, &shared)?;
        if repair.torn_tail_dropped {
            tracing::warn!(session = id, "dropped a torn final record");
        }
        let StoredPrefix {
            header, mut events, ..
        } = prefix;
        events.extend(closers);
        self.lock().headers.insert(id.to_owned(), header.clone());
        Ok(LoadedSession {
            header,
            events,
            repair,
        })
    }

    fn inspect(&self, id: &str) -> Result<LoadedSession> {
        let prefix = self.read(id)?;
        let closers = interrupted_turn_closers(&prefix.events);
        let repair = RepairReport {
            torn_tail_dropped: prefix.torn_marker.is_some(),
            closers: closers.len(),
        };
        let StoredPrefix {
            header, mut events, ..
        } = prefix;
        events.extend(closers);
        Ok(LoadedSession {
            header,
            events,
            repair,
        })
    }

    fn read_from(&self, id: &str, from_seq: u64) -> Result<Vec<SessionEvent>> {
        let prefix = self.read(id)?;
        let start = usize::try_from(from_seq)
            .unwrap_or(usize::MAX)
            .min(prefix.events.len());
        let mut events = prefix.events;
        Ok(events.split_off(start))
    }

    fn list_snapshots(&self) -> Result<Vec<SessionSnapshot>> {
        self.backend.list()
    }

    fn release(&self, id: &str) {
        {
            let mut st = self.lock();
            st.live.remove(id);
            st.headers.remove(id);
        }
        self.backend.release(id);
    }

    fn session_dir(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.backend.session_dir(header)
    }

    fn delete(&self, id: &str) -> Result<()> {
        // A session this process writes holds its backend lock, so the backend refuses it too.
        self.backend.delete(id)?;
        let mut st = self.lock();
        st.pending.remove(id);
        st.headers.remove(id);
        st.live.remove(id);
        Ok(())
    }
}

/// A shared, type-erased seam (what the plugin provides as a service).
pub type SharedPersistence = Arc<dyn SessionPersistence>;
