//! The plugin's error type, [`RetryError`], with stable codes.

use dsh_kernel::KernelError;
use dsh_session::SessionError;

/// Every failure of `dsh-llm-retry` set-up. (Recovery itself never fails: a problem while
/// recovering leaves the request failure terminal and is logged.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetryError {
    /// A configured policy is invalid. Code `INVALID_RETRY_POLICY`.
    #[error("{path}: {reason}")]
    InvalidPolicy {
        /// Settings path of the offending field.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Declaring the `llm/retry` types with the session registry failed (another plugin owns
    /// the name). Code: the session error's code (`TYPE_REGISTRATION` family).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// A kernel registration failed. Code: the kernel's code.
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

impl RetryError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidPolicy { .. } => "INVALID_RETRY_POLICY",
            Self::Session(e) => e.code(),
            Self::Kernel(e) => e.code(),
        }
    }
}
