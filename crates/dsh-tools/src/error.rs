//! The one error type of dsh-tools, [`ToolsError`], plus the failure shapes a tool body returns.
//!
//! Behaviour notes: `docs/tools.md` ("ToolDefinition", "Registry", "Pipeline"). Registry
//! operations (register, restrict, guard) fail with a [`ToolsError`]; a tool body fails with a
//! [`ToolFailure`], which carries `info {name, code}` only when it was made from a typed error
//! (the Rust equivalent of upstream's `HarnessError` subclasses).

use dsh_kernel::ErrorCode;
use serde::{Deserialize, Serialize};

/// `{name, code}` of a typed error, as recorded in `ToolExecutionFailure.error.info` and in the
/// `tool/result` event's `error` field. JSON: `{"name":"ToolArgsError","code":"INVALID_ARGS"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// The error class name (upstream names: `ToolArgsError`, `ToolNotFoundError`, `AbortError`…).
    pub name: String,
    /// The stable machine code (`SCREAMING_SNAKE_CASE`).
    pub code: String,
}

impl ErrorInfo {
    /// Builds an info pair.
    pub fn new(name: impl Into<String>, code: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            code: code.into(),
        }
    }
}

/// Everything dsh-tools can refuse. Each variant has a stable [`code`](dsh_kernel::ErrorCode::code) and an
/// upstream class name ([`ToolsError::name`]) used for `error.info` in tool results.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum ToolsError {
    /// A tool's parameter (or output) schema uses a keyword outside the enforced subset
    /// (type, oneOf, properties, required, additionalProperties(bool), items, enum, const and the
    /// annotations title/description/default/examples/deprecated/readOnly/writeOnly), or a
    /// recursive `$ref`. Raised at registration / typed-tool build. Code `UNSUPPORTED_SCHEMA`.
    #[error("tool \"{tool}\": unsupported schema at {path}: {reason}")]
    #[code("UNSUPPORTED_SCHEMA")]
    UnsupportedSchema {
        /// The tool name.
        tool: String,
        /// JSON pointer of the offending node (`""` = root).
        path: String,
        /// What is unsupported.
        reason: String,
    },
    /// A tool with this name is already registered in the same layer (global, or the same agent
    /// scope). Code `DUPLICATE_TOOL`.
    #[error("tool \"{name}\" is already registered in this scope")]
    #[code("DUPLICATE_TOOL")]
    DuplicateTool {
        /// The duplicated name.
        name: String,
    },
    /// A tool name is empty or not a valid model-facing name (`[A-Za-z0-9_-]{1,64}`).
    /// Code `INVALID_TOOL_NAME`.
    #[error("invalid tool name \"{name}\": names must match [A-Za-z0-9_-]{{1,64}}")]
    #[code("INVALID_TOOL_NAME")]
    InvalidToolName {
        /// The rejected name.
        name: String,
    },
    /// The name is reserved (`run_code`, the Code Mode entry point). Code `RESERVED_TOOL_NAME`.
    #[error("tool name \"{name}\" is reserved")]
    #[code("RESERVED_TOOL_NAME")]
    ReservedToolName {
        /// The reserved name.
        name: String,
    },
    /// A restriction was refused: no agent scope, empty allow/deny, or a name that is empty or
    /// not visible to the scope. Code `INVALID_RESTRICTION`.
    #[error("invalid tool restriction: {reason}")]
    #[code("INVALID_RESTRICTION")]
    InvalidRestriction {
        /// Why.
        reason: String,
    },
    /// The model's arguments do not match the tool's parameters; the message names the field.
    /// Upstream class `ToolArgsError`. Code `INVALID_ARGS`.
    #[error("invalid arguments for tool \"{tool}\": {message}")]
    #[code("INVALID_ARGS")]
    InvalidArgs {
        /// The tool name.
        tool: String,
        /// What is wrong, naming the field path (e.g. ``at `options.depth`: invalid type …``).
        message: String,
    },
    /// The body returned a value that does not match its output schema or is not lossless JSON.
    /// Upstream class `ToolOutputError`. Code `INVALID_TOOL_OUTPUT`.
    #[error("tool \"{tool}\" returned invalid output: {message}")]
    #[code("INVALID_TOOL_OUTPUT")]
    InvalidOutput {
        /// The tool name.
        tool: String,
        /// What is wrong.
        message: String,
    },
    /// No tool of this name is visible to the caller at dispatch. Upstream class
    /// `ToolNotFoundError`. Code `UNKNOWN_TOOL`.
    #[error("unknown tool \"{name}\"")]
    #[code("UNKNOWN_TOOL")]
    UnknownTool {
        /// The requested name.
        name: String,
    },
    /// The call was aborted before its body started. Upstream class `AbortError`.
    /// Code `ABORTED_BEFORE_DISPATCH`. Message: `tool call aborted before dispatch`.
    #[error("tool call aborted before dispatch")]
    #[code("ABORTED_BEFORE_DISPATCH")]
    AbortedBeforeDispatch,
    /// The call's body finished after the caller aborted. Upstream class `AbortError`.
    /// Code `ABORTED`. Message: `tool call aborted`.
    #[error("tool call aborted")]
    #[code("ABORTED")]
    Aborted,
    /// The body ran longer than the tool's `timeout()`; its signal was cancelled and the body
    /// drained. Upstream class `ToolTimeoutError`. Code `TOOL_TIMEOUT`.
    #[error("tool \"{tool}\" timed out after {ms} ms")]
    #[code("TOOL_TIMEOUT")]
    Timeout {
        /// The tool name.
        tool: String,
        /// The timeout in milliseconds.
        ms: u128,
    },
    /// A listener of a `tools/*` waterfall (or a guard, or the approval service) failed.
    /// Code `POLICY_FAILED`.
    #[error("{stage} failed: {message}")]
    #[code("POLICY_FAILED")]
    PolicyFailed {
        /// The stage (`tools/pre-execute`, `guard`, `approval`, `tools/execute`, `tools/post-execute`).
        stage: &'static str,
        /// The listener's error text.
        message: String,
    },
    /// The tool body panicked (its task was lost). Code `TOOL_PANICKED`.
    #[error("tool \"{tool}\" panicked: {message}")]
    #[code("TOOL_PANICKED")]
    ToolPanicked {
        /// The tool name.
        tool: String,
        /// The panic message.
        message: String,
    },
    /// A scheduler callback (`call started` / `result committed`) failed; the batch stopped after
    /// draining in-flight calls and no results were fabricated. Code `SCHEDULER_FAILED`.
    #[error("tool scheduler failed: {message}")]
    #[code("SCHEDULER_FAILED")]
    SchedulerFailed {
        /// The callback's error text.
        message: String,
    },
    /// A kernel registration failed (scope inactive). Code `KERNEL`.
    #[error("kernel: {message}")]
    #[code("KERNEL")]
    Kernel {
        /// The kernel error text.
        message: String,
        /// The kernel error code.
        code: &'static str,
    },
}

