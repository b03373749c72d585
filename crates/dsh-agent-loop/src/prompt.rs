//! Prompt assembly for one step: the stable system prompt and the runtime-context snapshot.
//!
//! See `docs/upstream/system-prompt.md` ("Runtime-context snapshot") and
//! `docs/upstream/agent-loop.md` ("Step algorithm"). The loop asks the `dsh-system-prompt` service (when
//! linked) to assemble for the agent's scope, renders the system prompt, and turns changed
//! runtime contexts into a snapshot `user/message`, so dynamic facts never touch the system
//! prompt — and with it `request/header` and the provider's prefix cache.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use dsh_agent::Agent;
use dsh_kernel::{BoxError, CancellationToken, Context};
use dsh_llm::{ContextSection, Message};
use dsh_system_prompt::{
    AssembleContext, AssembledSection, PromptAssembly, SystemPrompt, render_contexts, render_prompt,
};

pub use dsh_system_prompt::{RetainedSnapshot, snapshot_message};

/// Re-exported from `dsh-agent` (where the agent vocabulary lives): what the loop publishes in
/// each agent scope for prompt variables and context providers.
pub use dsh_agent::AgentInfo;

/// What one step's prompt assembly produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptParts {
    /// The rendered system prompt (`None` when empty or no system-prompt service is linked).
    pub system: Option<String>,
    /// The rendered dynamic runtime contexts, in order.
    pub contexts: Vec<ContextSection>,
}

/// Assembles for `agent` through the `SystemPrompt` service, if one is provided.
///
/// # Errors
/// Assembly or strict-rendering failures of `dsh-system-prompt` (the turn then ends `error`).
pub async fn assemble(
    ctx: &Context,
    agent: &Agent,
    signal: &CancellationToken,
) -> Result<PromptParts, BoxError> {
    assemble_with(ctx, agent, signal, None).await
}

/// The last rendered system prompt with the exact inputs it was rendered from.
/// [`render_prompt`] is a pure function of the assembly's sections and variables, so equal
/// inputs give the same text (and the same success): a step whose sections and variables did
/// not change reuses the text instead of re-interpolating every section. Runtime contexts
/// (dynamic) are always rendered afresh.
#[derive(Debug, Default)]
pub(crate) struct RenderCache {
    sections: Vec<AssembledSection>,
    variables: BTreeMap<String, Option<String>>,
    system: String,
}

/// [`assemble`] reusing and refreshing `cache` for the system prompt text.
pub(crate) async fn assemble_with(
    ctx: &Context,
    agent: &Agent,
    signal: &CancellationToken,
    cache: Option<&Mutex<Option<RenderCache>>>,
) -> Result<PromptParts, BoxError> {
    let Some(service) = ctx.get::<SystemPrompt>() else {
        return Ok(PromptParts::default());
    };
    let assembly = service
        .assemble(AssembleContext {
            scope: Some(agent.key().clone()),
            agent: Some(agent.ctx().clone()),
            cancellation: Some(signal.clone()),
        })
        .await?;
    let (system, contexts) = match cache {
        None => (render_prompt(&assembly)?, render_contexts(&assembly)?),
        Some(cache) => render_cached(assembly, cache)?,
    };
    Ok(PromptParts {
        system: (!system.is_empty()).then_some(system),
        contexts,
    })
}

/// Renders the prompt through `cache` (same results and errors, in the same order, as
/// `render_prompt` then `render_contexts`).
fn render_cached(
    assembly: PromptAssembly,
    cache: &Mutex<Option<RenderCache>>,
) -> Result<(String, Vec<ContextSection>), BoxError> {
    let mut slot = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = slot.as_ref()
        && c.sections == assembly.sections
        && c.variables == assembly.variables
    {
        let system = c.system.clone();
        drop(slot);
        return Ok((system, render_contexts(&assembly)?));
    }
    let system = render_prompt(&assembly)?;
    let contexts = render_contexts(&assembly)?;
    *slot = Some(RenderCache {
        sections: assembly.sections,
        variables: assembly.variables,
        system: system.clone(),
    });
    Ok((system, contexts))
}

/// The snapshot message for this step, when the contexts changed since `retained`.
pub fn snapshot_for(retained: &RetainedSnapshot, parts: &PromptParts) -> Option<Arc<Message>> {
    snapshot_message(retained, &parts.contexts).map(Arc::new)
}
