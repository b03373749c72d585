//! [`CompactionError`]: every way a compaction attempt fails, with stable codes.
//!
//! See docs/upstream/compaction.md (Service API): upstream's manual-compaction error codes are
//! `busy | cancelled | changed | summary | commit | persistence`.

use dsh_session::SessionError;

/// A failed compaction attempt. `BUSY`, `INVALID_REGION` and `CONFIG` are refused before
/// anything is written; `CANCELLED`, `CHANGED` and `SUMMARY` after a `compaction/start` was
/// written (the caller closes the bracket with `compaction/end {error}`); `COMMIT` means the
/// summary had started to land; `PERSISTENCE` that the log was written but could not be flushed.
#[derive(Debug, Clone, PartialEq, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum CompactionError {
    /// Another compaction holds the lock (a live unmatched `compaction/start`), or the agent is
    /// running a turn (manual compaction needs an idle agent). Code `BUSY`.
    #[error("compaction is busy: {reason}")]
    #[code("BUSY")]
    Busy {
        /// Why (the lock's `compactionId` and seq, or "a turn is running").
        reason: String,
    },
    /// The signal fired before the summary was committed. Code `CANCELLED`.
    #[error("compaction cancelled")]
    #[code("CANCELLED")]
    Cancelled,
    /// The surface changed under the summarisation call (the selected span is no longer the
    /// same nodes, or for automatic compaction any priced node changed). Code `CHANGED`.
    #[error("the session changed while compacting: {reason}")]
    #[code("CHANGED")]
    Changed {
        /// What changed.
        reason: String,
    },
    /// The summary could not be produced or was refused: the model call failed (`code` is its
    /// failure code, e.g. `MAX_TOKENS`, `UNSUPPORTED_CONTENT`), its text was empty, or the
    /// checkpoint is not smaller than what it replaces (`SUMMARY_NOT_SMALLER`). Code `SUMMARY`.
    #[error("compaction summary failed ({code}): {message}")]
    #[code("SUMMARY")]
    Summary {
        /// The failure code.
        code: String,
        /// The failure message.
        message: String,
    },
    /// Appending the summary, the replacement or the end event failed. Code `COMMIT`.
    #[error("compaction commit failed: {0}")]
    #[code("COMMIT")]
    Commit(#[source] SessionError),
    /// The compaction was logged but the session could not be flushed to storage.
    /// Code `PERSISTENCE`.
    #[error("compaction was not persisted: {message}")]
    #[code("PERSISTENCE")]
    Persistence {
        /// The flush failure.
        message: String,
    },
    /// An explicit region is not compactable: an edge is not a current surface node, the edges
    /// are reversed, a cut separates a tool call from its result or ends inside an open step,
    /// or no open turn owns it. Code `INVALID_REGION`.
    #[error("invalid compaction region: {message}")]
    #[code("INVALID_REGION")]
    InvalidRegion {
        /// What is wrong.
        message: String,
    },
    /// The policy cannot run: no known context window, no summarisation route, an invalid
    /// setting. Code `CONFIG`.
    #[error("compaction is not configured: {message}")]
    #[code("CONFIG")]
    Config {
        /// What is missing or wrong.
        message: String,
    },
}

impl CompactionError {
    /// Upstream's lowercase manual-compaction error code: `busy`, `cancelled`, `changed`,
    /// `summary`, `commit`, `persistence`; `INVALID_REGION` and `CONFIG`, which upstream's
    /// manual path has no code for, are `region` and `config`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Busy { .. } => "busy",
            Self::Cancelled => "cancelled",
            Self::Changed { .. } => "changed",
            Self::Summary { .. } => "summary",
            Self::Commit(_) => "commit",
            Self::Persistence { .. } => "persistence",
            Self::InvalidRegion { .. } => "region",
            Self::Config { .. } => "config",
        }
    }

    /// A `SUMMARY` error.
    pub fn summary(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Summary {
            code: code.into(),
            message: message.into(),
        }
    }

    /// An `INVALID_REGION` error.
    pub fn region(message: impl Into<String>) -> Self {
        Self::InvalidRegion {
            message: message.into(),
        }
    }
}