impl ToolsError {
    /// The error class name recorded in `error.info.name` (upstream names where they exist).
    pub fn name(&self) -> &'static str {
        match self {
            Self::UnsupportedSchema { .. } => "UnsupportedSchemaError",
            Self::DuplicateTool { .. } => "DuplicateToolError",
            Self::InvalidToolName { .. } => "InvalidToolNameError",
            Self::ReservedToolName { .. } => "ReservedToolNameError",
            Self::InvalidRestriction { .. } => "InvalidRestrictionError",
            Self::InvalidArgs { .. } => "ToolArgsError",
            Self::InvalidOutput { .. } => "ToolOutputError",
            Self::UnknownTool { .. } => "ToolNotFoundError",
            Self::AbortedBeforeDispatch | Self::Aborted => "AbortError",
            Self::Timeout { .. } => "ToolTimeoutError",
            Self::PolicyFailed { .. } => "ToolPolicyError",
            Self::ToolPanicked { .. } => "ToolPanicError",
            Self::SchedulerFailed { .. } => "ToolSchedulerError",
            Self::Kernel { .. } => "KernelError",
        }
    }

    /// `{name, code}` of this error.
    pub fn info(&self) -> ErrorInfo {
        ErrorInfo::new(self.name(), self.code())
    }
}

impl From<dsh_kernel::KernelError> for ToolsError {
    fn from(e: dsh_kernel::KernelError) -> Self {
        Self::Kernel {
            code: e.code(),
            message: e.to_string(),
        }
    }
}

/// How a tool body fails: a message plus, for typed errors only, `info {name, code}`.
///
/// Build it with [`ToolFailure::message`] for an untyped failure (upstream: a plain `Error`,
/// recorded without info), [`ToolFailure::typed`] for a custom typed one, or convert a
/// [`ToolsError`] (typed, info from [`ToolsError::info`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    /// The error message; the model sees `Error: <message>`.
    pub message: String,
    /// Present only for typed errors.
    pub info: Option<ErrorInfo>,
}

impl ToolFailure {
    /// An untyped failure (no `info`).
    pub fn message(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            info: None,
        }
    }

    /// A typed failure with `info {name, code}`.
    pub fn typed(
        message: impl Into<String>,
        name: impl Into<String>,
        code: impl Into<String>,
    ) -> Self {
        Self {
            message: message.into(),
            info: Some(ErrorInfo::new(name, code)),
        }
    }
}

impl From<ToolsError> for ToolFailure {
    fn from(e: ToolsError) -> Self {
        Self {
            message: e.to_string(),
            info: Some(e.info()),
        }
    }
}

impl std::fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolFailure {}
