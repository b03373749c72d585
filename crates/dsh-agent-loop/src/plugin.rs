//! The plugin's start hook: provide the [`AgentLoop`] and install it as the registry's factory.

use std::sync::Arc;

use dsh_agent::AgentRegistry;
use dsh_kernel::{BoxError, Context};

use crate::{AgentLoop, LoopConfig, LoopError, SharedLoop};

pub(crate) fn apply(ctx: &Context) -> Result<(), BoxError> {
    let config: LoopConfig = ctx.settings_section(env!("CARGO_PKG_NAME"))?;
    let agent_loop = Arc::new(AgentLoop::new(ctx.clone(), config));
    ctx.provide(agent_loop.clone())?.detach();
    let registry = ctx
        .get::<AgentRegistry>()
        .ok_or(LoopError::MissingService("AgentRegistry"))?;
    let disposers = registry.set_factory(Arc::new(SharedLoop(agent_loop)));
    ctx.effect("agent-loop:factory", disposers)?.detach();
    Ok(())
}
