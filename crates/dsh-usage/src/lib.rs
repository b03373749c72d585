//! `dsh-usage`: what a session used and cost, per step, per turn and in total, derived from the
//! session log alone (so a resumed session's total covers its whole history) and priced with the
//! model catalog ([`dsh_llm::models::ModelCatalog::pricing`]).
//!
//! Counting (docs/upstream/llm.md, Usage and cost): every provider attempt counts, failed ones
//! included — an attempt's sample is its last `usage` chunk, committed by its `finish` chunk;
//! the step's `assistant/message` usage replaces the sample of the attempt it closes. Each
//! sample is priced with the route in force when it was requested (the latest `request/context`
//! or `request/header`). Token fields are disjoint: `input` is uncached input, `cached` cache
//! hits, `cache_write` cache writes; `reasoning` is part of `output`.
//!
//! A cost is exact (picodollars) and `None` — never 0 — when any sample with tokens used a
//! model without prices.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use dsh_llm::models::{ModelCatalog, picos_to_usd};
use dsh_llm::{StreamChunk, TokenUsage};
use dsh_session::{EventData, SessionEvent};
use serde_json::{Value, json};

/// Token counts and cost of a span (a step, a turn, a run, a session).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Input tokens served from the prompt cache.
    pub cached_input_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write_tokens: u64,
    /// Output tokens (reasoning included).
    pub output_tokens: u64,
    /// Reasoning tokens (a part of `output_tokens`; 0 when the provider reports none).
    pub reasoning_tokens: u64,
    /// The cost in picodollars (10⁻¹² USD); `None` when a sample's model has no prices.
    pub cost_picos: Option<u128>,
    /// Some counts are the adapter's estimate (the provider sent no usage).
    pub estimated: bool,
}

impl Default for Usage {
    fn default() -> Self {
        Self {
            input_tokens: 0,
            cached_input_tokens: 0,
            cache_write_tokens: 0,
            output_tokens: 0,
            reasoning_tokens: 0,
            cost_picos: Some(0),
            estimated: false,
        }
    }
}

impl Usage {
    /// One provider sample priced with `cost` (picodollars, `None` = no prices).
    pub fn sample(u: &TokenUsage, cost: Option<u128>) -> Self {
        let tokens = u.total_input() + u.output_tokens;
        Self {
            input_tokens: u.input_tokens,
            cached_input_tokens: u.cache_read_tokens.unwrap_or(0),
            cache_write_tokens: u.cache_write_tokens.unwrap_or(0),
            output_tokens: u.output_tokens,
            reasoning_tokens: u.reasoning_tokens.unwrap_or(0),
            // nothing used costs nothing, whatever the model
            cost_picos: if tokens == 0 { Some(0) } else { cost },
            estimated: u.estimated,
        }
    }

    /// Adds `other` field by field; the cost is unknown when either is.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.output_tokens += other.output_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.cost_picos = match (self.cost_picos, other.cost_picos) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        self.estimated |= other.estimated;
    }

    /// All input tokens: uncached + cache hits + cache writes.
    pub fn total_input(&self) -> u64 {
        self.input_tokens + self.cached_input_tokens + self.cache_write_tokens
    }

    /// The cost in USD.
    pub fn cost_usd(&self) -> Option<f64> {
        self.cost_picos.map(picos_to_usd)
    }

    /// JSON `{"inputTokens","cachedInputTokens","cacheWriteTokens","outputTokens",
    /// "reasoningTokens","costUsd"}` (`costUsd` `null` when unknown), plus `"estimated": true`
    /// when some counts are estimates.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "inputTokens": self.input_tokens,
            "cachedInputTokens": self.cached_input_tokens,
            "cacheWriteTokens": self.cache_write_tokens,
            "outputTokens": self.output_tokens,
            "reasoningTokens": self.reasoning_tokens,
            "costUsd": self.cost_usd(),
        });
        if self.estimated {
            v["estimated"] = json!(true);
        }
        v
    }
}

/// One step's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepUsage {
    /// Turn number.
    pub turn: u64,
    /// Step number within the turn.
    pub step: u64,
    /// The route of its (last) attempt: provider id and model id.
    pub route: Option<(String, String)>,
    /// Provider attempts counted (failed ones included).
    pub attempts: u32,
    /// The step's usage over all its attempts.
    pub usage: Usage,
}

/// One turn's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnUsage {
    /// Turn number.
    pub turn: u64,
    /// Its steps in order.
    pub steps: Vec<StepUsage>,
    /// The sum of its steps.
    pub usage: Usage,
}

/// A span's usage per turn and in total.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionUsage {
    /// The turns in order.
    pub turns: Vec<TurnUsage>,
    /// The sum of the turns.
    pub usage: Usage,
}

#[derive(Default)]
struct StepAcc {
    samples: Vec<Usage>,
    pending: Option<(TokenUsage, Option<u128>)>,
    route: Option<(String, String)>,
}

/// The usage of `events` (a whole log, or a part of one; `SessionEvent`s or `Arc`s of them).
/// Turns and steps are those that used the model.
pub fn usage_of<E: Borrow<SessionEvent>>(events: &[E], catalog: &ModelCatalog) -> SessionUsage {
    usage_iter(events.iter().map(Borrow::borrow), catalog)
}

