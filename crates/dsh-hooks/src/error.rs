//! This crate's error type.

/// Errors of this crate; [`HooksError::code`](dsh_kernel::ErrorCode::code) is stable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum HooksError {
    /// A hook file that cannot be read, is not JSON, has the wrong shape or holds a matcher
    /// that does not compile: none of its hooks are registered. `entry` is the JSON path of the
    /// offending entry (`hooks.PreToolUse[1].matcher`; empty for the whole file). Code
    /// `HOOK_FILE_INVALID`.
    #[error("{file}: {}{message}", if entry.is_empty() { String::new() } else { format!("{entry}: ") })]
    #[code("HOOK_FILE_INVALID")]
    File {
        /// The file as configured (made absolute).
        file: String,
        /// The offending entry's path in the file (empty: the file itself).
        entry: String,
        /// What is wrong.
        message: String,
    },
}
