//! The `todo_write` tool (upstream `@deepseek-ai/dsh-tool-todo`): the model sends the WHOLE
//! task list each call; the plugin validates it and appends a core `todo/write {todos}` event
//! to the calling agent's session (replay is last-write-wins). The latest list is readable for
//! UIs through the [`TodoLists`] service.
//!
//! Validation (errors are typed results, code `INVALID_TODOS`, name `TodoError`): each
//! `content` is trimmed and must be non-empty and unique; `status` is `pending | in_progress |
//! completed` (enforced by the schema, `INVALID_ARGS` otherwise); at most one item may be
//! `in_progress` unless the setting `allow_parallel_in_progress` (section `dsh-tool-todo`,
//! default false) is true. A call without an agent session fails with `NO_SESSION`.
//!
//! Result text: `Updated todo list: <p> pending, <i> in progress, <c> completed.`; value
//! `{todos, counts: {pending, inProgress, completed}}`.

use dsh_kernel::ErrorCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use dsh_kernel::{BoxError, Context};
use dsh_llm::ContentBlock;
use dsh_session::{
    EventData, EventType, Session, SessionEvent, TodoItem, TodoStatus, TodoWriteData,
};
use dsh_tools::{Tool, ToolEffects, ToolFailure, ToolRunContext};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The plugin id (= package name).
pub const PLUGIN_ID: &str = "dsh-tool-todo";

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

/// Settings (section `dsh-tool-todo`, snake_case keys, unknown keys rejected):
/// `{"allow_parallel_in_progress": bool}` (default false).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TodoConfig {
    /// Allow several `in_progress` items at once.
    pub allow_parallel_in_progress: bool,
}

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

/// Validates and canonicalises a model list (see the crate docs).
///
/// # Errors
/// [`TodoError::Invalid`] with `invalid todo: \`content\` must be a non-empty string`,
/// `invalid todos: duplicate content "<c>"` or
/// `invalid todos: at most one task may be in_progress (got <n>)`.
pub fn validate(raw: &[Todo], allow_parallel: bool) -> Result<Vec<TodoItem>, TodoError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut seen = std::collections::HashSet::new();
    let mut active = 0;
    for t in raw {
        let content = t.content.trim();
        if content.is_empty() {
            return Err(TodoError::Invalid(
                "invalid todo: `content` must be a non-empty string".to_owned(),
            ));
        }
        if !seen.insert(content.to_owned()) {
            return Err(TodoError::Invalid(format!(
                "invalid todos: duplicate content {content:?}"
            )));
        }
        if t.status == Status::InProgress {
            active += 1;
        }
        out.push(TodoItem {
            content: content.to_owned(),
            status: t.status.into(),
        });
    }
    if !allow_parallel && active > 1 {
        return Err(TodoError::Invalid(format!(
            "invalid todos: at most one task may be in_progress (got {active})"
        )));
    }
    Ok(out)
}

/// The latest todo list of a session's log: the last `todo/write`, cleared (`None`) by a later
/// `turn/start` (upstream projection: a finished checklist stays visible until the next turn).
pub fn latest_in_events(events: &[Arc<SessionEvent>]) -> Option<Vec<TodoItem>> {
    let mut state = None;
    for e in events {
        match &e.data {
            EventData::TodoWrite(d) => state = Some(d.todos.clone()),
            _ if e.kind == EventType::TURN_START => state = None,
            _ => {}
        }
    }
    state
}

/// The todo service for UIs (provided by this plugin): the latest list per session.
#[derive(Debug, Default)]
pub struct TodoLists {
    latest: Mutex<HashMap<String, Vec<TodoItem>>>,
}

impl TodoLists {
    /// The list last written through this plugin for `session_id` (this process only).
    pub fn latest(&self, session_id: &str) -> Option<Vec<TodoItem>> {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(session_id)
            .cloned()
    }

    /// The current list of `session` folded from its log (works after a resume; see
    /// [`latest_in_events`]).
    pub fn latest_in(&self, session: &Session) -> Option<Vec<TodoItem>> {
        latest_in_events(&session.events())
    }

    fn set(&self, session_id: &str, todos: Vec<TodoItem>) {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session_id.to_owned(), todos);
    }
}

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

fn apply(ctx: &Context) -> Result<(), BoxError> {
    let cfg: TodoConfig = ctx.settings_section(PLUGIN_ID)?;
    let lists = Arc::new(TodoLists::default());
    ctx.provide(lists.clone())?.detach();
    dsh_tools::register(
        ctx,
        TodoWrite {
            lists,
            allow_parallel: cfg.allow_parallel_in_progress,
        },
    )?;
    Ok(())
}

dsh_kernel::plugin! { after = [dsh_tools::PLUGIN], settings = TodoConfig, start = apply }
