//! Instruction-count harness for the loop overhead per step (the `benches/step.rs` workload
//! without criterion): creates `N` fresh agents, then (unless the mode is `create`) runs one
//! followup turn of one step on each. Run it under `valgrind --tool=callgrind` once with
//! `create` and once with `turn`; the difference divided by `N` is the instructions per turn.
//! Usage: `step_loop [N=200] [turn|create|reuse|wall] [TOOLS=0]` (`reuse`: `N` turns on one agent,
//! the steady state of a long session, whose header is logged once): `TOOLS` registers that many tools with a
//! small object schema first (the bench has none; real agents carry a dozen).

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

/// Arguments of the placeholder tools (their schema is what the loop sends each step).
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct ToolArgs {
    /// A path relative to the workspace root.
    path: String,
    /// First line to read (1-based).
    offset: Option<u64>,
    /// Number of lines to read.
    limit: Option<u64>,
    /// A regular expression to search for.
    pattern: Option<String>,
}

/// Output of the placeholder tools.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct ToolOut {
    ok: bool,
}

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

/// `wall` mode: the criterion bench's shape (one `block_on` per phase, agent dropped inside the
/// measured phase), timing setup, turn and drop separately on stderr.
fn wall(n: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
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
    let (mut create, mut turn, mut drop_t) = (0u128, 0u128, 0u128);
    for _ in 0..n {
        let t0 = std::time::Instant::now();
        let agent = rt
            .block_on(registry.create(CreateAgentOptions {
                options: AgentOptions {
                    provider: Some("bench".into()),
                    model: Some("m".into()),
                    max_tokens: None,
                },
                ..CreateAgentOptions::default()
            }))
            .unwrap();
        let t1 = std::time::Instant::now();
        rt.block_on(async {
            agent.followup(Message::user_text("go")).unwrap();
            agent.when_idle().await;
        });
        let t2 = std::time::Instant::now();
        drop(agent);
        let t3 = std::time::Instant::now();
        create += (t1 - t0).as_nanos();
        turn += (t2 - t1).as_nanos();
        drop_t += (t3 - t2).as_nanos();
    }
    let n = n as u128;
    eprintln!(
        "per iteration: create {} us, turn {} us, drop {} us",
        create / n / 1000,
        turn / n / 1000,
        drop_t / n / 1000
    );
}

fn main() {
    if std::env::args().nth(2).as_deref() == Some("wall") {
        wall(
            std::env::args()
                .nth(1)
                .and_then(|a| a.parse().ok())
                .unwrap_or(1000),
        );
        return;
    }
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let mode = args.next().unwrap_or_else(|| "turn".to_owned());
    let turns = mode != "create";
    let reuse = mode == "reuse";
    let tools: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
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
        let tool_registry = kernel.root().require::<dsh_tools::ToolRegistry>().unwrap();
        for i in 0..tools {
            let def = dsh_tools::define_tool::<ToolArgs, ToolOut>(
                format!("tool_{i}"),
                "Reads or searches a file of the workspace.",
            )
            .execute(|_, _| async { Ok(ToolOut { ok: true }) })
            .unwrap();
            tool_registry.register(kernel.root(), def).unwrap().detach();
        }
        let mut agents = Vec::with_capacity(n);
        for _ in 0..if reuse { 1 } else { n } {
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
        if reuse {
            for _ in 0..n {
                agents[0].followup(Message::user_text("go")).unwrap();
                agents[0].when_idle().await;
            }
        } else if turns {
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
