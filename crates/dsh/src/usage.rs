//! Usage and cost in the command line: the `usage` and `sessionUsage` fields of the `exec
//! --json` result line, the cost on the end line of a text-mode `exec`, the per-turn line of
//! `dsh sessions show` and of the interactive shell. The figures come from `dsh-usage` (derived
//! from the session log, priced with the model catalog and the user's `[models."<id>"]`
//! overrides); see docs/upstream/llm.md (Usage and cost).

use dsh_kernel::Context;
use dsh_llm::models::{LlmSettings, ModelCatalog};
use std::sync::Arc;

use dsh_session::SessionEvent;
use dsh_usage::{TurnUsage, Usage, summary_line, usage_of, usage_since};
use serde_json::Value;

/// The settings section that holds the `[models]` table (the llm seam's plugin).
const LLM_SECTION: &str = "dsh-llm";

/// The catalog in force: the llm seam's effective catalog when the harness provides it, else
/// the built-in entries with the user's `[models."<id>"]` overrides (prices included) when the
/// settings carry a valid table, else the built-in entries alone (an invalid table is reported
/// where it is loaded, not here).
pub(crate) fn catalog(ctx: &Context) -> ModelCatalog {
    if let Some(llm) = ctx.get::<dsh_llm::LlmService>() {
        return llm.catalog().clone();
    }
    let builtin = ModelCatalog::builtin();
    match ctx.settings_section::<LlmSettings>(LLM_SECTION) {
        Ok(s) => builtin.clone().with_overrides(&s.models).unwrap_or(builtin),
        Err(_) => builtin,
    }
}

/// Sets `usage` (this run: the events from `from_seq` on) and `sessionUsage` (the whole log) of
/// an `exec --json` result line, each `{inputTokens, cachedInputTokens, cacheWriteTokens,
/// outputTokens, reasoningTokens, costUsd}` (`costUsd` null when a model has no prices).
pub(crate) fn add_result_fields(
    line: &mut Value,
    events: &[Arc<SessionEvent>],
    from_seq: u64,
    catalog: &ModelCatalog,
) {
    line["usage"] = usage_since(events, from_seq, catalog).to_json();
    line["sessionUsage"] = usage_of(events, catalog).usage.to_json();
}

/// This run's usage (the events from `from_seq` on, failed attempts included) and the cost
/// part of a text-mode `exec`'s end line: this run's cost (`$0.000072`; `$?` when a model in
/// use has no prices), followed by ` (session: $0.0720)` when the session had spent before this
/// run; the cost is `None` when the run made no model call with usage. The end line's token
/// figures and its cost are both these dsh-usage figures.
pub(crate) fn exec_cost(
    events: &[Arc<SessionEvent>],
    from_seq: u64,
    catalog: &ModelCatalog,
) -> (Usage, Option<String>) {
    let run = usage_since(events, from_seq, catalog);
    if is_empty(&run) {
        return (run, None);
    }
    let session = usage_of(events, catalog).usage;
    let mut cost = dsh_usage::fmt_cost(run.cost_usd());
    if session != run {
        cost.push_str(&format!(
            " (session: {})",
            dsh_usage::fmt_cost(session.cost_usd())
        ));
    }
    (run, Some(cost))
}

/// The per-turn line of `dsh sessions show`: `   usage: <turn>` for turn `turn`, `None` when it
/// used no tokens.
pub(crate) fn turn_line(turns: &[TurnUsage], turn: u64) -> Option<String> {
    let t = turns.iter().find(|t| t.turn == turn)?;
    (!is_empty(&t.usage)).then(|| format!("   usage: {}", summary_line(&t.usage)))
}

/// The per-turn usage of a stored session (for `sessions show`).
pub(crate) fn turns(events: &[SessionEvent], catalog: &ModelCatalog) -> Vec<TurnUsage> {
    usage_of(events, catalog).turns
}

/// The shell's line after a turn: `  <turn> — session <cost>`, `None` when the turn used no
/// tokens.
pub(crate) fn after_turn_line(
    events: &[Arc<SessionEvent>],
    from_seq: u64,
    catalog: &ModelCatalog,
) -> Option<String> {
    let turn = usage_since(events, from_seq, catalog);
    if is_empty(&turn) {
        return None;
    }
    let session = usage_of(events, catalog).usage;
    Some(format!(
        "  {} — session {}",
        summary_line(&turn),
        dsh_usage::fmt_cost(session.cost_usd())
    ))
}

fn is_empty(u: &Usage) -> bool {
    u.total_input() == 0 && u.output_tokens == 0
}
