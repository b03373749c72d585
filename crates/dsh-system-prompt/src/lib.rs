//! dsh-system-prompt: the system-prompt service (`ctx.systemPrompt`). Plugins register ordered
//! sections, dynamic runtime contexts, `{{variable}}` values and tool-schema providers, globally
//! or per agent scope; the agent loop assembles them each step ([`SystemPrompt::assemble`]),
//! renders the stable system prompt ([`render_prompt`]) and turns changed runtime contexts into
//! snapshot messages ([`render_contexts`], [`snapshot_message`], [`RetainedSnapshot`]).
//!
//! See docs/upstream/system-prompt.md (with the runtime-context snapshot rule).
//!
//! The plugin (`dsh-system-prompt`) reads its settings section (see [`SystemPromptConfig`]) and
//! provides `Arc<SystemPrompt>` in the root layer.

mod error;
mod render;
mod service;
mod snapshot;
mod types;

pub use error::{PromptError, PromptItem};
pub use render::{
    SNAPSHOT_HEADING, interpolate, is_valid_variable_name, join_context_sections, render_contexts,
    render_prompt,
};
pub use service::{
    IDENTITY_ORDER, IDENTITY_SECTION, IDENTITY_TEXT, PERSONA_ORDER, PERSONA_SECTION, StepPrompt,
    SystemPrompt, SystemPromptConfig, TOOL_ORDER_REST,
};
pub use snapshot::{
    CLEARED_TEXT, RetainedSnapshot, SNAPSHOT_SOURCE_PLUGIN, last_snapshot_sections,
    snapshot_message,
};
pub use types::{
    AssembleContext, AssembleRequest, AssembledSection, PromptAssembly, PromptContext,
    PromptSection, PromptText, SystemPromptAssemble, SystemPromptChange, TextFn, ToolProviderFn,
    ToolProviderResult, VariableFn,
};

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-system-prompt";

fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    let config: SystemPromptConfig = ctx.settings_section(PLUGIN_ID)?;
    let service = SystemPrompt::new(ctx.clone(), &config)?;
    ctx.provide(service)?.detach();
    Ok(())
}

dsh_kernel::plugin! { settings = SystemPromptConfig, register = apply }
