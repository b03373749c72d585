//! Shared harness of the loop's integration tests: a booted kernel with the core plugins, a
//! scripted in-process adapter that records every request, and log helpers.

#![allow(dead_code, reason = "each test binary uses a subset")]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentRegistry, CreateAgentOptions};
use dsh_kernel::Kernel;
use dsh_llm::{
    CallId, ChunkStream, ContentBlock, FinishReason, GenerateOptions, LlmAdapter, LlmFailure,
    LlmService, Message, StreamChunk, TokenUsage,
};
use dsh_session::{EventData, Session, SessionEvent};
use futures::StreamExt;

// Name the plugin crates this test binary links.
use dsh_agent as _;
use dsh_agent_loop as _;
use dsh_llm as _;
use dsh_session as _;
use dsh_system_prompt as _;
use dsh_tools as _;

/// One scripted response.
pub enum Resp {
    /// Yield these chunks, then end.
    Chunks(Vec<StreamChunk>),
    /// Yield these chunks, then never end (until cancelled).
    Hang(Vec<StreamChunk>),
}

/// A recorded request: the options and the session length when the stream was opened.
pub struct Recorded {
    pub opts: GenerateOptions,
    pub log_len: usize,
}

#[derive(Default)]
pub struct Script {
    pub responses: Mutex<VecDeque<Resp>>,
    pub requests: Mutex<Vec<Recorded>>,
    pub session: Mutex<Option<Arc<Session>>>,
}

pub struct ScriptAdapter(pub Arc<Script>);

impl LlmAdapter for ScriptAdapter {
    fn stream(&self, opts: GenerateOptions) -> ChunkStream {
        let log_len = self
            .0
            .session
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, |s| s.len());
        self.0.requests.lock().unwrap().push(Recorded {
            opts: opts.clone(),
            log_len,
        });
        let resp = self.0.responses.lock().unwrap().pop_front();
        match resp {
            Some(Resp::Chunks(c)) => futures::stream::iter(c.into_iter().map(Ok)).boxed(),
            Some(Resp::Hang(c)) => futures::stream::iter(c.into_iter().map(Ok))
                .chain(futures::stream::pending())
                .boxed(),
            None => futures::stream::iter(vec![Err(LlmFailure::new(
                "SCRIPT_EXHAUSTED",
                "no scripted response left",
            ))])
            .boxed(),
        }
    }
}

pub fn usage() -> StreamChunk {
    StreamChunk::Usage {
        usage: TokenUsage {
            input_tokens: 10,
            output_tokens: 5,
            ..TokenUsage::default()
        },
    }
}

pub fn finish(reason: FinishReason) -> StreamChunk {
    StreamChunk::Finish {
        reason,
        replay_state: None,
    }
}

/// block-start, text-delta, block-end, usage, finish stop (5 chunks).
pub fn text(t: &str) -> Resp {
    Resp::Chunks(vec![
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
        usage(),
        finish(FinishReason::Stop),
    ])
}

/// Per call: block-start, tool-call-delta, block-end; then usage and finish tool-calls
/// (3n + 2 chunks).
pub fn tool_calls(calls: &[(&str, &str, &str)]) -> Resp {
    let mut v = Vec::new();
    for (i, (id, name, args)) in calls.iter().enumerate() {
        let index = u32::try_from(i).unwrap();
        v.push(StreamChunk::BlockStart {
            index,
            block_type: "tool-call".into(),
        });
        v.push(StreamChunk::ToolCallDelta {
            index,
            id: CallId::from(*id),
            name: Some((*name).into()),
            arguments_delta: (*args).into(),
        });
        v.push(StreamChunk::BlockEnd {
            index,
            block: ContentBlock::tool_call(*id, *name, *args),
        });
    }
    v.push(usage());
    v.push(finish(FinishReason::ToolCalls));
    Resp::Chunks(v)
}

pub fn failure(code: &str) -> Resp {
    Resp::Chunks(vec![finish(FinishReason::Error {
        failure: LlmFailure::new(code, format!("simulated {code}")),
    })])
}

pub struct Harness {
    pub kernel: Kernel,
    pub script: Arc<Script>,
    pub registry: Arc<AgentRegistry>,
}

impl Harness {
    pub async fn new(responses: Vec<Resp>) -> Self {
        Self::with_loop_settings(responses, None).await
    }

    /// As [`Harness::new`], with `loop_settings` as the `dsh-agent-loop` settings section.
    pub async fn with_loop_settings(
        responses: Vec<Resp>,
        loop_settings: Option<serde_json::Value>,
    ) -> Self {
        let kernel = Kernel::new();
        if let Some(section) = loop_settings {
            let settings = dsh_kernel::Settings::new().with_section("dsh-agent-loop", section);
            kernel.root().provide(Arc::new(settings)).unwrap().detach();
        }
        kernel.boot().await.expect("boot");
        let script = Arc::new(Script::default());
        script.responses.lock().unwrap().extend(responses);
        let llm = kernel.root().require::<LlmService>().unwrap();
        llm.register_adapter(vec!["test".into()], Arc::new(ScriptAdapter(script.clone())))
            .unwrap()
            .detach();
        let registry = kernel.root().require::<AgentRegistry>().unwrap();
        Self {
            kernel,
            script,
            registry,
        }
    }

    pub async fn agent(&self) -> Agent {
        let agent = self
            .registry
            .create(CreateAgentOptions {
                id: Some("s1".into()),
                options: AgentOptions {
                    provider: Some("test".into()),
                    model: Some("m".into()),
                    max_tokens: None,
                },
                cwd: Some("/tmp".into()),
                ..CreateAgentOptions::default()
            })
            .await
            .unwrap();
        *self.script.session.lock().unwrap() = Some(agent.session().clone());
        agent
    }
}

pub async fn idle(agent: &Agent) {
    tokio::time::timeout(Duration::from_secs(20), agent.when_idle())
        .await
        .expect("agent became idle");
}

/// Event types of the log, runs of `assistant/chunk` collapsed to `assistant/chunk*N`.
pub fn kinds(session: &Session) -> Vec<String> {
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

pub fn turn_end_reasons(session: &Session) -> Vec<serde_json::Value> {
    session
        .events()
        .iter()
        .filter_map(|e| match &e.data {
            EventData::TurnEnd(d) => serde_json::to_value(&d.reason).ok(),
            _ => None,
        })
        .collect()
}

pub fn user(t: &str) -> Message {
    Message::user_text(t)
}

/// Asserts "request = f(log prefix)": every recorded request's messages equal the messages
/// derived from the log prefix that existed when the request was opened (with the notes of
/// `dsh_agent_loop::history::request_history`).
pub fn assert_requests_reconstructable(script: &Script, session: &Session) {
    let events: Vec<SessionEvent> = session.events().iter().map(|e| (**e).clone()).collect();
    for (i, r) in script.requests.lock().unwrap().iter().enumerate() {
        let prefix = Session::from_restore(session.id(), events[..r.log_len].to_vec(), None)
            .expect("prefix restores");
        let derived: Vec<Message> =
            dsh_agent_loop::history::request_history(prefix.derive_messages())
                .iter()
                .map(|m| (**m).clone())
                .collect();
        let sent: Vec<Message> = r.opts.messages.iter().map(|m| (**m).clone()).collect();
        assert_eq!(sent, derived, "request {i} is not the log-derived history");
    }
}
