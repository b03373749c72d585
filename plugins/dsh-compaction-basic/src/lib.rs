//! dsh-compaction-basic: the basic compaction policy and the compaction service built from it.
//!
//! - [`config`]: the `[compaction]` settings (`auto`, `threshold_ratio` 0.8, `retain_ratio`
//!   0.16 | `retain_tokens`, `max_tokens` 8192, `summarization_provider` +
//!   `summarization_model`, `compaction_retries` 1, `max_overflow_retries` 1), validated.
//! - [`policy`]: thresholds from the context window and the choice of the compactable span
//!   (recent tail kept, cuts moved to balanced tool pairing, never just the previous
//!   checkpoint again).
//! - [`overflow`]: recognising the provider's context-window error (DeepSeek's and OpenAI's
//!   HTTP 400 wording, 413) and the limit it states.
//! - [`summarizer`]: the summarisation request (same system prompt and tools, the shadowed
//!   messages, then the fixed structured-checkpoint instruction), and its output mapping.
//! - [`pruner`]: the tool-result pruner (8192 / 4096 / 1024 code points).
//! - [`BasicCompaction`]: the [`dsh_compaction::CompactionService`] this plugin provides as
//!   [`dsh_compaction::Compaction`]; it registers the typed `compaction/*` event types and
//!   emits the live `compaction/completed` and `compaction/notice` events.
//! - [`triggers`]: with `auto` on, the `agent/pre-step` (pressure) and `agent/request-error`
//!   (context overflow, one retry) listeners.
//!
//! See docs/upstream/compaction.md.

pub mod config;
mod engine;
pub mod overflow;
pub mod policy;
pub mod pruner;
pub mod summarizer;
pub mod triggers;

use std::sync::Arc;

pub use config::CompactionConfig;
pub use engine::{BasicCompaction, ModelLookup};

fn start(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    let cfg: CompactionConfig = ctx.settings_section(PLUGIN.id)?;
    cfg.validate()?;
    let registry = ctx.require::<dsh_session::EventTypeRegistry>()?;
    for decl in dsh_compaction::events::declarations(PLUGIN.id) {
        registry.register_scoped(ctx, decl)?.detach();
    }
    let llm = ctx.require::<dsh_llm::LlmService>()?;
    let lookup_llm = llm.clone();
    let lookup: ModelLookup = Arc::new(move |p: &str, m: &str| lookup_llm.resolve_model(p, m));
    let (auto, max_overflow_retries) = (cfg.auto, cfg.max_overflow_retries);
    // The effective catalog: built-in entries plus the top-level `[models]` overrides the llm
    // seam read from settings.
    let engine = Arc::new(
        BasicCompaction::new(
            cfg,
            llm.catalog().clone(),
            lookup,
            Arc::new(summarizer::LlmSummarizer(llm)),
        )
        .with_events(ctx.clone()),
    );
    ctx.provide(Arc::new(dsh_compaction::Compaction(engine.clone())))?
        .detach();
    if auto {
        for r in triggers::install(ctx, engine, max_overflow_retries)? {
            r.detach();
        }
    }
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_llm::PLUGIN, dsh_session::PLUGIN, dsh_agent::PLUGIN],
    settings = CompactionConfig,
    aliases = ["compaction"],
    start = start,
}

#[cfg(test)]
mod tests;
