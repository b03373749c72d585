//! Prompt assembly for one step: the stable system prompt and the runtime-context snapshot.
//!
//! Spec: `../shared/spec/system-prompt.md` ("Runtime-context snapshot rule"),
//! `../shared/spec/agent-loop.md` (step 2b). The loop asks the `dsh-system-prompt` service (when
//! linked) to assemble for the agent's scope, renders the system prompt, and turns changed
//! runtime contexts into a snapshot `user/message`, so dynamic facts never touch the system
//! prompt — and with it `request/header` and the provider's prefix cache.

use std::sync::Arc;

use dsh_agent::Agent;
use dsh_kernel::{BoxError, CancellationToken, Context};
use dsh_llm::{ContextSection, Message};
use dsh_system_prompt::{AssembleContext, SystemPrompt, render_contexts, render_prompt};

pub use dsh_system_prompt::{RetainedSnapshot, snapshot_message};

/// What the agent loop publishes in each agent scope for prompt variables and context
/// providers: the agent's workspace root and current route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    /// The session id (= agent id).
    pub id: String,
    /// Absolute workspace root, when the session has one.
    pub cwd: Option<String>,
}

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
    let system = render_prompt(&assembly)?;
    let contexts = render_contexts(&assembly)?;
    Ok(PromptParts {
        system: (!system.is_empty()).then_some(system),
        contexts,
    })
}

/// The snapshot message for this step, when the contexts changed since `retained`.
pub fn snapshot_for(retained: &RetainedSnapshot, parts: &PromptParts) -> Option<Arc<Message>> {
    snapshot_message(retained, &parts.contexts).map(Arc::new)
}
