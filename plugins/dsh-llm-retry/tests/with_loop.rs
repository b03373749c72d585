//! End to end with the real agent loop: a scripted adapter fails, the booted `dsh-llm-retry`
//! plugin schedules retries, and the loop re-streams within the same turn and step. The log
//! matches the upstream `empty-response-retry` scenario event for event.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentRegistry, CreateAgentOptions};
use dsh_kernel::{Kernel, Settings};
use dsh_llm::{
    ChunkStream, ContentBlock, FinishReason, GenerateOptions, LlmAdapter, LlmFailure, LlmService,
    Message, StreamChunk, TokenUsage,
};
use dsh_session::{EventData, Session};
use futures::StreamExt;
use serde_json::{Value, json};

// Name the plugin crates this test binary links.
use dsh_agent as _;
use dsh_agent_loop as _;
use dsh_llm as _;
use dsh_llm_retry as _;
use dsh_session as _;
use dsh_tools as _;

struct Script(Mutex<VecDeque<Vec<StreamChunk>>>);

impl LlmAdapter for Script {
    fn stream(&self, _opts: GenerateOptions) -> ChunkStream {
        let chunks = self.0.lock().unwrap().pop_front().unwrap_or_default();
        futures::stream::iter(chunks.into_iter().map(Ok)).boxed()
    }
}

fn failure(code: &str, message: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::Usage {
            usage: TokenUsage::default(),
        },
        StreamChunk::Finish {
            reason: FinishReason::Error {
                failure: LlmFailure::new(code, message),
            },
            replay_state: None,
        },
    ]
}

fn text(t: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into(),
        },
        StreamChunk::TextDelta {
            index: 0,
            text: t.into(),
        },
        StreamChunk::BlockEnd {
            index: 0,
            block: ContentBlock::text(t),
        },
        StreamChunk::Usage {
            usage: TokenUsage::default(),
        },
        StreamChunk::Finish {
            reason: FinishReason::Stop,
            replay_state: None,
        },
    ]
}

async fn run(responses: Vec<Vec<StreamChunk>>, settings: Value) -> (Kernel, Agent) {
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(
            Settings::new().with_section("dsh-llm-retry", settings),
        ))
        .unwrap()
        .detach();
    kernel.boot().await.expect("boot");
    let llm = kernel.root().require::<LlmService>().unwrap();
    llm.register_adapter(
        vec!["deepseek-official".into()],
        Arc::new(Script(Mutex::new(responses.into()))),
    )
    .unwrap()
    .detach();
    let registry = kernel.root().require::<AgentRegistry>().unwrap();
    let agent = registry
        .create(CreateAgentOptions {
            id: Some("retry-e2e".into()),
            options: AgentOptions {
                provider: Some("deepseek-official".into()),
                model: Some("deepseek-v4-flash".into()),
                max_tokens: None,
            },
            cwd: Some("/tmp".into()),
            ..CreateAgentOptions::default()
        })
        .await
        .unwrap();
    agent.followup(Message::user_text("go")).unwrap();
    tokio::time::timeout(Duration::from_secs(60), agent.when_idle())
        .await
        .expect("agent became idle");
    (kernel, agent)
}

/// Event types of the log, runs of `assistant/chunk` collapsed to `assistant/chunk*N`.
fn kinds(session: &Session) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut run = 0usize;
    for e in session.events() {
        if e.kind.as_str() == "assistant/chunk" {
            run += 1;
            continue;
        }
        if run > 0 {
            out.push(format!("assistant/chunk*{run}"));
            run = 0;
        }
        out.push(e.kind.as_str().to_owned());
    }
    if run > 0 {
        out.push(format!("assistant/chunk*{run}"));
    }
    out
}

fn data_of(session: &Session, kind: &str) -> Vec<Value> {
    session
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == kind)
        .map(|e| match &e.data {
            EventData::Opaque(v) => v.clone(),
            other => serde_json::to_value(other).unwrap(),
        })
        .collect()
}

/// The retry settings of the upstream `empty-response-retry` scenario.
fn upstream_settings() -> Value {
    json!({"max_retries": 2, "backoff": {"initial_delay_ms": 1, "max_delay_ms": 1, "jitter_ratio": 0}})
}

#[tokio::test(start_paused = true)]
async fn empty_response_is_retried_in_the_same_turn_and_step_like_upstream() {
    let msg = "model returned a completed response with no content";
    let (_k, agent) = run(
        vec![failure("EMPTY_RESPONSE", msg), text("Recovered.")],
        upstream_settings(),
    )
    .await;
    let session = agent.session();
    let k = kinds(session);
    let tail: Vec<&str> = k
        .iter()
        .map(String::as_str)
        .skip_while(|x| *x != "request/header")
        .collect();
    assert_eq!(
        tail,
        vec![
            "request/header",
            "request/context",
            "assistant/chunk*2",
            "llm/retry",
            "llm/retry-started",
            // block-start, text-delta, usage, finish: the block-end equal to its delta is not
            // logged (docs/formats.md, "Copies of the content").
            "assistant/chunk*4",
            "assistant/message",
            "step/end",
            "turn/end",
        ]
    );
    let retry = &data_of(session, "llm/retry")[0];
    let retry_id = retry["retryId"].as_str().unwrap();
    // The upstream corpus record with this run's retry id.
    assert_eq!(
        retry.to_string(),
        json!({
            "retryId": retry_id,
            "turn": 1,
            "step": 1,
            "provider": "deepseek-official",
            "mode": "normal",
            "policyKey": "[\"normal\",2,[\"EMPTY_RESPONSE\",\"RATE_LIMIT\",\"SERVER\",\"TIMEOUT\",\"TRANSPORT\"],1,1,0]",
            "retry": 1,
            "maxRetries": 2,
            "delayMs": 1,
            "failure": {"message": msg, "code": "EMPTY_RESPONSE"}
        })
        .to_string()
    );
    assert_eq!(
        data_of(session, "llm/retry-started")[0].to_string(),
        json!({"retryId": retry_id, "turn": 1, "step": 1, "retry": 1}).to_string()
    );
    assert_eq!(
        data_of(session, "turn/end")[0]["reason"],
        json!({"kind": "completed"})
    );
    assert_eq!(
        session.derive_messages().last().unwrap().text(),
        "Recovered."
    );
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_max_retries_and_the_turn_fails() {
    let (_k, agent) = run(
        vec![
            failure("SERVER", "boom 1"),
            failure("SERVER", "boom 2"),
            failure("SERVER", "boom 3"),
            text("never"),
        ],
        upstream_settings(),
    )
    .await;
    let session = agent.session();
    let retries: Vec<Value> = data_of(session, "llm/retry")
        .iter()
        .map(|d| json!([d["retry"], d["failure"]["message"]]))
        .collect();
    assert_eq!(retries, vec![json!([1, "boom 1"]), json!([2, "boom 2"])]);
    assert_eq!(data_of(session, "llm/retry-started").len(), 2);
    assert_eq!(
        data_of(session, "turn/end")[0]["reason"],
        json!({"kind": "error", "error": {"message": "boom 3", "code": "SERVER"}})
    );
    // One turn, one step: every attempt stayed in step 1.
    assert_eq!(data_of(session, "step/start").len(), 1);
}
