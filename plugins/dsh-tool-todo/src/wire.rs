//! The tool's wire types: arguments ([`TodoWriteArgs`]), output value ([`TodoWriteValue`]) and
//! the items and counts they carry.

use dsh_session::TodoStatus;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A todo status on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Not started.
    Pending,
    /// Being worked on now.
    InProgress,
    /// Finished.
    Completed,
}

impl From<Status> for TodoStatus {
    fn from(s: Status) -> Self {
        match s {
            Status::Pending => TodoStatus::Pending,
            Status::InProgress => TodoStatus::InProgress,
            Status::Completed => TodoStatus::Completed,
        }
    }
}

impl From<TodoStatus> for Status {
    fn from(s: TodoStatus) -> Self {
        match s {
            TodoStatus::Pending => Status::Pending,
            TodoStatus::InProgress => Status::InProgress,
            TodoStatus::Completed => Status::Completed,
        }
    }
}

/// One task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Todo {
    /// What the task is — a short imperative line.
    pub content: String,
    /// pending (not started) | in_progress (now) | completed (done).
    pub status: Status,
}

/// `todo_write` arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoWriteArgs {
    /// The COMPLETE task list, replacing any previous list.
    pub todos: Vec<Todo>,
}

/// Status counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    /// Pending items.
    pub pending: u64,
    /// In-progress items.
    #[serde(rename = "inProgress")]
    pub in_progress: u64,
    /// Completed items.
    pub completed: u64,
}

/// `todo_write` output value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoWriteValue {
    /// The canonical (trimmed) list as recorded.
    pub todos: Vec<Todo>,
    /// Status counts.
    pub counts: Counts,
}
