//! Criterion benchmark of the token meter's per-step cost: on a session of 1k, 10k and 100k
//! events, append one more step (step/start, assistant message with a tool call, tool/call,
//! tool/result, step/end — untimed) and time [`TokenMeter::measure`]. The target is flat
//! (independent of the log length) and ≤ 50 µs.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dsh_llm::{ContentBlock, Message};
use dsh_session::{
    AssistantMessageData, EventData, EventType, Session, StepData, SurfaceIntent, ToolCallData,
    ToolResultData, TurnStartData,
};
use dsh_token_meter::TokenMeter;

fn step(s: &Session, step: u64) {
    let sd = StepData { turn: 1, step };
    s.append(EventType::STEP_START, EventData::StepStart(sd), None)
        .unwrap();
    let id = format!("call_{step}");
    let msg = Message::assistant(
        vec![
            ContentBlock::text("Looking at the file list."),
            ContentBlock::tool_call(id.as_str(), "bash", r#"{"command":"ls -la src"}"#),
        ],
        "deepseek",
        "deepseek-v4-flash",
        None,
    );
    s.append(
        EventType::ASSISTANT_MESSAGE,
        EventData::AssistantMessage(AssistantMessageData {
            turn: 1,
            step,
            message: Arc::new(msg),
            usage: None,
            interrupted: None,
        }),
        Some(SurfaceIntent::append()),
    )
    .unwrap();
    s.append(
        EventType::TOOL_CALL,
        EventData::ToolCall(ToolCallData {
            turn: 1,
            step,
            call_id: id.as_str().into(),
            name: "bash".into(),
            arguments: r#"{"command":"ls -la src"}"#.into(),
        }),
        None,
    )
    .unwrap();
    s.append(
        EventType::TOOL_RESULT,
        EventData::ToolResult(ToolResultData {
            turn: 1,
            step,
            message: Arc::new(Message::tool_result(
                id.as_str().into(),
                vec![ContentBlock::text("main.rs\nlib.rs\n".repeat(20))],
                false,
            )),
            error: None,
            meta: None,
        }),
        Some(SurfaceIntent::append()),
    )
    .unwrap();
    s.append(EventType::STEP_END, EventData::StepEnd(sd), None)
        .unwrap();
}

fn meter(c: &mut Criterion) {
    let mut group = c.benchmark_group("token_meter_step");
    for events in [1_000u64, 10_000, 100_000] {
        let s = Session::create("bench", None, None).unwrap();
        s.append(
            EventType::TURN_START,
            EventData::TurnStart(TurnStartData {
                turn: 1,
                trigger: None,
            }),
            None,
        )
        .unwrap();
        let mut n = 0;
        while s.seq() < events {
            n += 1;
            step(&s, n);
        }
        let mut m = TokenMeter::new();
        m.measure(&s);
        group.bench_function(BenchmarkId::from_parameter(events), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    step(&s, n);
                    let t = Instant::now();
                    std::hint::black_box(m.measure(&s));
                    total += t.elapsed();
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group!(benches, meter);
criterion_main!(benches);
