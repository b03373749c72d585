//! Exact usage and cost from hand-written logs.

use dsh_llm::models::{ModelCatalog, ModelsTable};
use dsh_session::SessionEvent;
use serde_json::{Value, json};

use super::*;

/// Events from `(type, data)` pairs, seqs from 0.
fn log(events: &[(&str, Value)]) -> Vec<SessionEvent> {
    events
        .iter()
        .enumerate()
        .map(|(i, (kind, data))| {
            SessionEvent::from_value(
                json!({"type": kind, "seq": i, "time": 1000 + i, "data": data}),
            )
            .unwrap()
        })
        .collect()
}

fn context(provider: &str, model: &str) -> (&'static str, Value) {
    (
        "request/context",
        json!({"provider": provider, "model": model}),
    )
}

fn usage_chunk(turn: u64, step: u64, usage: Value) -> (&'static str, Value) {
    (
        "assistant/chunk",
        json!({"turn": turn, "step": step, "chunk": {"type": "usage", "usage": usage}}),
    )
}

fn finish(turn: u64, step: u64, reason: Value) -> (&'static str, Value) {
    (
        "assistant/chunk",
        json!({"turn": turn, "step": step, "chunk": {"type": "finish", "reason": reason}}),
    )
}

fn message(
    turn: u64,
    step: u64,
    provider: &str,
    model: &str,
    usage: Value,
) -> (&'static str, Value) {
    (
        "assistant/message",
        json!({"turn": turn, "step": step, "usage": usage, "message": {
            "id": format!("m-{turn}-{step}"), "role": "assistant",
            "content": [{"type": "text", "text": "ok"}],
            "source": {"kind": "model", "provider": provider, "model": model}}}),
    )
}

fn session() -> Vec<SessionEvent> {
    let flash_usage = json!({"inputTokens": 1_000_000, "outputTokens": 500_000,
                             "cacheReadTokens": 2_000_000, "reasoningTokens": 100_000});
    let failed = json!({"inputTokens": 10_000, "outputTokens": 0});
    let sonnet_usage = json!({"inputTokens": 1000, "outputTokens": 200,
                              "cacheReadTokens": 10_000, "cacheWriteTokens": 4000});
    log(&[
        ("turn/start", json!({"turn": 1})),
        ("step/start", json!({"turn": 1, "step": 1})),
        context("deepseek", "deepseek-v4-flash"),
        // a failed attempt (counted), then the retry that succeeds
        usage_chunk(1, 1, failed.clone()),
        finish(
            1,
            1,
            json!({"kind": "error", "failure": {"message": "x", "code": "SERVER"}}),
        ),
        usage_chunk(1, 1, flash_usage.clone()),
        finish(1, 1, json!({"kind": "stop"})),
        message(1, 1, "deepseek", "deepseek-v4-flash", flash_usage),
        ("step/end", json!({"turn": 1, "step": 1})),
        (
            "turn/end",
            json!({"turn": 1, "reason": {"kind": "completed"}}),
        ),
        ("turn/start", json!({"turn": 2})),
        ("step/start", json!({"turn": 2, "step": 1})),
        context("anthropic", "claude-sonnet-4-5"),
        usage_chunk(2, 1, sonnet_usage.clone()),
        finish(2, 1, json!({"kind": "tool-calls"})),
        message(2, 1, "anthropic", "claude-sonnet-4-5", sonnet_usage.clone()),
        ("step/end", json!({"turn": 2, "step": 1})),
        ("step/start", json!({"turn": 2, "step": 2})),
        usage_chunk(2, 2, sonnet_usage.clone()),
        finish(2, 2, json!({"kind": "stop"})),
        message(2, 2, "anthropic", "claude-sonnet-4-5", sonnet_usage),
        ("step/end", json!({"turn": 2, "step": 2})),
        (
            "turn/end",
            json!({"turn": 2, "reason": {"kind": "completed"}}),
        ),
    ])
}

