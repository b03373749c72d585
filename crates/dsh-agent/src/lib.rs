//! dsh-agent: the agent vocabulary shared by the agent loop and the plugins that extend it —
//! the [`Agent`] handle (identity, options, session, [`Inbox`], status, agent scope, the
//! idle/running state machine), the [`AgentInfo`] an agent factory publishes in each agent scope, the [`AgentRegistry`] service (`ctx.agents`), and the `agent/*`
//! event declarations ([`events`] for the loop's checkpoints and waterfalls, [`lifecycle`] for
//! lifecycle and inbox notifications).
//!
//! The turn algorithm lives in `dsh-agent-loop`, which implements [`TurnRunner`] and
//! [`AgentFactory`]; plugins depend on this crate only.
//!
//! See docs/upstream/agent-loop.md.

pub mod events;
mod handle;
mod inbox;
mod info;
pub mod lifecycle;
mod loader;
mod registry;

pub use events::{
    AgentError as AgentErrorEvent, AgentErrorPayload, AgentPreStep, AgentRequest,
    AgentRequestError, AgentStatus, AgentStatusPayload, AgentTurnStopping, PreStepCtx,
    PreStepDecision, RequestCtx, RequestErrorCtx, ResolvedRetryPolicy, RetryDecision, RetryMode,
    StatusKind, TurnStoppingCtx,
};
pub use handle::{Agent, AgentCancelCause, AgentError, AgentOptions, TurnRunner};
pub use inbox::{INBOX_SPLICED, Inbox, InboxError, InboxTarget};
pub use info::AgentInfo;
pub use loader::{SessionLoader, StoredSession};
pub use registry::{
    AgentFactory, AgentRegistry, CreateAgentOptions, RegistryError, ResumeAgentOptions,
    current_initiator, with_initiator,
};

use std::sync::Arc;

fn register(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    ctx.provide(Arc::new(AgentRegistry::new()))?.detach();
    Ok(())
}

fn start(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    if let Some(types) = ctx.get::<dsh_session::EventTypeRegistry>() {
        types.register(dsh_session::EventTypeDecl::new(
            INBOX_SPLICED,
            env!("CARGO_PKG_NAME"),
            true,
        ))?;
    }
    Ok(())
}

/// Settings of the `dsh-agent` plugin: the defaults a host uses for new agents. They are also
/// the top-level settings keys `provider`, `model` and `max_tokens`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AgentDefaults {
    /// The provider route id new agents use (e.g. `deepseek`).
    pub provider: Option<String>,
    /// The model id new agents use (e.g. `deepseek-v4-flash`).
    pub model: Option<String>,
    /// The output-token limit per request (tokens, at least 1).
    pub max_tokens: Option<std::num::NonZeroU64>,
}

dsh_kernel::plugin! {
    after = [dsh_session::PLUGIN],
    settings = AgentDefaults,
    top_level = ["provider", "model", "max_tokens"],
    register = register,
    start = start,
}
