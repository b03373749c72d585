//! Installing the `agent/request-error` listener ([`install`]) and the plugin's start hook.

use std::sync::Arc;

use dsh_agent::AgentRequestError;
use dsh_kernel::{Context, Disposer, Registration};
use dsh_session::EventTypeRegistry;

use crate::{
    LLM_RETRY, LLM_RETRY_STARTED, PLUGIN_ID, RandomFn, ResolvedSettings, RetryError, RetryExecutor,
    RetrySettings, default_random, register_event_types,
};

/// Installs the `agent/request-error` listener through `ctx` with resolved settings and a
/// jitter source (tests inject a constant). The listener is untagged (it serves every agent);
/// disposing `ctx` cancels pending waits, which then return no decision. Decisions are
/// announced as [`crate::LlmRetryNotice`] through `ctx`.
///
/// # Errors
/// [`RetryError::Kernel`] when `ctx` is inactive.
pub fn install(
    ctx: &Context,
    settings: ResolvedSettings,
    random: RandomFn,
) -> Result<Registration, RetryError> {
    let exec = Arc::new(
        RetryExecutor::new(settings, random, ctx.cancellation()).with_notices(ctx.clone()),
    );
    let reg = ctx.on_waterfall::<AgentRequestError, _, _>(move |p, next| {
        let exec = exec.clone();
        async move { exec.recover(p, next).await }
    })?;
    Ok(reg)
}

pub(crate) fn apply(ctx: &Context) -> Result<(), dsh_kernel::BoxError> {
    let settings: RetrySettings = ctx.settings_section(PLUGIN_ID)?;
    let resolved = settings.resolve()?;
    if let Some(registry) = ctx.get::<EventTypeRegistry>() {
        register_event_types(&registry)?;
        let r = registry.clone();
        ctx.effect(
            "dsh-llm-retry: event types",
            vec![Disposer::infallible(move || {
                r.unregister(LLM_RETRY, PLUGIN_ID);
                r.unregister(LLM_RETRY_STARTED, PLUGIN_ID);
            })],
        )?
        .detach();
    }
    install(ctx, resolved, Arc::new(default_random))?.detach();
    Ok(())
}
