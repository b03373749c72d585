//! The one error type of `dsh-persistence`, [`PersistenceError`], with stable codes.
//!
//! Behaviour: `docs/persistence.md` ("Errors"). Corruption (damage in the committed prefix)
//! and format-unsupported (intact log this build cannot interpret) are distinct variants; every
//! other failure names its session and, for I/O, the path and operation.

use std::path::PathBuf;
use std::sync::Arc;

/// Why a stored session cannot be interpreted by this build (upstream
/// `SessionFormatUnsupportedError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnsupportedReason {
    /// The header's format version is greater than [`crate::SESSION_FORMAT_VERSION`]: the log was
    /// written by a newer harness; upgrade to open it.
    NewerVersion {
        /// The stored format version.
        version: u64,
    },
    /// The header's format version is lower than [`crate::SESSION_FORMAT_VERSION`] and this build
    /// ships no upgrade path.
    OlderVersion {
        /// The stored format version.
        version: u64,
    },
    /// An event type unknown to this build, not marked `ignorable`.
    UnknownEventType {
        /// The unknown event type string.
        event_type: String,
        /// Its seq in the log.
        seq: u64,
    },
}

impl std::fmt::Display for UnsupportedReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = crate::SESSION_FORMAT_VERSION;
        match self {
            Self::NewerVersion { version } => write!(
                f,
                "uses log format v{version}, but this harness reads only v{current}: the log was written by a newer harness — upgrade the harness to open it"
            ),
            Self::OlderVersion { version } => write!(
                f,
                "uses log format v{version}, older than the supported v{current}, and this build ships no upgrade path for it"
            ),
            Self::UnknownEventType { event_type, seq } => write!(
                f,
                "contains event type \"{event_type}\" at seq {seq}, unknown to this build and not marked ignorable"
            ),
        }
    }
}

