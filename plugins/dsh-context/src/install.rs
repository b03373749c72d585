//! Registering the sections, variable, runtime contexts and listeners under a context
//! ([`install`]), and the plugin's start hook.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use dsh_agent::lifecycle::AgentDisposed;
use dsh_kernel::{BoxError, Context};
use dsh_system_prompt::{
    PromptContext, PromptError, PromptSection, PromptText, SystemPrompt, SystemPromptAssemble,
};

use crate::service::agent_cwd;
use crate::{
    CWD_VARIABLE, Clock, ContextConfig, ContextError, ContextService, DATE_CONTEXT, DATE_ORDER,
    ENVIRONMENT_ORDER, ENVIRONMENT_SECTION, GIT_CONTEXT, GIT_ORDER, PERSONA, PERSONA_ORDER,
    PERSONA_SECTION, PLUGIN_ID, TOOL_GUIDANCE, TOOLS_ORDER, TOOLS_SECTION, date_text,
    environment_text, git_context,
};

/// Registers everything under `ctx` (what the plugin's `apply` does, with the system clock):
/// the three stable sections, the `cwd` variable, the enabled runtime contexts, the
/// `system-prompt/assemble` listener adding AGENTS.md sections and the `agent/disposed`
/// cache cleanup; provides `Arc<ContextService>`. All bound to `ctx`'s scope.
///
/// # Errors
/// [`ContextError::MissingSystemPrompt`]; [`ContextError::Registration`] (a name taken in the
/// global layer, e.g. `cwd`); kernel errors (boxed) when `ctx` is inactive.
pub fn install(
    ctx: &Context,
    config: &ContextConfig,
    clock: Clock,
) -> Result<Arc<ContextService>, BoxError> {
    let prompt = ctx
        .get::<SystemPrompt>()
        .ok_or(ContextError::MissingSystemPrompt)?;
    let persona = config.persona.clone().unwrap_or_else(|| PERSONA.to_owned());
    let reg = |r: Result<dsh_kernel::Registration, PromptError>| -> Result<(), ContextError> {
        r?.detach();
        Ok(())
    };
    reg(prompt.section(
        ctx,
        PromptSection::new(PERSONA_SECTION, PERSONA_ORDER, persona),
    ))?;
    reg(prompt.section(
        ctx,
        PromptSection::new(TOOLS_SECTION, TOOLS_ORDER, TOOL_GUIDANCE),
    ))?;
    reg(prompt.section(
        ctx,
        PromptSection::new(
            ENVIRONMENT_SECTION,
            ENVIRONMENT_ORDER,
            PromptText::dynamic(|cx| environment_text(agent_cwd(cx).is_some())),
        ),
    ))?;
    reg(prompt.variable(ctx, CWD_VARIABLE, agent_cwd))?;
    if config.include_date {
        reg(prompt.context(
            ctx,
            PromptContext::new(
                DATE_CONTEXT,
                DATE_ORDER,
                PromptText::dynamic(move |_| date_text(clock())),
            ),
        ))?;
    }
    if config.include_git {
        reg(prompt.context(
            ctx,
            PromptContext::new(
                GIT_CONTEXT,
                GIT_ORDER,
                PromptText::dynamic(|cx| {
                    agent_cwd(cx)
                        .and_then(|cwd| git_context(Path::new(&cwd)))
                        .unwrap_or_default()
                }),
            ),
        ))?;
    }

    let service = Arc::new(ContextService::new(config.resolved_dsh_home()));
    ctx.provide(service.clone())?.detach();
    let s = service.clone();
    ctx.on_waterfall::<SystemPromptAssemble, _, _>(move |mut req, next| {
        s.add_agents_sections(&mut req);
        next.run(req)
    })?
    .detach();
    let s = service.clone();
    ctx.on_emit::<AgentDisposed>(move |notice| s.forget(notice.agent.session().id()))?
        .detach();
    Ok(service)
}

pub(crate) fn apply(ctx: &Context) -> Result<(), BoxError> {
    let config: ContextConfig = ctx.settings_section(PLUGIN_ID)?;
    install(ctx, &config, Arc::new(SystemTime::now))?;
    Ok(())
}
