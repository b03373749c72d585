//! Link-time registration: reads the `dsh-llm-deepseek` settings section, builds the adapter,
//! registers it with [`LlmService`] for every route id and alias (as an effect of the plugin's
//! scope), and also provides the concrete `Arc<DeepSeekAdapter>` for callers that need it.
//!
//! See docs/upstream/llm.md (Runtime and adapter seam).

use std::sync::Arc;

use dsh_kernel::Context;
use dsh_llm::LlmService;

use crate::adapter::DeepSeekAdapter;
use crate::config::DeepSeekSettings;

/// This plugin's id and settings-section name.
pub const PLUGIN_ID: &str = "dsh-llm-deepseek";

/// Errors: invalid settings (`INVALID_SETTINGS` from the kernel or [`crate::DeepSeekError`]),
/// a missing `LlmService` (the `dsh-llm` plugin is not linked), or a route id already served by
/// another adapter (`DUPLICATE_ADAPTER`).
fn apply(ctx: &Context) -> Result<(), dsh_kernel::BoxError> {
    let settings: DeepSeekSettings = ctx.settings_section(PLUGIN_ID)?;
    let adapter = Arc::new(DeepSeekAdapter::new(settings)?);
    let llm = ctx.require::<LlmService>()?;
    let _routes = llm
        .register_adapter_in(ctx, adapter.provider_ids(), adapter.clone())?
        .detach();
    ctx.provide(adapter)?.detach();
    Ok(())
}

dsh_kernel::plugin! { after = ["dsh-llm"], apply = apply }
