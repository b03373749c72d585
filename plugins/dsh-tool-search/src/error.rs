//! The crate's error type, with stable `code()`s.
//!
//! Behaviour notes: `docs/tools.md` (tool errors become `isError` results carrying a code).

/// Errors of `dsh-tool-search`.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// An argument failed validation (empty pattern, blank path, a negated or listed include).
    #[error("{0}")]
    InvalidArgs(String),
    /// The regular expression or glob does not compile.
    #[error("invalid pattern: {0}")]
    InvalidPattern(String),
    /// The search path does not exist.
    #[error("path not found: {0}")]
    PathNotFound(String),
    /// The search path resolves outside the workspace root (after resolving `..` and symlinks).
    #[error("path {0} is outside the workspace")]
    OutsideWorkspace(String),
    /// The glob tool was given a file instead of a directory.
    #[error("path {0} is not a directory")]
    NotADirectory(String),
    /// The search was cancelled by the caller.
    #[error("search cancelled")]
    Cancelled,
    /// An I/O error on the workspace root itself.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl SearchError {
    /// A stable SCREAMING_SNAKE code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidArgs(_) => "SEARCH_INVALID_ARGS",
            Self::InvalidPattern(_) => "SEARCH_INVALID_PATTERN",
            Self::PathNotFound(_) => "SEARCH_PATH_NOT_FOUND",
            Self::OutsideWorkspace(_) => "SEARCH_PATH_OUTSIDE_WORKSPACE",
            Self::NotADirectory(_) => "SEARCH_NOT_A_DIRECTORY",
            Self::Cancelled => "SEARCH_CANCELLED",
            Self::Io(_) => "SEARCH_IO_ERROR",
        }
    }
}
