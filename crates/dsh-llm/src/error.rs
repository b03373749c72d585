//! The crate's error type, [`LlmError`], with stable codes and a conversion to the wire-level
//! [`LlmFailure`].
//!
//! See `docs/upstream/llm.md` ("Usage and failures"). Codes are the upstream
//! taxonomy (`NO_ADAPTER`, `DUPLICATE_ADAPTER`, `REGISTRATION_DISPOSED`, `UNKNOWN_MODEL`, …) plus
//! three the upstream throws as `LlmError` codes too (`INVALID_ADAPTER`,
//! `UNSUPPORTED_REASONING_EFFORT`) or as a plain `Error` (`INCOMPLETE_BLOCK`).

use dsh_kernel::KernelError;

use crate::chunk::{LlmFailure, codes};

/// Every failure this crate reports. [`LlmError::code`] is stable and SCREAMING_SNAKE.
///
/// Errors that reach a model stream are never returned to a consumer as `Err`: the service turns
/// them into a terminal `finish {error|aborted}` chunk whose failure is [`LlmError::to_failure`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// No adapter serves the provider route. Code `NO_ADAPTER`.
    #[error("no adapter registered for provider \"{provider}\"")]
    NoAdapter {
        /// The requested provider route.
        provider: String,
    },
    /// A registration (or `replace`) claimed a route another registration holds, or listed a
    /// route twice. Nothing was changed. Code `DUPLICATE_ADAPTER`.
    #[error("an adapter for provider \"{provider}\" is already registered")]
    DuplicateAdapter {
        /// The conflicting route.
        provider: String,
    },
    /// An initial registration with no routes, or an empty route name. Nothing was changed.
    /// Code `INVALID_ADAPTER`.
    #[error("invalid adapter registration: {reason}")]
    InvalidAdapter {
        /// What was wrong.
        reason: &'static str,
    },
    /// `replace` on a registration that was already released. Code `REGISTRATION_DISPOSED`.
    #[error("a disposed adapter registration cannot replace its routes")]
    RegistrationDisposed,
    /// The model is not in the route's catalog. Code `UNKNOWN_MODEL`.
    #[error("provider \"{provider}\" does not list model \"{model}\"")]
    UnknownModel {
        /// Provider route.
        provider: String,
        /// Model id.
        model: String,
    },
    /// An explicit reasoning effort the exact model does not declare (no clamping, no aliasing).
    /// Code `UNSUPPORTED_REASONING_EFFORT`.
    #[error(
        "provider \"{provider}\" model \"{model}\" does not support reasoning effort \"{effort}\""
    )]
    UnsupportedReasoningEffort {
        /// Provider route.
        provider: String,
        /// Model id.
        model: String,
        /// The rejected effort id.
        effort: String,
    },
    /// A prepared call was dispatched twice, or with a config other than the prepared one.
    /// Code `INVALID_PREPARED_CALL`.
    #[error("invalid prepared call: {reason}")]
    InvalidPreparedCall {
        /// What was wrong.
        reason: &'static str,
    },
    /// The assembler was asked to assemble a block of a type it cannot build from deltas that no
    /// `block-end` closed. Code `INCOMPLETE_BLOCK`.
    #[error("cannot assemble incomplete block of type \"{block_type}\" at index {index}")]
    IncompleteBlock {
        /// The block's stream index.
        index: u32,
        /// Its `blockType`.
        block_type: String,
    },
    /// A kernel registration failed (e.g. the owning scope is disposing). Code: the kernel's code
    /// (e.g. `INACTIVE_SCOPE`).
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// A failure reported by an adapter (e.g. from model discovery). Code: the failure's code.
    #[error("{0}")]
    Provider(LlmFailure),
}

impl LlmError {
    /// The stable, machine-readable code (see [`codes`]; `Kernel` and `Provider` forward theirs).
    ///
    /// Hand-written rather than `#[derive(dsh_kernel::ErrorCode)]`: a `Provider` failure carries
    /// the adapter's code as an owned string (`LlmFailure::code`), so this code borrows from
    /// `self` instead of being `&'static str`.
    pub fn code(&self) -> &str {
        match self {
            Self::NoAdapter { .. } => codes::NO_ADAPTER,
            Self::DuplicateAdapter { .. } => codes::DUPLICATE_ADAPTER,
            Self::InvalidAdapter { .. } => codes::INVALID_ADAPTER,
            Self::RegistrationDisposed => codes::REGISTRATION_DISPOSED,
            Self::UnknownModel { .. } => codes::UNKNOWN_MODEL,
            Self::UnsupportedReasoningEffort { .. } => codes::UNSUPPORTED_REASONING_EFFORT,
            Self::IncompleteBlock { .. } => codes::INCOMPLETE_BLOCK,
            Self::InvalidPreparedCall { .. } => codes::INVALID_PREPARED_CALL,
            Self::Kernel(e) => dsh_kernel::ErrorCode::code(e),
            Self::Provider(f) => &f.code,
        }
    }

    /// The wire failure carrying this error: `{message: <Display>, code: <code()>}`; a
    /// `Provider` error yields its failure unchanged (status, retry-after, request id kept).
    pub fn to_failure(&self) -> LlmFailure {
        match self {
            Self::Provider(f) => f.clone(),
            other => LlmFailure::new(other.code(), other.to_string()),
        }
    }
}

impl From<LlmError> for LlmFailure {
    fn from(e: LlmError) -> Self {
        match e {
            LlmError::Provider(f) => f,
            other => other.to_failure(),
        }
    }
}

impl From<&LlmError> for LlmFailure {
    fn from(e: &LlmError) -> Self {
        e.to_failure()
    }
}

impl From<LlmFailure> for LlmError {
    fn from(f: LlmFailure) -> Self {
        Self::Provider(f)
    }
}
