//! Errors of this crate ([`ContextError`]).

use dsh_system_prompt::PromptError;

/// Errors of this crate, each with a stable code ([`dsh_kernel::ErrorCode`]).
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum ContextError {
    /// The plugin needs the `SystemPrompt` service (link dsh-system-prompt). Code
    /// `MISSING_SYSTEM_PROMPT`.
    #[error("dsh-context needs the SystemPrompt service (link dsh-system-prompt)")]
    #[code("MISSING_SYSTEM_PROMPT")]
    MissingSystemPrompt,
    /// A section, context or variable could not be registered (e.g. another plugin already
    /// registered the `cwd` variable globally). Code `PROMPT_REGISTRATION`.
    #[error("dsh-context could not register its prompt entries: {0}")]
    #[code("PROMPT_REGISTRATION")]
    Registration(#[from] PromptError),
}
