//! This crate's error type.

/// Errors of this crate; [`PermissionsError::code`](dsh_kernel::ErrorCode::code) is stable.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum PermissionsError {
    /// Not a preset name. Code `UNKNOWN_PERMISSION_MODE`.
    #[error(
        "unknown permission mode \"{0}\" (expected read-only, workspace-write or danger-full-access)"
    )]
    #[code("UNKNOWN_PERMISSION_MODE")]
    UnknownMode(String),
    /// Declaring `permission/preset` failed (another plugin owns the name). Code
    /// `EVENT_TYPE_REGISTRATION`.
    #[error("cannot declare permission/preset: {0}")]
    #[code("EVENT_TYPE_REGISTRATION")]
    Registration(String),
    /// Appending `permission/preset` to a session failed. Code `APPEND_FAILED`.
    #[error("cannot log permission/preset: {0}")]
    #[code("APPEND_FAILED")]
    Append(String),
}