#[test]
fn per_step_per_turn_and_total_with_exact_costs() {
    let u = usage_of(&session(), &ModelCatalog::builtin());
    assert_eq!(u.turns.len(), 2);
    let t1 = &u.turns[0];
    assert_eq!(t1.steps.len(), 1);
    assert_eq!(t1.steps[0].attempts, 2);
    assert_eq!(
        t1.steps[0].route,
        Some(("deepseek".to_owned(), "deepseek-v4-flash".to_owned()))
    );
    // failed attempt 10k × $0.14 = $0.0014; success 1M × 0.14 + 2M × 0.0028 + 0.5M × 0.28
    assert_eq!(
        t1.usage,
        Usage {
            input_tokens: 1_010_000,
            cached_input_tokens: 2_000_000,
            cache_write_tokens: 0,
            output_tokens: 500_000,
            reasoning_tokens: 100_000,
            cost_picos: Some(1_400_000_000 + 285_600_000_000),
            estimated: false,
        }
    );
    assert_eq!(t1.usage.cost_usd(), Some(0.287));
    // Sonnet 4.5: 1000 × $3 + 10,000 × $0.30 + 4000 × $3.75 + 200 × $15 per MTok = $0.024 a step
    let t2 = &u.turns[1];
    assert_eq!(t2.steps.len(), 2);
    assert_eq!(t2.steps[0].usage.cost_picos, Some(24_000_000_000));
    assert_eq!(t2.usage.cost_usd(), Some(0.048));
    assert_eq!(t2.usage.total_input(), 30_000);
    assert_eq!(u.usage.cost_picos, Some(335_000_000_000));
    assert_eq!(u.usage.cost_usd(), Some(0.335));
    assert_eq!(
        u.usage.to_json(),
        json!({"inputTokens": 1_012_000, "cachedInputTokens": 2_020_000,
               "cacheWriteTokens": 8000, "outputTokens": 500_400,
               "reasoningTokens": 100_000, "costUsd": 0.335})
    );
    // the run that began at turn 2 (a resumed session): only its events, priced on its route
    let from = session()
        .iter()
        .find(|e| e.kind.as_str() == "turn/start" && e.seq > 0)
        .unwrap()
        .seq;
    assert_eq!(
        usage_since(&session(), from, &ModelCatalog::builtin()).cost_usd(),
        Some(0.048)
    );
}

#[test]
fn a_model_without_prices_has_no_cost_never_zero() {
    let events = log(&[
        context("local", "qwen2.5-coder"),
        message(
            1,
            1,
            "local",
            "qwen2.5-coder",
            json!({"inputTokens": 5, "outputTokens": 7}),
        ),
    ]);
    let u = usage_of(&events, &ModelCatalog::builtin());
    assert_eq!(u.usage.cost_picos, None);
    assert_eq!(u.usage.to_json()["costUsd"], Value::Null);
    assert_eq!(u.usage.output_tokens, 7);
    // priced by a [models] override
    let table: ModelsTable =
        serde_json::from_value(json!({"qwen2.5-coder": {"input_price": 1.0, "output_price": 2.0}}))
            .unwrap();
    let c = ModelCatalog::builtin().with_overrides(&table).unwrap();
    assert_eq!(
        usage_of(&events, &c).usage.cost_picos,
        Some(5_000_000 + 14_000_000)
    );
    // no model call at all: nothing used, nothing owed
    assert_eq!(
        usage_of(&log(&[context("local", "qwen2.5-coder")]), &c).usage,
        Usage::default()
    );
    assert_eq!(Usage::default().cost_usd(), Some(0.0));
}

#[test]
fn summary_lines() {
    let u = usage_of(&session(), &ModelCatalog::builtin()).usage;
    assert_eq!(
        summary_line(&u),
        "3.04M in (2.02M cached, 8.0k written) · 500.4k out (100.0k reasoning) · $0.3350"
    );
    let small = Usage {
        input_tokens: 950,
        output_tokens: 12,
        cost_picos: None,
        estimated: true,
        ..Usage::default()
    };
    assert_eq!(summary_line(&small), "~950 in · 12 out · $?");
    assert_eq!(fmt_cost(Some(12.345)), "$12.35");
    assert_eq!(fmt_cost(Some(0.0000722)), "$0.000072");
    assert_eq!(fmt_cost(Some(0.0)), "$0");
}
