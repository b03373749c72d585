//! Everything dsh-approval can refuse ([`ApprovalError`]).

/// Everything dsh-approval can refuse. Each variant has a stable code ([`dsh_kernel::ErrorCode`]).
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum ApprovalError {
    /// `request` was called while the caller's session has no open turn; nothing was appended.
    /// Code `NO_OPEN_TURN`.
    #[error("approval requires an open turn in session {session}")]
    #[code("NO_OPEN_TURN")]
    NoOpenTurn {
        /// The session id.
        session: String,
    },
    /// Appending an audit event to the session failed. Code `SESSION_APPEND`.
    #[error("approval could not append `{event}`: {message}")]
    #[code("SESSION_APPEND")]
    Append {
        /// The event type.
        event: &'static str,
        /// The session error text.
        message: String,
        /// The session error code.
        code: &'static str,
    },
    /// Registering the service or its event types failed. Code `REGISTRATION`.
    #[error("approval plugin registration failed: {message}")]
    #[code("REGISTRATION")]
    Registration {
        /// What failed.
        message: String,
    },
}
