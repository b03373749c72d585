//! Everything the sandbox seam can refuse ([`SandboxError`]).

use crate::SandboxMode;

/// The fixed upstream message of [`SandboxError::Unavailable`] for `mode` (without the
/// ` Runner failure: …` tail); see `docs/upstream/sandbox.md` ("Fail closed").
pub fn unavailable_message(mode: SandboxMode) -> String {
    format!(
        "sandbox mode \"{}\" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing kernel (Linux), ensure sandbox-exec is usable (macOS), or ensure the ACL restricted-token runner can start (Windows) \u{2014} otherwise switch the consumer to danger-full-access.",
        mode.as_str()
    )
}

/// Everything the sandbox seam can refuse. Each variant has a stable code
/// ([`dsh_kernel::ErrorCode`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum SandboxError {
    /// No runner can confine a command under `mode` (none registered, every probe failed, the
    /// runner could not be started, or it reported its own failure): the command was not run
    /// and is never run unconfined. Code `SANDBOX_UNAVAILABLE`. Text: [`unavailable_message`]
    /// then ` Runner failure: <detail>` when a detail is known.
    #[error("{}{}", unavailable_message(*mode), detail.as_ref().map(|d| format!(" Runner failure: {d}")).unwrap_or_default())]
    #[code("SANDBOX_UNAVAILABLE")]
    Unavailable {
        /// The mode that was asked for.
        mode: SandboxMode,
        /// Why (a probe's, a spawn's or the runner's own failure line), when known.
        detail: Option<String>,
    },
    /// `confine` was asked for `danger-full-access`, which never confines. Code
    /// `SANDBOX_NOT_CONFINED`.
    #[error("danger-full-access is never confined; run the command directly")]
    #[code("SANDBOX_NOT_CONFINED")]
    NotConfined,
    /// An escalation request was malformed or not wider than the mode in force (see
    /// [`crate::validate_escalation`]). Code `INVALID_ESCALATION`.
    #[error("{0}")]
    #[code("INVALID_ESCALATION")]
    InvalidEscalation(String),
}

impl SandboxError {
    /// The error-info name upstream records for this error (`SandboxUnavailableError` for
    /// [`SandboxError::Unavailable`], else `SandboxError`).
    pub fn info_name(&self) -> &'static str {
        match self {
            Self::Unavailable { .. } => "SandboxUnavailableError",
            _ => "SandboxError",
        }
    }
}
