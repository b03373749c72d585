//! The `todo_write` tool ([`TodoWrite`]) and its model-facing description.

use std::sync::Arc;

use dsh_llm::ContentBlock;
use dsh_session::{EventData, EventType, TodoStatus, TodoWriteData};
use dsh_tools::{Tool, ToolEffects, ToolFailure, ToolRunContext};

use crate::{Counts, Todo, TodoError, TodoLists, TodoWriteArgs, TodoWriteValue, validate};

const DESCRIPTION_HEAD: &str = "Record and update a structured task list for the current work. Send the ENTIRE list every call — it REPLACES the previous list (there are no partial updates, no per-item edits). Use it to plan multi-step work and show progress: add one todo per concrete step before you start. ";
const DESCRIPTION_PARALLEL: &str = "Mark every todo being actively worked on `in_progress` — several at once when work genuinely runs in parallel (e.g. concurrent subagents or background commands), one for sequential work; while work remains, at least one task should be `in_progress`. ";
const DESCRIPTION_SINGLE: &str = "Keep AT MOST ONE todo `in_progress` at a time; while work remains, exactly one active task should be `in_progress`. ";
const DESCRIPTION_TAIL: &str = "Mark a todo `completed` the moment it is done (do not batch completions), and allow no `in_progress` item only once all work is complete. Skip the list for trivial single-step tasks. Statuses: `pending` (not started), `in_progress` (being worked on now), `completed` (finished).";

/// The model-facing description for the given parallel policy (upstream text).
pub fn description(allow_parallel: bool) -> String {
    format!(
        "{DESCRIPTION_HEAD}{}{DESCRIPTION_TAIL}",
        if allow_parallel {
            DESCRIPTION_PARALLEL
        } else {
            DESCRIPTION_SINGLE
        }
    )
}

/// The `todo_write` tool: validates the whole list, appends `todo/write` to the caller's
/// session and remembers it in [`TodoLists`]. Declared [`ToolEffects::READ_ONLY`] (it only
/// records the agent's own task list) and exclusive.
#[derive(Debug)]
pub struct TodoWrite {
    /// Where the latest list per session is kept.
    pub lists: Arc<TodoLists>,
    /// Allow several `in_progress` items at once.
    pub allow_parallel: bool,
}

impl Tool for TodoWrite {
    const NAME: &'static str = "todo_write";
    type Args = TodoWriteArgs;
    type Output = TodoWriteValue;

    fn description(&self) -> String {
        description(self.allow_parallel)
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::READ_ONLY
    }

    async fn call(
        &self,
        args: TodoWriteArgs,
        cx: ToolRunContext,
    ) -> Result<TodoWriteValue, ToolFailure> {
        let todos = validate(&args.todos, self.allow_parallel)?;
        let caller = cx.exec.caller.as_ref().ok_or(TodoError::NoSession)?;
        caller
            .session
            .append(
                EventType::TODO_WRITE,
                EventData::TodoWrite(TodoWriteData {
                    todos: todos.clone(),
                }),
                None,
            )
            .map_err(|e| TodoError::Append(e.to_string()))?;
        self.lists.set(caller.session_id.as_str(), todos.clone());
        let count = |s: TodoStatus| todos.iter().filter(|t| t.status == s).count() as u64;
        Ok(TodoWriteValue {
            counts: Counts {
                pending: count(TodoStatus::Pending),
                in_progress: count(TodoStatus::InProgress),
                completed: count(TodoStatus::Completed),
            },
            todos: todos
                .into_iter()
                .map(|t| Todo {
                    content: t.content,
                    status: t.status.into(),
                })
                .collect(),
        })
    }

    fn render(&self, _args: &TodoWriteArgs, v: &TodoWriteValue) -> Vec<ContentBlock> {
        vec![ContentBlock::text(format!(
            "Updated todo list: {} pending, {} in progress, {} completed.",
            v.counts.pending, v.counts.in_progress, v.counts.completed
        ))]
    }
}
