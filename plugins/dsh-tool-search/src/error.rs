//! The crate's error type, with stable `code()`s.
//!
//! Behaviour notes: `docs/tools.md` (tool errors become `isError` results carrying a code).

/// Errors of `dsh-tool-search`.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum SearchError {
    /// An argument failed validation (empty pattern, blank path, a negated or listed include).
    #[error("{0}")]
    #[code("SEARCH_INVALID_ARGS")]
    InvalidArgs(String),
    /// The regular expression or glob does not compile.
    #[error("invalid pattern: {0}")]
    #[code("SEARCH_INVALID_PATTERN")]
    InvalidPattern(String),
    /// The search path does not exist.
    #[error("path not found: {0}")]
    #[code("SEARCH_PATH_NOT_FOUND")]
    PathNotFound(String),
    /// The search path resolves outside the workspace root (after resolving `..` and symlinks).
    #[error("path {0} is outside the workspace")]
    #[code("SEARCH_PATH_OUTSIDE_WORKSPACE")]
    OutsideWorkspace(String),
    /// The glob tool was given a file instead of a directory.
    #[error("path {0} is not a directory")]
    #[code("SEARCH_NOT_A_DIRECTORY")]
    NotADirectory(String),
    /// The search was cancelled by the caller.
    #[error("search cancelled")]
    #[code("SEARCH_CANCELLED")]
    Cancelled,
    /// An I/O error on the workspace root itself.
    #[error("i/o error: {0}")]
    #[code("SEARCH_IO_ERROR")]
    Io(#[from] std::io::Error),
}
