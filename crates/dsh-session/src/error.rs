//! The one error type of dsh-session, [`SessionError`], with a stable [`SessionError::code`] per
//! failure class. Every rejected append or load leaves the log unchanged.
//!
//! See `docs/upstream/session.md` ("Append contract", "Seeds, fork, end-seed", "Session store").

use crate::invariants::Violation;

/// Everything dsh-session can refuse. Each variant has a distinct [`SessionError::code`].
#[derive(Debug, Clone, PartialEq, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum SessionError {
    /// An event or record is not well-formed: not a JSON object, a missing/ill-typed envelope
    /// field, a core payload that does not match its type's shape, or payload fields dsh would
    /// lose on re-serialization. Code `MALFORMED_EVENT`.
    #[error("malformed event{}: {message}", at_seq(*seq))]
    #[code("MALFORMED_EVENT")]
    MalformedEvent {
        /// The seq of the offending event, when known.
        seq: Option<u64>,
        /// What is wrong (serde's message or a description).
        message: String,
    },
    /// The event's `seq` is not the log length (`seq == index` contract). Code `SEQ_GAP`.
    #[error("seq gap: expected seq {expected}, got {got}")]
    #[code("SEQ_GAP")]
    SeqGap {
        /// The seq the log expects next (= its length).
        expected: u64,
        /// The seq the event carried.
        got: u64,
    },
    /// The event type is neither core, registered, nor marked `ignorable`.
    /// Code `UNKNOWN_EVENT_TYPE` (upstream `SessionFormatUnsupportedError`).
    #[error("unknown event type `{kind}` (not registered and not ignorable)")]
    #[code("UNKNOWN_EVENT_TYPE")]
    UnknownEventType {
        /// The type name.
        kind: String,
    },
    /// A type that is refused outright (legacy `request/header-delta`), or `session/end-seed`
    /// written by anyone but the session constructor. Code `FORBIDDEN_EVENT_TYPE`.
    #[error("event type `{kind}` is not allowed here: {message}")]
    #[code("FORBIDDEN_EVENT_TYPE")]
    ForbiddenEventType {
        /// The type name.
        kind: String,
        /// Why.
        message: String,
    },
    /// Event data is not lossless JSON: a non-finite float, `-0`, or an integer outside
    /// ±(2^53−1). Code `NON_LOSSLESS_DATA`.
    #[error("event data is not lossless JSON at {path}: {message}")]
    #[code("NON_LOSSLESS_DATA")]
    NonLosslessData {
        /// JSON-pointer-like path of the offending value inside `data` (`/content/0/...`).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A surface type (`user/message`, `assistant/message`, `tool/result`) was appended without
    /// a `SurfaceIntent`. Code `MISSING_SURFACE_INTENT`.
    #[error("event type `{kind}` is a surface type and requires a SurfaceIntent")]
    #[code("MISSING_SURFACE_INTENT")]
    MissingSurfaceIntent {
        /// The type name.
        kind: String,
    },
    /// A non-surface type carried surface metadata (`surfaceOp` / `sourceEventSeqs`).
    /// Code `UNEXPECTED_SURFACE_INTENT`.
    #[error("event type `{kind}` is not a surface type and must not carry surface metadata")]
    #[code("UNEXPECTED_SURFACE_INTENT")]
    UnexpectedSurfaceIntent {
        /// The type name.
        kind: String,
    },
    /// `sourceEventSeqs` is invalid: a duplicate, a seq not earlier than the event, or an empty
    /// list on a type other than `assistant/message`. Code `BAD_PROVENANCE`.
    #[error("bad sourceEventSeqs: {message}")]
    #[code("BAD_PROVENANCE")]
    BadProvenance {
        /// What is wrong.
        message: String,
    },
    /// A `replace` surface op is invalid: an end that is not a current surface node, a start
    /// positioned after its end, or a shadowed node missing from `sourceEventSeqs`.
    /// Code `BAD_SURFACE_OP`.
    #[error("bad surface op: {message}")]
    #[code("BAD_SURFACE_OP")]
    BadSurfaceOp {
        /// What is wrong.
        message: String,
    },
    /// The session invariants (turn/step numbering, enclosure, tool pairing) would be broken.
    /// Only checked in debug builds on append, always on restore/validation helpers.
    /// Code `INVARIANT_VIOLATION`.
    #[error("invariant violation: {0}")]
    #[code("INVARIANT_VIOLATION")]
    Invariant(Violation),
    /// `append` was called from a `session/event` observer of the same session while the
    /// publication boundary is open. Code `REENTRANT_APPEND`.
    #[error("reentrant append during session/event publication")]
    #[code("REENTRANT_APPEND")]
    ReentrantAppend,
    /// A header is invalid (version other than 0, relative `cwd`, unsafe `createdAt`) or the
    /// format version is unsupported. Code `FORMAT_UNSUPPORTED`.
    #[error("unsupported session format: {message}")]
    #[code("FORMAT_UNSUPPORTED")]
    FormatUnsupported {
        /// What is wrong.
        message: String,
    },
    /// A packed chunk row is malformed (bad lengths, unknown shape). Code `MALFORMED_PACKED_ROW`.
    #[error("malformed packed row: {message}")]
    #[code("MALFORMED_PACKED_ROW")]
    MalformedPackedRow {
        /// What is wrong.
        message: String,
    },
    /// A store operation named a session id that is already live. Code `DUPLICATE_SESSION`.
    #[error("session `{id}` already exists")]
    #[code("DUPLICATE_SESSION")]
    DuplicateSession {
        /// The id.
        id: String,
    },
    /// A store operation named a session id that is not live. Code `SESSION_NOT_FOUND`.
    #[error("session `{id}` not found")]
    #[code("SESSION_NOT_FOUND")]
    SessionNotFound {
        /// The id.
        id: String,
    },
    /// `fork` was asked for a boundary past the log end, or a prefix that ends inside an open
    /// turn. Code `BAD_FORK_BOUNDARY`.
    #[error("bad fork boundary: {message}")]
    #[code("BAD_FORK_BOUNDARY")]
    BadForkBoundary {
        /// What is wrong.
        message: String,
    },
    /// A plugin tried to register an event type that is core or already registered by another
    /// plugin, or a plugin validator rejected a payload. Code `EVENT_TYPE_REGISTRATION`.
    #[error("event type registration failed for `{kind}`: {message}")]
    #[code("EVENT_TYPE_REGISTRATION")]
    Registration {
        /// The type name.
        kind: String,
        /// What is wrong.
        message: String,
    },
    /// A registered plugin type's validator refused the payload. Code `INVALID_PLUGIN_PAYLOAD`.
    #[error("payload of `{kind}` refused by its validator: {message}")]
    #[code("INVALID_PLUGIN_PAYLOAD")]
    InvalidPluginPayload {
        /// The type name.
        kind: String,
        /// The validator's message.
        message: String,
    },
    /// A `session/created` listener vetoed the creation, or a `session/flush` listener failed.
    /// Code `LISTENER_FAILED`.
    #[error("listener failed: {message}")]
    #[code("LISTENER_FAILED")]
    Listener {
        /// The listener error(s), rendered.
        message: String,
    },
}

fn at_seq(seq: Option<u64>) -> String {
    seq.map(|s| format!(" at seq {s}")).unwrap_or_default()
}

impl SessionError {
    /// The stable code, the same as [`dsh_kernel::ErrorCode::code`]. Kept while crates
    /// outside this one still call `code()` without the trait in scope; prefer the trait.
    pub fn code(&self) -> &'static str {
        dsh_kernel::ErrorCode::code(self)
    }

    pub(crate) fn malformed(seq: Option<u64>, message: impl Into<String>) -> Self {
        Self::MalformedEvent {
            seq,
            message: message.into(),
        }
    }
}
