//! dsh-agent-loop: the agent factory and the turn/step driver.
//!
//! [`AgentLoop`] implements [`dsh_agent::AgentFactory`] (create and resume agents) and, per
//! agent, a [`dsh_agent::TurnRunner`] that runs the spec's turn and step algorithms: claim inbox
//! input, assemble the prompt, `agent/pre-step`, `step/start`, entered `user/message`s, a request
//! built from the session log alone (`request/header` / `request/context` only when they change),
//! chunks logged as `assistant/chunk` while the assembler folds them, `assistant/message`, tool
//! calls through the `dsh-tools` scheduler, `step/end` always, `agent/turn-stopping`, and
//! `turn/end` always with the right reason.
//!
//! See `docs/upstream/agent-loop.md`; tools scheduling: `docs/tools.md` ("Loop-side scheduling").

mod config;
mod driver;
mod error;
mod factory;
pub mod history;
mod plugin;
pub mod prompt;

pub use config::{
    DEFAULT_MAX_STEPS_PER_TURN, LoopConfig, MAX_STEPS_KIND, max_steps_limit, max_steps_reason,
};
pub use driver::Runner;
pub use error::LoopError;
pub use factory::{AgentLoop, SharedLoop};
pub use prompt::{AgentInfo, PromptParts};

dsh_kernel::plugin! {
    after = [
        dsh_agent::PLUGIN,
        dsh_session::PLUGIN,
        dsh_llm::PLUGIN,
        dsh_tools::PLUGIN,
        dsh_system_prompt::PLUGIN,
    ],
    settings = LoopConfig,
    aliases = ["agent"],
    start = plugin::apply,
}
