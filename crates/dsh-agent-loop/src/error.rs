//! The loop's own error type, [`LoopError`]: every failure the agent loop itself reports, as
//! opposed to provider failures (an [`LlmFailure`] from the model stream, which ends a turn
//! unchanged).
//!
//! A turn that fails for a loop reason ends with `turn/end {"reason":{"kind":"error","error":
//! {"message","code"}}}` (the shape in `docs/formats.md`), where `code` is the variant's code
//! below and `message` its `Display` text, and `agent/error` carries the same failure. Upstream
//! flattens every such failure to code `UNKNOWN`; dsh records one code per failure class.

use dsh_agent::{AgentError, InboxError};
use dsh_kernel::{BoxError, ErrorCode, KernelError};
use dsh_llm::{LlmError, LlmFailure};
use dsh_session::SessionError;
use dsh_tools::ToolsError;

/// Every failure of the agent loop itself. Each variant has a stable code
/// ([`dsh_kernel::ErrorCode`]); the turn-time ones end the turn with that code (see the module
/// docs), the others are returned by agent creation and resume.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum LoopError {
    /// A service the loop needs is not provided (creation, resume). Code `MISSING_SERVICE`.
    #[error("the agent loop needs the `{0}` service (link its crate)")]
    #[code("MISSING_SERVICE")]
    MissingService(&'static str),
    /// No persistence is configured, so nothing can be resumed. Code `NO_PERSISTENCE`.
    #[error("cannot resume `{0}`: no session persistence is configured")]
    #[code("NO_PERSISTENCE")]
    NoPersistence(String),
    /// Appending an event of the turn (`step/start`, `user/message`, `assistant/chunk`,
    /// `assistant/message`, `request/header`, …) to the session log failed.
    /// Code `SESSION_APPEND_FAILED`.
    #[error("session append failed: {0}")]
    #[code("SESSION_APPEND_FAILED")]
    SessionAppend(#[source] SessionError),
    /// Claiming the turn's or step's input from the agent inbox failed (the claim could not be
    /// logged). Code `INBOX_CLAIM_FAILED`.
    #[error("inbox claim failed: {0}")]
    #[code("INBOX_CLAIM_FAILED")]
    InboxClaim(#[source] InboxError),
    /// Assembling the system prompt failed (a section, context or variable error, or an
    /// `system-prompt/assemble` listener error). Code `PROMPT_ASSEMBLY_FAILED`.
    #[error("system prompt assembly failed: {0}")]
    #[code("PROMPT_ASSEMBLY_FAILED")]
    PromptAssembly(#[source] BoxError),
    /// An `agent/request` listener returned an error (middleware errors skip request-error
    /// recovery). Code `REQUEST_LISTENER_FAILED`.
    #[error("agent/request listener failed: {0}")]
    #[code("REQUEST_LISTENER_FAILED")]
    RequestListener(#[source] BoxError),
    /// An `agent/turn-stopping` listener returned an error. Code `TURN_STOPPING_FAILED`.
    #[error("agent/turn-stopping listener failed: {0}")]
    #[code("TURN_STOPPING_FAILED")]
    TurnStopping(#[source] KernelError),
    /// The streamed chunks could not be assembled into the assistant message (a block no
    /// `block-end` closed, of a type the assembler cannot build). Code `MESSAGE_ASSEMBLY_FAILED`.
    #[error("assistant message assembly failed: {0}")]
    #[code("MESSAGE_ASSEMBLY_FAILED")]
    MessageAssembly(#[source] LlmError),
    /// The tool scheduler failed as a whole (not one call: a failed call is a `tool/result`).
    /// Code `TOOL_SCHEDULER_FAILED`.
    #[error("tool scheduler failed: {0}")]
    #[code("TOOL_SCHEDULER_FAILED")]
    ToolScheduler(#[source] ToolsError),
    /// A context a tool hook added could not be queued for the next step.
    /// Code `CONTEXT_INJECTION_FAILED`.
    #[error("queuing a tool hook's context failed: {0}")]
    #[code("CONTEXT_INJECTION_FAILED")]
    ContextInjection(#[source] AgentError),
    /// A plugin (a listener, a tool body outside the pipeline's own containment) panicked
    /// during the turn; the payload's text when it is a string. Code `PLUGIN_PANICKED`.
    #[error("a plugin panicked during the turn: {0}")]
    #[code("PLUGIN_PANICKED")]
    PluginPanicked(String),
}

impl LoopError {
    /// The failure recorded in `turn/end` and `agent/error` for this error:
    /// `{message: <Display>, code: <code>}`, with no status, retry-after or request id.
    pub fn to_failure(&self) -> LlmFailure {
        LlmFailure::new(self.code(), self.to_string())
    }
}

impl From<SessionError> for LoopError {
    fn from(e: SessionError) -> Self {
        Self::SessionAppend(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_carry_code_and_display() {
        let e = LoopError::PluginPanicked("boom".into());
        assert_eq!(
            e.to_failure(),
            LlmFailure::new("PLUGIN_PANICKED", "a plugin panicked during the turn: boom")
        );
        let e = LoopError::from(SessionError::ReentrantAppend);
        assert_eq!(e.code(), "SESSION_APPEND_FAILED");
        assert_eq!(
            e.to_failure().message,
            "session append failed: reentrant append during session/event publication"
        );
        assert_eq!(
            LoopError::MissingService("AgentRegistry").code(),
            "MISSING_SERVICE"
        );
        assert_eq!(
            LoopError::NoPersistence("s".into()).code(),
            "NO_PERSISTENCE"
        );
        assert_eq!(
            LoopError::RequestListener("x".into()).code(),
            "REQUEST_LISTENER_FAILED"
        );
        assert_eq!(
            LoopError::PromptAssembly("x".into()).code(),
            "PROMPT_ASSEMBLY_FAILED"
        );
    }
}
