//! The plugin: reads the shared `[providers]` table (declared by the OpenAI-format plugin,
//! section [`dsh_llm_http::PROVIDERS_SECTION`]) and `ANTHROPIC_BASE_URL`, builds the adapter for
//! the built-in routes and every `format = "anthropic"` route, and registers it with
//! [`LlmService`] (as an effect of the plugin's scope).
//!
//! See docs/upstream/anthropic.md (Routes).

use std::sync::Arc;

use dsh_kernel::Context;
use dsh_llm::LlmService;
use dsh_llm_http::{LlmProviderNotice, PROVIDERS_SECTION, ProviderTableMap};

use crate::adapter::AnthropicAdapter;
use crate::config::{ANTHROPIC_BASE_URL_ENV, AnthropicSettings};

/// This plugin's id.
pub const PLUGIN_ID: &str = "dsh-llm-anthropic";

/// Errors: an invalid `[providers]` table (`INVALID_SETTINGS`), an invalid route
/// ([`crate::AnthropicError`]), a missing `LlmService`, or a route id another adapter already
/// serves (`DUPLICATE_ADAPTER`).
fn apply(ctx: &Context) -> Result<(), dsh_kernel::BoxError> {
    let table: ProviderTableMap = ctx.settings_section(PROVIDERS_SECTION)?;
    let settings =
        AnthropicSettings::from_table(&table, std::env::var(ANTHROPIC_BASE_URL_ENV).ok());
    let adapter = Arc::new(AnthropicAdapter::new(settings)?);
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
    start = apply,
}
