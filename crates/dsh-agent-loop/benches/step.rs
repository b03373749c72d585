//! Loop overhead per step: a zero-latency in-process adapter, no tools, no persistence. One
//! iteration = one followup turn of one step (turn/start … turn/end, 5 chunks).
//! Target (issue 6): ≤ 50 µs per step. Figures go to `docs/benchmarks.md`.

#![allow(missing_docs, reason = "criterion bench harness")]
#![allow(clippy::unwrap_used, reason = "benchmark setup may panic on failure")]

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_agent::{AgentOptions, AgentRegistry, CreateAgentOptions};
use dsh_kernel::Kernel;
use dsh_llm::{
    ChunkStream, ContentBlock, FinishReason, GenerateOptions, LlmAdapter, LlmService, Message,
    StreamChunk, TokenUsage,
};
use futures::StreamExt;

use dsh_agent as _;
use dsh_agent_loop as _;
use dsh_llm as _;
use dsh_session as _;
use dsh_tools as _;

struct Instant;

impl LlmAdapter for Instant {
    fn stream(&self, _opts: GenerateOptions) -> ChunkStream {
        futures::stream::iter(
            vec![
                StreamChunk::BlockStart {
                    index: 0,
                    block_type: "text".into(),
                },
                StreamChunk::TextDelta {
                    index: 0,
                    text: "ok".into(),
                },
                StreamChunk::BlockEnd {
                    index: 0,
                    block: ContentBlock::text("ok"),
                },
                StreamChunk::Usage {
                    usage: TokenUsage::default(),
                },
                StreamChunk::Finish {
                    reason: FinishReason::Stop,
                    replay_state: None,
                },
            ]
            .into_iter()
            .map(Ok),
        )
        .boxed()
    }
}

fn bench(c: &mut Criterion) {
    // A current-thread runtime: the figure is the loop's own work, not the cost of handing the
    // driver task and the idle wake-up between OS threads (≈ 20–30 µs per turn on this machine,
    // measured with a one-worker multi-thread runtime).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (_kernel, registry) = rt.block_on(async {
        let kernel = Kernel::new();
        kernel.boot().await.unwrap();
        let llm = kernel.root().require::<LlmService>().unwrap();
        llm.register_adapter(vec!["bench".into()], Arc::new(Instant))
            .unwrap()
            .detach();
        let registry = kernel.root().require::<AgentRegistry>().unwrap();
        (kernel, registry)
    });
    let new_agent = || {
        rt.block_on(registry.create(CreateAgentOptions {
            options: AgentOptions {
                provider: Some("bench".into()),
                model: Some("m".into()),
                max_tokens: None,
            },
            ..CreateAgentOptions::default()
        }))
        .unwrap()
    };
    // A fresh agent per iteration (setup, not timed): the measured turn is the first turn of a
    // session, so the figure does not drift with an ever-growing log.
    c.bench_function("agent_loop/turn_of_one_step/no_tools", |b| {
        b.iter_batched(
            new_agent,
            |agent| {
                rt.block_on(async {
                    agent.followup(Message::user_text("go")).unwrap();
                    agent.when_idle().await;
                })
            },
            criterion::BatchSize::PerIteration,
        )
    });
}

criterion_group!(agent_loop, bench);
criterion_main!(agent_loop);
