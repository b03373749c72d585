//! End to end with the real agent loop and a scripted in-process adapter: the booted plugin
//! compacts under pressure before steps (keeping calls with their results), and recovers from
//! a context-window error by compacting and retrying exactly once.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentRegistry, CreateAgentOptions};
use dsh_compaction::{
    CompactionCause, CompactionCompleted, CompactionCompletedPayload, CompactionNotice,
    CompactionNoticePayload, NoticeLevel,
};
use dsh_kernel::Kernel;
use dsh_llm::{
    CallPurpose, ChunkStream, ContentBlock, FinishReason, GenerateOptions, LlmAdapter, LlmFailure,
    LlmService, Message, ModelInfo, StreamChunk, TokenUsage,
};
use dsh_session::{EventData, Session, SessionEvent, check_invariants};
use dsh_token_meter::TokenMeter;
use dsh_tools::{Tool, ToolEffects, ToolFailure, ToolRegistry, ToolRunContext};
use futures::StreamExt;
use serde_json::json;

// Name the plugin crates this test binary links.
use dsh_agent as _;
use dsh_agent_loop as _;
use dsh_compaction_basic as _;
use dsh_llm as _;
use dsh_session as _;
use dsh_tools as _;

const SUMMARY: &str = "## Current Work\n- reading the big files";

struct Recorded {
    opts: GenerateOptions,
    log_len: usize,
}

struct Script {
    live: Arc<Live>,
    window: u64,
    summary: String,
    responses: Mutex<VecDeque<Vec<StreamChunk>>>,
    requests: Mutex<Vec<Recorded>>,
    session: Mutex<Option<Arc<Session>>>,
}

impl LlmAdapter for Script {
    fn stream(&self, opts: GenerateOptions) -> ChunkStream {
        let log_len = self.session.lock().unwrap().as_ref().map_or(0, |s| s.len());
        let compaction = opts.purpose == Some(CallPurpose::Compaction);
        self.requests
            .lock()
            .unwrap()
            .push(Recorded { opts, log_len });
        let chunks = if compaction {
            text(&self.summary)
        } else {
            self.responses
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_default()
        };
        futures::stream::iter(chunks.into_iter().map(Ok)).boxed()
    }

    fn models(&self, _provider: &str) -> Vec<ModelInfo> {
        let mut m = ModelInfo::new("m");
        // 0: the adapter does not know the window. A small output default keeps the
        // thresholds at their ratios (the output fits beside them).
        m.context_window = (self.window > 0).then_some(self.window);
        m.default_max_tokens = Some(256);
        vec![m]
    }
}

fn usage() -> StreamChunk {
    StreamChunk::Usage {
        usage: TokenUsage::default(),
    }
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
        usage(),
        StreamChunk::Finish {
            reason: FinishReason::Stop,
            replay_state: None,
        },
    ]
}

fn call(id: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::BlockStart {
            index: 0,
            block_type: "tool-call".into(),
        },
        StreamChunk::ToolCallDelta {
            index: 0,
            id: id.into(),
            name: Some("big".into()),
            arguments_delta: "{}".into(),
        },
        StreamChunk::BlockEnd {
            index: 0,
            block: ContentBlock::tool_call(id, "big", "{}"),
        },
        usage(),
        StreamChunk::Finish {
            reason: FinishReason::ToolCalls,
            replay_state: None,
        },
    ]
}

