//! The plugin's error type, [`RetryError`], with stable codes.

use dsh_kernel::KernelError;
use dsh_session::SessionError;

/// Every failure of `dsh-llm-retry` set-up. (Recovery itself never fails: a problem while
/// recovering leaves the request failure terminal and is logged.)
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum RetryError {
    /// A configured policy is invalid. Code `INVALID_RETRY_POLICY`.
    #[error("{path}: {reason}")]
    #[code("INVALID_RETRY_POLICY")]
    InvalidPolicy {
        /// Settings path of the offending field.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Declaring the `llm/retry` types with the session registry failed (another plugin owns
    /// the name). Code: the session error's code (`TYPE_REGISTRATION` family).
    #[error(transparent)]
    #[code(transparent)]
    Session(#[from] SessionError),
    /// A kernel registration failed. Code: the kernel's code.
    #[error(transparent)]
    #[code(transparent)]
    Kernel(#[from] KernelError),
}
