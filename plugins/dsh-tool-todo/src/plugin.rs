//! The plugin's start hook: provide [`TodoLists`] and register the tool.

use std::sync::Arc;

use dsh_kernel::{BoxError, Context};

use crate::{PLUGIN_ID, TodoConfig, TodoLists, TodoWrite};

pub(crate) fn apply(ctx: &Context) -> Result<(), BoxError> {
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