fn overflow() -> Vec<StreamChunk> {
    vec![StreamChunk::Finish {
        reason: FinishReason::Error {
            failure: LlmFailure::new(
                "CONTEXT_WINDOW_EXCEEDED",
                "test: This model's maximum context length is 6000 tokens (HTTP 400)",
            )
            .with_status(400),
        },
        replay_state: None,
    }]
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// `big`: a result of `.0` characters (4,000: about 1,000 tokens).
struct Big(usize);

impl Tool for Big {
    const NAME: &'static str = "big";
    type Args = NoArgs;
    type Output = String;
    fn description(&self) -> String {
        "Return a big text.".into()
    }
    fn effects(&self) -> ToolEffects {
        ToolEffects::READ_ONLY
    }
    async fn call(&self, _: NoArgs, _: ToolRunContext) -> Result<String, ToolFailure> {
        Ok("x".repeat(self.0))
    }
}

async fn run(
    window: u64,
    prompt: &str,
    responses: Vec<Vec<StreamChunk>>,
) -> (Kernel, Agent, Arc<Script>) {
    run_with(window, prompt, responses, SUMMARY, 4000).await
}

/// The live events a run emitted.
#[derive(Default)]
struct Live {
    notices: Mutex<Vec<CompactionNoticePayload>>,
    completed: Mutex<Vec<CompactionCompletedPayload>>,
}

fn listen(kernel: &Kernel) -> Arc<Live> {
    let live = Arc::new(Live::default());
    let l = live.clone();
    kernel
        .root()
        .on_emit::<CompactionNotice>(move |p| l.notices.lock().unwrap().push(p.clone()))
        .unwrap()
        .detach();
    let l = live.clone();
    kernel
        .root()
        .on_emit::<CompactionCompleted>(move |p| l.completed.lock().unwrap().push(p.clone()))
        .unwrap()
        .detach();
    live
}

async fn run_with(
    window: u64,
    prompt: &str,
    responses: Vec<Vec<StreamChunk>>,
    summary: &str,
    result_chars: usize,
) -> (Kernel, Agent, Arc<Script>) {
    let kernel = Kernel::new();
    kernel.boot().await.expect("boot");
    let live = listen(&kernel);
    let script = Arc::new(Script {
        live,
        window,
        summary: summary.to_owned(),
        responses: Mutex::new(responses.into()),
        requests: Mutex::default(),
        session: Mutex::default(),
    });
    let llm = kernel.root().require::<LlmService>().unwrap();
    llm.register_adapter(vec!["test".into()], script.clone())
        .unwrap()
        .detach();
    let tools = kernel.root().require::<ToolRegistry>().unwrap();
    tools
        .register_tool(kernel.root(), Big(result_chars))
        .unwrap()
        .detach();
    let registry = kernel.root().require::<AgentRegistry>().unwrap();
    let agent = registry
        .create(CreateAgentOptions {
            id: Some("compaction-e2e".into()),
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
    *script.session.lock().unwrap() = Some(agent.session().clone());
    agent.followup(Message::user_text(prompt)).unwrap();
    tokio::time::timeout(Duration::from_secs(60), agent.when_idle())
        .await
        .expect("agent became idle");
    (kernel, agent, script)
}

fn kinds_of(session: &Session, prefix: &str) -> Vec<String> {
    session
        .events()
        .iter()
        .map(|e| e.kind.as_str().to_owned())
        .filter(|k| k.starts_with(prefix))
        .collect()
}

fn turn_end(session: &Session) -> serde_json::Value {
    session
        .events()
        .iter()
        .rev()
        .find_map(|e| match &e.data {
            EventData::TurnEnd(d) => serde_json::to_value(&d.reason).ok(),
            _ => None,
        })
        .unwrap()
}

/// Every tool call in `messages` has its result after it and every result follows its call.
fn paired(messages: &[Arc<Message>]) -> bool {
    let mut open: HashSet<String> = HashSet::new();
    for m in messages {
        for (id, _, _) in m.tool_calls() {
            open.insert(id.to_string());
        }
        for b in &m.content {
            if let ContentBlock::ToolResult { tool_call_id, .. } = b
                && !open.remove(&tool_call_id.to_string())
            {
                return false;
            }
        }
    }
    open.is_empty()
}

#[tokio::test]
async fn pressure_compacts_before_steps_and_every_request_fits() {
    let mut responses: Vec<Vec<StreamChunk>> = (1..=14).map(|i| call(&format!("c{i}"))).collect();
    responses.push(text("All read."));
    let (_k, agent, script) = run(6000, "Read the big files.", responses).await;
    let session = agent.session();
    assert_eq!(turn_end(session), json!({"kind": "completed"}));
    let starts = kinds_of(session, "compaction/start").len();
    // ~1,022 tokens per step against a 4,800-token threshold: steps 5, 9 and 13 compact.
    assert_eq!(starts, 3);
    assert_eq!(kinds_of(session, "compaction/end").len(), starts);
    assert_eq!(
        check_invariants(&session.events(), Some(session.registry())),
        vec![]
    );

    let events: Vec<SessionEvent> = session.events().iter().map(|e| (**e).clone()).collect();
    let all: Vec<Arc<SessionEvent>> = session.events();
    let requests = script.requests.lock().unwrap();
    let (summaries, steps): (Vec<&Recorded>, Vec<&Recorded>) = requests
        .iter()
        .partition(|r| r.opts.purpose == Some(CallPurpose::Compaction));
    assert_eq!(summaries.len(), starts);
    assert_eq!(steps.len(), 15);
    for (i, r) in steps.iter().enumerate() {
        // Under the window by the meter's estimate, calls paired, and built from the log.
        let total = TokenMeter::measure_events(&all[..r.log_len]).total_tokens;
        assert!(
            total < 4800,
            "request {i}: {total} tokens (threshold 4,800)"
        );
        assert!(
            paired(&r.opts.messages),
            "request {i} splits a call from its result"
        );
        let prefix = Session::from_restore(session.id(), events[..r.log_len].to_vec(), None)
            .expect("prefix restores");
        let derived: Vec<Message> = prefix
            .derive_messages()
            .iter()
            .map(|m| (**m).clone())
            .collect();
        let sent: Vec<Message> = r.opts.messages.iter().map(|m| (**m).clone()).collect();
        assert_eq!(sent, derived, "request {i} is not the log-derived history");
    }
    for r in &summaries {
        let last = r.opts.messages.last().unwrap();
        assert!(last.text().contains("## Primary Request and Intent"));
        assert_eq!(r.opts.tools.len(), 1);
        assert!(paired(&r.opts.messages[..r.opts.messages.len() - 1]));
    }
    // The final history starts with the newest checkpoint.
    let first = session.derive_messages()[0].clone();
    assert!(dsh_compaction::is_checkpoint(&first));
}

#[tokio::test]
async fn overflow_compacts_and_retries_once_then_a_second_overflow_ends_the_turn() {
    let prompt = "Read this: ".to_owned() + &"p".repeat(4000);
    let (_k, agent, script) = run(
        1_000_000,
        &prompt,
        vec![call("c1"), overflow(), text("Recovered.")],
    )
    .await;
    let session = agent.session();
    assert_eq!(turn_end(session), json!({"kind": "completed"}));
    assert_eq!(kinds_of(session, "compaction/start").len(), 1);
    assert_eq!(
        check_invariants(&session.events(), Some(session.registry())),
        vec![]
    );
    {
        let requests = script.requests.lock().unwrap();
        // step 1, step 2 (overflow), summary, step 2 again.
        let purposes: Vec<bool> = requests
            .iter()
            .map(|r| r.opts.purpose == Some(CallPurpose::Compaction))
            .collect();
        assert_eq!(purposes, vec![false, false, true, false]);
        let retried = &requests[3].opts.messages;
        assert!(dsh_compaction::is_checkpoint(&retried[0]));
        assert_eq!(retried.len(), 3, "checkpoint, call, result");
    }

    let (_k, agent, script) = run(
        1_000_000,
        &prompt,
        vec![call("c1"), overflow(), overflow(), text("never")],
    )
    .await;
    let session = agent.session();
    assert_eq!(
        turn_end(session),
        json!({"kind": "error", "error": {
            "message": "test: This model's maximum context length is 6000 tokens (HTTP 400)",
            "code": "CONTEXT_WINDOW_EXCEEDED", "status": 400
        }})
    );
    let steps = script
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.opts.purpose != Some(CallPurpose::Compaction))
        .count();
    assert_eq!(steps, 3, "one retry, no loop");
}

#[tokio::test]
async fn a_refused_region_is_not_summarised_again_by_the_overflow_retry() {
    // Every summary is far larger than its source. Step 6's pre-step compaction is refused
    // (the turn goes on uncompacted, with a notice); step 6's request then overflows, and the
    // overflow trigger selects the same region (the newest step alone is over the retained
    // tail): it is not summarised again, the surface does not change, so no retry either.
    let mut responses: Vec<Vec<StreamChunk>> = (1..=5).map(|i| call(&format!("c{i}"))).collect();
    responses.push(overflow());
    let (_k, agent, script) = run_with(
        6000,
        "Read the big files.",
        responses,
        &"y".repeat(40_000),
        4000,
    )
    .await;
    let session = agent.session();
    let requests = script.requests.lock().unwrap();
    let purposes: Vec<bool> = requests
        .iter()
        .map(|r| r.opts.purpose == Some(CallPurpose::Compaction))
        .collect();
    assert_eq!(
        purposes,
        vec![false, false, false, false, false, true, false]
    );
    assert_eq!(
        kinds_of(session, "compaction/"),
        vec!["compaction/start", "compaction/end"]
    );
    assert_eq!(
        turn_end(session)["error"]["code"],
        json!("CONTEXT_WINDOW_EXCEEDED")
    );
    assert_eq!(
        check_invariants(&session.events(), Some(session.registry())),
        vec![]
    );
    let notices = script.live.notices.lock().unwrap();
    assert_eq!(notices.len(), 1);
    assert_eq!(
        (
            notices[0].trigger,
            notices[0].level,
            notices[0].code.as_str(),
            notices[0].turn
        ),
        (
            CompactionCause::Pressure,
            NoticeLevel::Warning,
            "SUMMARY_NOT_SMALLER",
            Some(1)
        )
    );
    assert!(
        notices[0]
            .message
            .starts_with("automatic compaction failed; the turn goes on uncompacted: "),
        "{}",
        notices[0].message
    );
    assert_eq!(*script.live.completed.lock().unwrap(), vec![]);
}

#[tokio::test]
async fn after_a_checkpoint_the_next_compaction_never_summarises_only_that_checkpoint() {
    // 8,000-character results (about 2,000 tokens, under the pruner's 8,192) against a
    // 2,400-token window (threshold 1,920, retain 384): after the first compaction the
    // surface is [checkpoint, call, result] and still over the threshold, but the only span
    // left before the kept step is the checkpoint itself, which is not summarised again.
    let prompt = "Read this: ".to_owned() + &"p".repeat(2000);
    let responses = vec![call("c1"), call("c2"), call("c3"), text("Done.")];
    let (_k, agent, script) = run_with(2400, &prompt, responses, SUMMARY, 8000).await;
    let session = agent.session();
    assert_eq!(turn_end(session), json!({"kind": "completed"}));
    let requests = script.requests.lock().unwrap();
    let summaries: Vec<&Recorded> = requests
        .iter()
        .filter(|r| r.opts.purpose == Some(CallPurpose::Compaction))
        .collect();
    assert_eq!(summaries.len(), 3);
    for (i, r) in summaries.iter().enumerate() {
        let shadowed = &r.opts.messages[..r.opts.messages.len() - 1];
        assert!(
            !(shadowed.len() == 1 && dsh_compaction::is_checkpoint(&shadowed[0])),
            "compaction {i} re-summarised only the previous checkpoint"
        );
        if i > 0 {
            // Later compactions merge the previous checkpoint with newer steps; a step whose
            // ~2,000-token result does not fit the 2,400-token window beside the checkpoint
            // is dropped with a marker instead of overflowing the summarisation request.
            assert!(dsh_compaction::is_checkpoint(&shadowed[0]));
            assert_eq!(shadowed.len(), 2, "checkpoint, marker");
            assert_eq!(
                shadowed[1].content,
                vec![dsh_llm::ContentBlock::text(
                    "[2 older history items were dropped here without being summarised: they \
                     did not fit the model's context window]"
                )]
            );
        }
    }
    let completed = script.live.completed.lock().unwrap();
    assert_eq!(completed.len(), 3);
    assert!(
        completed
            .iter()
            .all(|c| c.trigger == CompactionCause::Pressure && c.tokens_after < c.tokens_before)
    );
    assert_eq!(
        check_invariants(&session.events(), Some(session.registry())),
        vec![]
    );
}

/// The text inside a tool-result message.
fn result_text(m: &Message) -> String {
    m.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(
                content
                    .iter()
                    .filter_map(ContentBlock::as_text)
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn old_oversized_results_are_pruned_in_the_request_and_kept_in_the_log() {
    // 12,000-character results (about 3,000 tokens each) against an 8,000-token window
    // (threshold 6,400): before step 4 the three results are pruned to 4096 + marker + 1024
    // code points, which alone brings the request under the threshold: nothing is summarised.
    let responses = vec![call("c1"), call("c2"), call("c3"), text("Done.")];
    let (_k, agent, script) =
        run_with(8000, "Read the big files.", responses, SUMMARY, 12_000).await;
    let session = agent.session();
    assert_eq!(turn_end(session), json!({"kind": "completed"}));
    let requests = script.requests.lock().unwrap();
    assert!(
        requests
            .iter()
            .all(|r| r.opts.purpose != Some(CallPurpose::Compaction)),
        "no summarisation call"
    );
    assert_eq!(requests.len(), 4);
    let pruned_len = 4096 + "\n\n[... tool result middle pruned ...]\n\n".len() + 1024;
    let sizes = |r: &Recorded| -> Vec<usize> {
        r.opts
            .messages
            .iter()
            .map(|m| result_text(m).chars().count())
            .filter(|&n| n > 0)
            .collect()
    };
    assert_eq!(sizes(&requests[2]), vec![12_000, 12_000]);
    assert_eq!(sizes(&requests[3]), vec![pruned_len; 3]);
    // The log keeps the three originals; the surface holds the three replacements.
    let originals = session
        .events()
        .iter()
        .filter(|e| {
            matches!(&e.data, EventData::ToolResult(d)
                if e.surface_op == Some(dsh_session::SurfaceOp::Append)
                    && result_text(&d.message) == "x".repeat(12_000))
        })
        .count();
    assert_eq!(originals, 3);
    assert_eq!(
        kinds_of(session, "compaction/"),
        vec!["compaction/prune"; 3]
    );
    assert_eq!(
        check_invariants(&session.events(), Some(session.registry())),
        vec![]
    );
    let completed = script.live.completed.lock().unwrap();
    assert_eq!(completed.len(), 1);
    assert_eq!(
        (
            completed[0].trigger,
            completed[0].compaction_id.as_deref(),
            completed[0].shadowed_count,
            completed[0].pruned_count
        ),
        (CompactionCause::Pressure, None, 0, 3)
    );
    // Meter estimates right before the first prune and at the next request.
    let all = session.events();
    let first_prune = all
        .iter()
        .position(|e| e.kind.as_str() == "compaction/prune")
        .unwrap();
    let before = TokenMeter::measure_events(&all[..first_prune]).total_tokens;
    let after = TokenMeter::measure_events(&all[..requests[3].log_len]).total_tokens;
    assert_eq!(
        (completed[0].tokens_before, completed[0].tokens_after),
        (before, after)
    );
    assert!(before >= 6400 && after < 6400, "{before} → {after}");
}

/// Trial defect 1: a session that grew past its window while the window was unknown (so no
/// pressure compaction ran) recovers from the context-window error: the error's stated limit
/// (6,000) sizes the summarisation request, which drops the oldest part with a marker.
#[tokio::test]
async fn a_session_past_an_unknown_window_recovers_from_the_overflow() {
    let prompt = "Read this: ".to_owned() + &"p".repeat(400);
    let mut responses: Vec<_> = (1..=8).map(|i| call(&format!("c{i}"))).collect();
    responses.push(overflow());
    responses.push(text("Recovered."));
    let (_k, agent, script) = run_with(0, &prompt, responses, SUMMARY, 4000).await;
    let session = agent.session();
    assert_eq!(turn_end(session), json!({"kind": "completed"}));
    let requests = script.requests.lock().unwrap();
    let summaries: Vec<&Recorded> = requests
        .iter()
        .filter(|r| r.opts.purpose == Some(CallPurpose::Compaction))
        .collect();
    assert_eq!(summaries.len(), 1);
    let opts = &summaries[0].opts;
    let input = dsh_token_meter::estimate_system(opts.system.as_deref())
        + dsh_token_meter::estimate_tools(Some(&serde_json::to_value(&opts.tools).unwrap()))
        + opts
            .messages
            .iter()
            .map(|m| dsh_token_meter::estimate_message(m))
            .sum::<u64>();
    let max_tokens = opts.max_tokens.unwrap();
    assert!(input + max_tokens <= 6000, "{input} + {max_tokens}");
    assert!(
        dsh_compaction::checkpoint::is_checkpoint(&opts.messages[0]) || {
            let t = opts.messages[0].content[0].as_text().unwrap_or_default();
            t.ends_with("did not fit the model's context window]")
        },
        "the oldest part is dropped with a marker"
    );
    assert_eq!(
        requests.last().unwrap().opts.purpose,
        None,
        "the step is retried after the compaction"
    );
}
