//! Errors of the todo tool ([`TodoError`]) and their mapping to typed tool failures.

use dsh_kernel::ErrorCode;
use dsh_tools::ToolFailure;

/// Errors of the todo tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum TodoError {
    /// `INVALID_TODOS`: empty or duplicate content, or too many `in_progress` items.
    #[error("{0}")]
    #[code("INVALID_TODOS")]
    Invalid(String),
    /// `NO_SESSION`: the call has no agent session to write the list to.
    #[error("todo_write requires an owning agent session")]
    #[code("NO_SESSION")]
    NoSession,
    /// `SESSION_APPEND_FAILED`: the session refused the `todo/write` event.
    #[error("cannot record the todo list: {0}")]
    #[code("SESSION_APPEND_FAILED")]
    Append(String),
}

impl From<TodoError> for ToolFailure {
    fn from(e: TodoError) -> Self {
        ToolFailure::typed(e.to_string(), "TodoError", e.code())
    }
}
