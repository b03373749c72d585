//! Link-time registration: reads the `dsh-llm-deepseek` settings section, builds the adapter and
//! provides it in the plugin's scope.
//!
//! Spec: `../shared/spec/llm-streaming.md` ("`LlmRuntime` and adapter seam").

use std::sync::Arc;

use dsh_kernel::Context;

use crate::adapter::DeepSeekAdapter;
use crate::config::DeepSeekSettings;

/// This plugin's id and settings-section name.
pub const PLUGIN_ID: &str = "dsh-llm-deepseek";

fn apply(ctx: &Context) -> Result<(), dsh_kernel::BoxError> {
    let settings: DeepSeekSettings = ctx.settings_section(PLUGIN_ID)?;
    let adapter = Arc::new(DeepSeekAdapter::new(settings)?);
    ctx.provide(adapter)?.detach();
    Ok(())
}

dsh_kernel::plugin! { after = ["dsh-llm"], apply = apply }
