//! dsh-tool-todo: the `todo_write` tool, which records the agent's task list in its session.
//!
//! Upstream `@deepseek-ai/dsh-tool-todo`: the model sends the WHOLE task list each call; the
//! plugin validates it and appends a core `todo/write {todos}` event to the calling agent's
//! session (replay is last-write-wins). The latest list is readable for UIs through the
//! [`TodoLists`] service.
//!
//! Validation (errors are typed results, code `INVALID_TODOS`, name `TodoError`): each
//! `content` is trimmed and must be non-empty and unique; `status` is `pending | in_progress |
//! completed` (enforced by the schema, `INVALID_ARGS` otherwise); at most one item may be
//! `in_progress` unless the setting `allow_parallel_in_progress` (section `dsh-tool-todo`,
//! default false) is true. A call without an agent session fails with `NO_SESSION`.
//!
//! Result text: `Updated todo list: <p> pending, <i> in progress, <c> completed.`; value
//! `{todos, counts: {pending, inProgress, completed}}`.

mod config;
mod error;
mod lists;
mod plugin;
mod tool;
mod validate;
mod wire;

pub use config::TodoConfig;
pub use error::TodoError;
pub use lists::{TodoLists, latest_in_events};
pub use tool::{TodoWrite, description};
pub use validate::validate;
pub use wire::{Counts, Status, Todo, TodoWriteArgs, TodoWriteValue};

/// The plugin id (= package name).
pub const PLUGIN_ID: &str = "dsh-tool-todo";

dsh_kernel::plugin! { after = [dsh_tools::PLUGIN], settings = TodoConfig, start = plugin::apply }
