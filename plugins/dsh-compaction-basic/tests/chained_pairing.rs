//! Property test (bug case BC-29): over random tool-using histories, random keep-recent
//! budgets and chained compactions with steps in between, the derived model history never
//! holds a tool call without its result or a result without its call, and the log keeps the
//! session invariants.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashSet;
use std::sync::Arc;

use dsh_compaction::checkpoint::{Bracket, Region, SummaryInput};
use dsh_compaction::{CompactionError, SurfaceView, active_lock};
use dsh_compaction_basic::policy::select_range;
use dsh_llm::{ContentBlock, Message};
use dsh_session::{
    AssistantMessageData, EventData, EventType, EventTypeRegistry, Session, StepData,
    SurfaceIntent, ToolCallData, ToolResultData, TurnStartData, check_invariants,
};
use dsh_token_meter::TokenMeter;
use proptest::prelude::*;

fn ev(s: &Session, kind: EventType, data: EventData) {
    s.append(kind, data, None).unwrap();
}

fn step(s: &Session, step: u64, results: &[usize]) {
    let sd = StepData { turn: 1, step };
    ev(s, EventType::STEP_START, EventData::StepStart(sd));
    let ids: Vec<String> = (0..results.len()).map(|i| format!("c{step}_{i}")).collect();
    let mut content = vec![ContentBlock::text("working")];
    content.extend(
        ids.iter()
            .map(|id| ContentBlock::tool_call(id.as_str(), "read", r#"{"path":"a"}"#)),
    );
    s.append(
        EventType::ASSISTANT_MESSAGE,
        EventData::AssistantMessage(AssistantMessageData {
            turn: 1,
            step,
            message: Arc::new(Message::assistant(content, "deepseek", "m", None)),
            usage: None,
            interrupted: None,
        }),
        Some(SurfaceIntent::append()),
    )
    .unwrap();
    for id in &ids {
        ev(
            s,
            EventType::TOOL_CALL,
            EventData::ToolCall(ToolCallData {
                turn: 1,
                step,
                call_id: id.as_str().into(),
                name: "read".into(),
                arguments: r#"{"path":"a"}"#.into(),
            }),
        );
    }
    for (id, len) in ids.iter().zip(results) {
        s.append(
            EventType::TOOL_RESULT,
            EventData::ToolResult(ToolResultData {
                turn: 1,
                step,
                message: Arc::new(Message::tool_result(
                    id.as_str().into(),
                    vec![ContentBlock::text("r".repeat(*len))],
                    false,
                )),
                error: None,
                meta: None,
            }),
            Some(SurfaceIntent::append()),
        )
        .unwrap();
    }
    ev(s, EventType::STEP_END, EventData::StepEnd(sd));
}

/// Every tool call in the derived history has its result after it, and every result follows
/// its call.
fn paired(s: &Session) -> Result<(), String> {
    let mut open: HashSet<String> = HashSet::new();
    for m in s.derive_messages() {
        for (id, _, _) in m.tool_calls() {
            open.insert(id.to_string());
        }
        for b in &m.content {
            if let ContentBlock::ToolResult { tool_call_id, .. } = b
                && !open.remove(&tool_call_id.to_string())
            {
                return Err(format!("result {tool_call_id} without its call"));
            }
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("calls without results: {open:?}"))
    }
}

fn history() -> impl Strategy<Value = Vec<Vec<usize>>> {
    prop::collection::vec(prop::collection::vec(1usize..3000, 0..4), 1..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn chained_compactions_keep_calls_and_results_together(
        rounds in prop::collection::vec((history(), 0u64..3000), 1..5),
    ) {
        let registry = EventTypeRegistry::with_upstream_catalog();
        dsh_compaction::events::register(&registry, "test").unwrap();
        let s = Session::create_with("p", None, None, Arc::new(registry)).unwrap();
        ev(&s, EventType::TURN_START, EventData::TurnStart(TurnStartData { turn: 1, trigger: None }));
        s.append(
            EventType::USER_MESSAGE,
            EventData::UserMessage(Arc::new(Message::user_text("task"))),
            Some(SurfaceIntent::append()),
        )
        .unwrap();
        let mut meter = TokenMeter::new();
        let mut n = 0;
        for (steps, retain) in rounds {
            for results in &steps {
                n += 1;
                step(&s, n, results);
            }
            meter.measure(&s);
            let view = SurfaceView::of(&s);
            let costs: Vec<u64> = meter.nodes().iter().map(|c| c.tokens).collect();
            prop_assert_eq!(view.seqs(), meter.nodes().iter().map(|c| c.seq).collect::<Vec<_>>());
            if let Some((a, b)) = select_range(&view, &costs, retain) {
                let balanced = view.balanced_boundaries();
                prop_assert!(balanced[a] && balanced[b + 1]);
                let region = Region::from_view(&view, a, b);
                let bracket = Bracket::begin(&s, Some(1), None).unwrap();
                let input = SummaryInput {
                    summary: vec![ContentBlock::text("## Current Work\n- reading files")],
                    provider: "deepseek".into(),
                    model: "m".into(),
                    max_tokens: Some(8192),
                    usage: None,
                    raw_output: None,
                };
                match bracket.commit(&s, &region, input) {
                    Ok(_) => {}
                    Err(e @ CompactionError::Summary { .. }) => {
                        bracket.close_failed(&s, &e).unwrap();
                    }
                    Err(e) => prop_assert!(false, "commit failed: {e}"),
                }
            }
            prop_assert_eq!(active_lock(&s.events()), None);
            prop_assert_eq!(paired(&s), Ok(()));
            prop_assert_eq!(check_invariants(&s.events(), Some(s.registry())), vec![]);
            prop_assert_eq!(meter.measure(&s), TokenMeter::measure_events(&s.events()));
        }
    }
}
