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
pub use registry::{
    AgentFactory, AgentRegistry, CreateAgentOptions, RegistryError, ResumeAgentOptions,
    current_initiator, with_initiator,
};

use std::sync::Arc;

fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    ctx.provide(Arc::new(AgentRegistry::new()))?.detach();
    if let Some(types) = ctx.get::<dsh_session::EventTypeRegistry>() {
        types.register(dsh_session::EventTypeDecl::new(
            INBOX_SPLICED,
            env!("CARGO_PKG_NAME"),
            true,
        ))?;
    }
    Ok(())
}

dsh_kernel::plugin! { after = ["dsh-session"], apply = apply }
