//! Instruction-count harness for the loop overhead per step (the `benches/step.rs` workload
//! without criterion): creates `N` fresh agents, then (unless the mode is `create`) runs one
//! followup turn of one step on each. Run it under `valgrind --tool=callgrind` once with
//! `create` and once with `turn`; the difference divided by `N` is the instructions per turn.
//! Usage: `step_loop [N=200] [turn|create]`.

#![allow(missing_docs, reason = "measurement harness")]
#![allow(
    clippy::unwrap_used,
    reason = "measurement harness may panic on failure"
)]

use std::sync::Arc;

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

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let turns = args.next().as_deref() != Some("create");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let kernel = Kernel::new();
        kernel.boot().await.unwrap();
        let llm = kernel.root().require::<LlmService>().unwrap();
        llm.register_adapter(vec!["bench".into()], Arc::new(Instant))
            .unwrap()
            .detach();
        let registry = kernel.root().require::<AgentRegistry>().unwrap();
        let mut agents = Vec::with_capacity(n);
        for _ in 0..n {
            agents.push(
                registry
                    .create(CreateAgentOptions {
                        options: AgentOptions {
                            provider: Some("bench".into()),
                            model: Some("m".into()),
                            max_tokens: None,
                        },
                        ..CreateAgentOptions::default()
                    })
                    .await
                    .unwrap(),
            );
        }
        if turns {
            for agent in &agents {
                agent.followup(Message::user_text("go")).unwrap();
                agent.when_idle().await;
            }
        }
        std::mem::forget(agents);
        std::mem::forget(kernel);
    });
    std::mem::forget(rt);
}