/// Every failure of the persistence seam, the write coordinator and the backends.
///
/// `code()` returns a stable SCREAMING_SNAKE string for each variant. The type is `Clone` so a
/// retained background write failure can be surfaced on every later flush.
#[derive(Debug, Clone, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum PersistenceError {
    /// Damage in the committed prefix of a stored log: a malformed record that is not the torn final
    /// record, a seq gap, a missing/invalid header, or an invalid packed row. Never repaired silently.
    #[error("corrupt session log \"{id}\"{}: {detail}", line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    #[code("SESSION_PERSISTENCE_CORRUPTION")]
    Corruption {
        /// The session id.
        id: String,
        /// 1-based physical line (JSONL) or row seq (SQLite) of the defect, when known.
        line: Option<u64>,
        /// What is wrong.
        detail: String,
    },
    /// The stored log is intact but cannot be interpreted by this build.
    #[error("session \"{id}\" {reason}{}", location.as_ref().map(|p| format!(" (raw log: {})", p.display())).unwrap_or_default())]
    #[code("SESSION_FORMAT_UNSUPPORTED")]
    FormatUnsupported {
        /// The session id.
        id: String,
        /// Newer/older version or unknown event type.
        reason: UnsupportedReason,
        /// The raw artifact path, for file backends.
        location: Option<PathBuf>,
    },
    /// No stored (appended) session with this id.
    #[error("session \"{id}\" not found")]
    #[code("SESSION_NOT_FOUND")]
    NotFound {
        /// The session id.
        id: String,
    },
    /// `create` for an id that already exists (stored, or created in this process).
    #[error("session \"{id}\" already exists")]
    #[code("SESSION_ALREADY_EXISTS")]
    AlreadyExists {
        /// The session id.
        id: String,
    },
    /// `append` whose first seq is not the stored next seq, or a batch whose seqs are not
    /// contiguous.
    #[error("session \"{id}\": append expected seq {expected}, got {got}")]
    #[code("SESSION_SEQ_MISMATCH")]
    SeqMismatch {
        /// The session id.
        id: String,
        /// The next seq the store expects.
        expected: u64,
        /// The seq offered.
        got: u64,
    },
    /// An invalid [`crate::SessionHeader`] (negative/unsafe `createdAt`, relative `cwd`, bad
    /// `origin`, retired fields) or an id that does not match.
    #[error("invalid session header: {detail}")]
    #[code("SESSION_INVALID_HEADER")]
    InvalidHeader {
        /// What is wrong.
        detail: String,
    },
    /// An argument outside the accepted domain (empty path segment, bad `read_from` seq, …).
    #[error("invalid argument: {detail}")]
    #[code("INVALID_ARGUMENT")]
    InvalidArgument {
        /// What is wrong.
        detail: String,
    },
    /// An event that cannot be stored (e.g. data not representable, packed-row codec refused it).
    #[error("session \"{id}\": cannot store event \"{event_type}\": {detail}")]
    #[code("SESSION_INVALID_EVENT")]
    InvalidEvent {
        /// The session id.
        id: String,
        /// The offending event's type.
        event_type: String,
        /// What is wrong.
        detail: String,
    },
    /// Another writer (this or another process) holds the session's lock file.
    #[error("session \"{id}\" is locked by another writer ({})", path.display())]
    #[code("SESSION_LOCKED")]
    Locked {
        /// The session id.
        id: String,
        /// The lock file path.
        path: PathBuf,
    },
    /// The stored session changed between reading it and taking the writer role (another writer).
    #[error("session \"{id}\" changed concurrently while being loaded")]
    #[code("SESSION_PERSISTENCE_CONFLICT")]
    Conflict {
        /// The session id.
        id: String,
    },
    /// `load` of a session that is live in this process and has an open turn.
    #[error("session \"{id}\" is live with an open turn; live sessions are never repaired")]
    #[code("SESSION_LIVE_OPEN_TURN")]
    LiveOpenTurn {
        /// The session id.
        id: String,
    },
    /// Filesystem failure; the committed prefix is unchanged (appends truncate back).
    #[error("{op} {}: {source}", path.display())]
    #[code("SESSION_PERSISTENCE_IO")]
    Io {
        /// The failed operation (`"open"`, `"append"`, `"fsync"`, …).
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A backend-specific failure with its message.
    #[error("{backend} backend: {detail}")]
    #[code("SESSION_PERSISTENCE_BACKEND")]
    Backend {
        /// Backend name.
        backend: &'static str,
        /// The backend's message.
        detail: String,
    },
    /// The coordinator or backend was closed; no more admission.
    #[error("session persistence is closed")]
    #[code("SESSION_PERSISTENCE_CLOSED")]
    Closed,
    /// The `backend` setting names no registered backend.
    #[error("unknown session persistence backend `{name}` (registered: {})", if registered.is_empty() { "none".to_owned() } else { registered.join(", ") })]
    #[code("SESSION_PERSISTENCE_UNKNOWN_BACKEND")]
    UnknownBackend {
        /// The configured name.
        name: String,
        /// The registered backend names, sorted.
        registered: Vec<String>,
    },
    /// Persistence is off (`backend = "none"` or no sessions directory configured).
    #[error("session persistence is off")]
    #[code("SESSION_PERSISTENCE_DISABLED")]
    Disabled,
    /// No registered backend recognizes a session file.
    #[error("{} is not a session file of any registered backend (registered: {})", path.display(), registered.join(", "))]
    #[code("SESSION_FILE_UNRECOGNIZED")]
    UnrecognizedFile {
        /// The file.
        path: PathBuf,
        /// The registered backend names, sorted.
        registered: Vec<String>,
    },
}

impl PersistenceError {
    /// Builds an [`PersistenceError::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source: Arc::new(source),
        }
    }

    /// Builds a [`PersistenceError::Corruption`].
    pub fn corruption(id: &str, line: Option<u64>, detail: impl Into<String>) -> Self {
        Self::Corruption {
            id: id.to_owned(),
            line,
            detail: detail.into(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = PersistenceError> = std::result::Result<T, E>;
