//! Criterion benchmark of the harness-side cost of one compaction, excluding the model call
//! (the summariser answers at once): on a session of 1k, 10k and 100k events, one context-overflow
//! compaction — measure, select the range, build the summarisation request, commit the
//! checkpoint (summary, replacement message, end). The session is rebuilt for each iteration
//! (untimed).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use dsh_compaction::{CompactionService, CompactionTarget, Trigger};
use dsh_compaction_basic::summarizer::{Summarizer, SummaryOutput};
use dsh_compaction_basic::{BasicCompaction, CompactionConfig, ModelLookup};
use dsh_kernel::ScopeKey;
use dsh_llm::models::ModelCatalog;
use dsh_llm::{ContentBlock, EpochHeader, FinishReason, GenerateOptions, LlmCallConfig, Message};
use dsh_session::{
    AssistantMessageData, EventData, EventType, EventTypeRegistry, RequestHeaderData,
    RequestHeaderReason, Session, StepData, SurfaceIntent, ToolCallData, ToolResultData,
    TurnStartData,
};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

struct Instant;

impl Summarizer for Instant {
    fn summarize(
        &self,
        _: GenerateOptions,
        _: Option<ScopeKey>,
    ) -> BoxFuture<'static, SummaryOutput> {
        Box::pin(async {
            SummaryOutput {
                blocks: vec![ContentBlock::text("## Current Work\n- reading files")],
                finish: FinishReason::Stop,
                usage: None,
            }
        })
    }
}

fn ev(s: &Session, kind: EventType, data: EventData) {
    s.append(kind, data, None).unwrap();
}

fn session(events: u64, registry: &Arc<EventTypeRegistry>) -> Arc<Session> {
    let s = Session::create_with("b", None, None, registry.clone()).unwrap();
    ev(
        &s,
        EventType::REQUEST_HEADER,
        EventData::RequestHeader(RequestHeaderData {
            header: EpochHeader {
                config: LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
                adapter_defaults: None,
                system: Some("You are dsh.".into()),
                tools: None,
            },
            reason: RequestHeaderReason::Initial,
        }),
    );
    ev(
        &s,
        EventType::TURN_START,
        EventData::TurnStart(TurnStartData {
            turn: 1,
            trigger: None,
        }),
    );
    s.append(
        EventType::USER_MESSAGE,
        EventData::UserMessage(Arc::new(Message::user_text("task"))),
        Some(SurfaceIntent::append()),
    )
    .unwrap();
    let mut step = 0;
    while s.seq() < events {
        step += 1;
        let sd = StepData { turn: 1, step };
        ev(&s, EventType::STEP_START, EventData::StepStart(sd));
        let id = format!("c{step}");
        let msg = Message::assistant(
            vec![ContentBlock::tool_call(
                id.as_str(),
                "read",
                r#"{"path":"a"}"#,
            )],
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
        ev(
            &s,
            EventType::TOOL_CALL,
            EventData::ToolCall(ToolCallData {
                turn: 1,
                step,
                call_id: id.as_str().into(),
                name: "read".into(),
                arguments: r#"{"path":"a"}"#.into(),
            }),
        );
        s.append(
            EventType::TOOL_RESULT,
            EventData::ToolResult(ToolResultData {
                turn: 1,
                step,
                message: Arc::new(Message::tool_result(
                    id.as_str().into(),
                    vec![ContentBlock::text("r".repeat(300))],
                    false,
                )),
                error: None,
                meta: None,
            }),
            Some(SurfaceIntent::append()),
        )
        .unwrap();
        ev(&s, EventType::STEP_END, EventData::StepEnd(sd));
    }
    Arc::new(s)
}

fn compaction(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let registry = EventTypeRegistry::with_upstream_catalog();
    dsh_compaction::events::register(&registry, "bench").unwrap();
    let registry = Arc::new(registry);
    let mut group = c.benchmark_group("compaction_one");
    for events in [1_000u64, 10_000, 100_000] {
        group.bench_function(BenchmarkId::from_parameter(events), |b| {
            b.iter_batched(
                || {
                    let lookup: ModelLookup = Arc::new(|_: &str, _: &str| None);
                    let engine = BasicCompaction::new(
                        CompactionConfig::default(),
                        ModelCatalog::builtin(),
                        lookup,
                        Arc::new(Instant),
                    );
                    (
                        engine,
                        CompactionTarget::new(session(events, &registry), Some(1)),
                    )
                },
                |(engine, target)| {
                    let r = rt.block_on(engine.compact_if_needed(
                        &target,
                        Trigger::ContextOverflow,
                        CancellationToken::new(),
                    ));
                    assert!(r.unwrap().is_some());
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, compaction);
criterion_main!(benches);