fn usage_iter<'a>(
    events: impl Iterator<Item = &'a SessionEvent>,
    catalog: &ModelCatalog,
) -> SessionUsage {
    let mut route: Option<(String, String)> = None;
    let mut steps: BTreeMap<(u64, u64), StepAcc> = BTreeMap::new();
    let price = |route: &Option<(String, String)>, u: &TokenUsage| -> Option<u128> {
        let (_, model) = route.as_ref()?;
        catalog.pricing(model).cost_picos(u)
    };
    for e in events {
        match &e.data {
            EventData::RequestContext(c) => route = Some((c.provider.clone(), c.model.clone())),
            EventData::RequestHeader(h) => {
                route = Some((
                    h.header.config.provider.clone(),
                    h.header.config.model.clone(),
                ));
            }
            EventData::AssistantChunk(c) => {
                let acc = steps.entry((c.turn, c.step)).or_default();
                match &c.chunk {
                    StreamChunk::Usage { usage } => {
                        acc.pending = Some((*usage, price(&route, usage)));
                        acc.route.clone_from(&route);
                    }
                    StreamChunk::Finish { .. } => {
                        if let Some((u, cost)) = acc.pending.take() {
                            acc.samples.push(Usage::sample(&u, cost));
                        }
                    }
                    _ => {}
                }
            }
            EventData::AssistantMessage(m) => {
                let acc = steps.entry((m.turn, m.step)).or_default();
                if let Some((u, cost)) = acc.pending.take() {
                    acc.samples.push(Usage::sample(&u, cost));
                }
                if let Some(u) = &m.usage {
                    let sample = Usage::sample(u, price(&route, u));
                    match acc.samples.last_mut() {
                        Some(last) => *last = sample,
                        None => acc.samples.push(sample),
                    }
                    if acc.route.is_none() {
                        acc.route.clone_from(&route);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = SessionUsage::default();
    for ((turn, step), mut acc) in steps {
        if let Some((u, cost)) = acc.pending.take() {
            acc.samples.push(Usage::sample(&u, cost));
        }
        if acc.samples.is_empty() {
            continue;
        }
        let mut usage = Usage::default();
        for s in &acc.samples {
            usage.add(s);
        }
        let s = StepUsage {
            turn,
            step,
            route: acc.route,
            attempts: u32::try_from(acc.samples.len()).unwrap_or(u32::MAX),
            usage,
        };
        match out.turns.last_mut() {
            Some(t) if t.turn == turn => {
                t.usage.add(&s.usage);
                t.steps.push(s);
            }
            _ => out.turns.push(TurnUsage {
                turn,
                usage: s.usage,
                steps: vec![s],
            }),
        }
    }
    for t in &out.turns {
        out.usage.add(&t.usage);
    }
    out
}

/// The usage of the events with `seq >= from_seq` (one run of a resumed session), priced with
/// the route in force at its start (the last route event before it) until it logs its own.
pub fn usage_since<E: Borrow<SessionEvent>>(
    events: &[E],
    from_seq: u64,
    catalog: &ModelCatalog,
) -> Usage {
    let at = events.partition_point(|e| e.borrow().seq < from_seq);
    let (before, run) = events.split_at(at);
    let route = before.iter().map(Borrow::borrow).rev().find(|e| {
        matches!(
            e.data,
            EventData::RequestContext(_) | EventData::RequestHeader(_)
        )
    });
    usage_iter(
        route.into_iter().chain(run.iter().map(Borrow::borrow)),
        catalog,
    )
    .usage
}

/// A compact count: `950`, `12.3k`, `1.20M`.
pub fn fmt_tokens(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.2}M", n as f64 / 1e6),
    }
}

/// A cost as shown to people: `$0` for nothing, `$0.000072` (six decimals below a cent),
/// `$0.0123` (four below a dollar), `$12.35`; `$?` when unknown.
pub fn fmt_cost(cost_usd: Option<f64>) -> String {
    match cost_usd {
        None => "$?".to_owned(),
        Some(0.0) => "$0".to_owned(),
        Some(c) if c < 0.01 => format!("${c:.6}"),
        Some(c) if c < 1.0 => format!("${c:.4}"),
        Some(c) => format!("${c:.2}"),
    }
}

/// One line: `1.2k in (800 cached, 40 written) · 300 out (120 reasoning) · $0.0042`; the
/// parenthesised parts only when non-zero; `~` before the counts when some are estimates.
pub fn summary_line(u: &Usage) -> String {
    let mut input = format!("{} in", fmt_tokens(u.total_input()));
    let mut extra = Vec::new();
    if u.cached_input_tokens > 0 {
        extra.push(format!("{} cached", fmt_tokens(u.cached_input_tokens)));
    }
    if u.cache_write_tokens > 0 {
        extra.push(format!("{} written", fmt_tokens(u.cache_write_tokens)));
    }
    if !extra.is_empty() {
        input.push_str(&format!(" ({})", extra.join(", ")));
    }
    let mut output = format!("{} out", fmt_tokens(u.output_tokens));
    if u.reasoning_tokens > 0 {
        output.push_str(&format!(" ({} reasoning)", fmt_tokens(u.reasoning_tokens)));
    }
    let mark = if u.estimated { "~" } else { "" };
    format!("{mark}{input} · {output} · {}", fmt_cost(u.cost_usd()))
}

#[cfg(test)]
mod tests;
