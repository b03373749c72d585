//! The crate's error type, [`PromptError`], with stable codes.
//!
//! See `docs/upstream/system-prompt.md` ("Behaviour"): duplicate names in one layer,
//! non-finite orders, more than one complete section, strict `{{name}}` rendering, and tool
//! order problems are all rejected with a typed error.

use dsh_kernel::{BoxError, KernelError};

/// Which kind of registration or input an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptItem {
    /// A system-prompt section.
    Section,
    /// A dynamic runtime context.
    Context,
    /// A prompt variable.
    Variable,
}

impl std::fmt::Display for PromptItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Section => "section",
            Self::Context => "context",
            Self::Variable => "variable",
        })
    }
}

/// Every failure of the system-prompt service. Each variant has a stable code ([`dsh_kernel::ErrorCode`]).
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum PromptError {
    /// The name is already registered in the same layer (global, or the same agent scope).
    /// Code `DUPLICATE_PROMPT_ENTRY`.
    #[error("prompt {item} \"{name}\" is already registered in this {}", if *.scoped { "scope" } else { "global layer (register through the agent's scope for a per-agent override)" })]
    #[code("DUPLICATE_PROMPT_ENTRY")]
    Duplicate {
        /// Section, context or variable.
        item: PromptItem,
        /// The duplicated name.
        name: String,
        /// Whether the layer is an agent scope's.
        scoped: bool,
    },
    /// A section or context order is NaN or infinite. Code `INVALID_PROMPT_ORDER`.
    #[error("prompt {item} \"{name}\" order must be a finite number")]
    #[code("INVALID_PROMPT_ORDER")]
    InvalidOrder {
        /// Section or context.
        item: PromptItem,
        /// Its name.
        name: String,
    },
    /// A variable name does not match `[a-z][a-z0-9_]*`. Code `INVALID_VARIABLE_NAME`.
    #[error("invalid prompt variable name \"{name}\" (must match [a-z][a-z0-9_]*)")]
    #[code("INVALID_VARIABLE_NAME")]
    InvalidVariableName {
        /// The rejected name.
        name: String,
    },
    /// More than one effective section is marked `complete`. Code `MULTIPLE_COMPLETE_SECTIONS`.
    #[error("multiple complete prompt sections are active: {}", .names.join(", "))]
    #[code("MULTIPLE_COMPLETE_SECTIONS")]
    MultipleComplete {
        /// The complete sections' names, in assembly order.
        names: Vec<String>,
    },
    /// A `{{` opens a group that is not a simple `{{name}}` reference while a `}}` follows
    /// later, or the name inside the braces is not `[a-z][a-z0-9_]*`.
    /// Code `MALFORMED_PROMPT_VARIABLE`.
    #[error(
        "malformed prompt variable reference at \"{at}\" in {item} \"{owner}\" (references are complete simple {{{{name}}}} groups)"
    )]
    #[code("MALFORMED_PROMPT_VARIABLE")]
    MalformedReference {
        /// Section or context being rendered.
        item: PromptItem,
        /// Its name.
        owner: String,
        /// Up to 16 characters of text from the offending `{{`.
        at: String,
    },
    /// A reference names a variable nobody registered. Code `UNKNOWN_PROMPT_VARIABLE`.
    #[error("unknown prompt variable \"{{{{{name}}}}}\" in {item} \"{owner}\"; registered variables: {}", if .known.is_empty() { "(none)".to_owned() } else { .known.join(", ") })]
    #[code("UNKNOWN_PROMPT_VARIABLE")]
    UnknownVariable {
        /// The unknown name.
        name: String,
        /// Section or context being rendered.
        item: PromptItem,
        /// Its name.
        owner: String,
        /// Registered variable names, sorted.
        known: Vec<String>,
    },
    /// A reference names a registered variable whose provider returned no value for this
    /// assembly. Code `PROMPT_VARIABLE_UNSET`.
    #[error(
        "prompt variable \"{{{{{name}}}}}\" has no value for this assembly ({item} \"{owner}\")"
    )]
    #[code("PROMPT_VARIABLE_UNSET")]
    VariableUnset {
        /// The variable name.
        name: String,
        /// Section or context being rendered.
        item: PromptItem,
        /// Its name.
        owner: String,
    },
    /// The configured `tool_order` is invalid (a name listed twice, or no `<unlisted-tools>`
    /// entry). Code `INVALID_TOOL_ORDER`.
    #[error("invalid tool_order: {reason}")]
    #[code("INVALID_TOOL_ORDER")]
    InvalidToolOrder {
        /// What is wrong.
        reason: String,
    },
    /// `tool_order` lists names no tool provider knows. Code `UNKNOWN_TOOL_IN_ORDER`.
    #[error("tool_order lists unregistered tool(s) {}; known tools: {}", .names.join(", "), if .known.is_empty() { "(none)".to_owned() } else { .known.join(", ") })]
    #[code("UNKNOWN_TOOL_IN_ORDER")]
    UnknownToolInOrder {
        /// The unknown names, in `tool_order` order.
        names: Vec<String>,
        /// Known names, sorted.
        known: Vec<String>,
    },
    /// A tool provider returned the reserved name `<unlisted-tools>`. Code `RESERVED_TOOL_NAME`.
    #[error("tool provider returned reserved tool name \"<unlisted-tools>\"")]
    #[code("RESERVED_TOOL_NAME")]
    ReservedToolName,
    /// A `system-prompt/assemble` listener failed. Code `ASSEMBLE_LISTENER_FAILED`.
    #[error("system-prompt/assemble listener failed: {0}")]
    #[code("ASSEMBLE_LISTENER_FAILED")]
    Listener(BoxError),
    /// A kernel registration failed (e.g. the registering scope is disposing).
    /// Code: the kernel's code (e.g. `INACTIVE_SCOPE`).
    #[error(transparent)]
    #[code(transparent)]
    Kernel(#[from] KernelError),
}
