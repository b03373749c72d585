//! The plugin: reads the `dsh-llm-deepseek` settings section (the user's `[providers]` table,
//! [`ProviderTable`]) and `DEEPSEEK_BASE_URL`, builds the adapter,
//! registers it with [`LlmService`] for every route id and alias (as an effect of the plugin's
//! scope), and also provides the concrete `Arc<DeepSeekAdapter>` for callers that need it.
//!
//! See docs/upstream/llm.md (Runtime and adapter seam).

use std::sync::Arc;

use dsh_kernel::Context;
use dsh_llm::LlmService;

pub use dsh_llm_http::LlmProviderNotice;

use crate::adapter::DeepSeekAdapter;
use crate::config::ProviderTable;

/// This plugin's id and settings-section name (also [`dsh_llm_http::PROVIDERS_SECTION`]: this
/// plugin declares the `[providers]` table for every provider plugin).
pub const PLUGIN_ID: &str = "dsh-llm-deepseek";

/// Errors: invalid settings (`INVALID_SETTINGS` from the kernel or [`crate::DeepSeekError`]),
/// a missing `LlmService` (the `dsh-llm` plugin is not linked), or a route id already served by
/// another adapter (`DUPLICATE_ADAPTER`).
fn apply(ctx: &Context) -> Result<(), dsh_kernel::BoxError> {
    let table: ProviderTable = ctx.settings_section(PLUGIN_ID)?;
    let settings = table.to_settings(std::env::var("DEEPSEEK_BASE_URL").ok());
    let adapter = Arc::new(DeepSeekAdapter::new(settings)?);
    let notices = ctx.clone();
    adapter.set_notices(Arc::new(move |n| notices.emit::<LlmProviderNotice>(&n)));
    let llm = ctx.require::<LlmService>()?;
    let _routes = llm
        .register_adapter_in(ctx, adapter.provider_ids(), adapter.clone())?
        .detach();
    ctx.provide(adapter)?.detach();
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_llm::PLUGIN],
    settings = ProviderTable,
    aliases = ["providers"],
    // Where requests (and the key they carry) go: only the user's own settings decide.
    restricted = ["*.base_url", "*.api_key_env"],
    start = apply,
}
