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

use dsh_session::{EventData, SessionEventEmitted};
use dsh_tools::{ToolRegistry, ToolsResult};

use crate::service::{agent_cwd, agent_info};
use crate::{
    CWD_VARIABLE, Clock, ContextConfig, ContextError, ContextService, DATE_CONTEXT, DATE_ORDER,
    ENVIRONMENT_ORDER, ENVIRONMENT_SECTION, GIT_CONTEXT, GIT_ORDER, PERSONA_ORDER, PERSONA_SECTION,
    PLUGIN_ID, TOOL_GUIDANCE, TOOLS_ORDER, TOOLS_SECTION, changes_workspace, date_text,
    environment_text,
};

/// Registers everything under `ctx` (what the plugin's `apply` does, with the system clock):
/// the three stable sections, the `cwd` variable, the enabled runtime contexts, the
/// `system-prompt/assemble` listener adding AGENTS.md sections, the `agent/disposed`
/// cache cleanup and, with the git context, the `session/event` (`turn/start`) and
/// `tools/result` listeners that decide when git is read again (the latter only when a
/// `ToolRegistry` is provided); provides `Arc<ContextService>`. All bound to `ctx`'s scope.
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
    let persona = config.persona_text();
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
    let service = Arc::new(
        ContextService::new(config.resolved_dsh_home()).with_git_options(config.git_options()),
    );
    if config.include_git {
        let s = service.clone();
        reg(prompt.context(
            ctx,
            PromptContext::new(
                GIT_CONTEXT,
                GIT_ORDER,
                PromptText::dynamic(move |cx| {
                    agent_info(cx)
                        .and_then(|info| {
                            let cwd = info.cwd.as_deref()?;
                            s.git_text(&info.id, Path::new(cwd))
                        })
                        .unwrap_or_default()
                }),
            ),
        ))?;
        // When to read the git state again: at each turn's start, and after a tool call that
        // may have changed the work tree (docs/upstream/context.md, "The git context").
        let s = service.clone();
        ctx.on_emit::<SessionEventEmitted>(move |notice| {
            if matches!(notice.event.data, EventData::TurnStart(_)) {
                s.invalidate_git(notice.session.id());
            }
        })?
        .detach();
        if let Some(registry) = ctx.get::<ToolRegistry>() {
            let s = service.clone();
            ctx.on_emit::<ToolsResult>(move |done| {
                if registry
                    .effects(&done.exec.name, done.exec.key())
                    .is_some_and(changes_workspace)
                {
                    s.workspace_changed();
                }
            })?
            .detach();
        }
    }

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
