//! Integration tests of the agent loop: real kernel, real session, real tools pipeline, and a
//! scripted in-process adapter. Each test asserts the exact event sequence of the log.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test harness")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{
    AgentCancelCause, AgentPreStep, AgentRequestError, PreStepDecision, RetryDecision,
};
use dsh_kernel::ErrorCode;
use dsh_llm::{ContentBlock, FinishReason, StreamChunk};
use dsh_tools::{ToolFailure, ToolRegistry, define_tool};
use serde_json::json;
use support::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// Text to echo.
    text: String,
    /// Milliseconds to sleep first.
    sleep_ms: Option<u64>,
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct EchoOut {
    echoed: String,
}

fn register_echo(h: &Harness, parallel: bool) {
    let tools = h.kernel.root().require::<ToolRegistry>().unwrap();
    let mut b = define_tool::<EchoArgs, EchoOut>("echo", "Echo text.");
    if parallel {
        b = b.always_concurrency_safe();
    }
    let def = b
        .render(|_, o| vec![ContentBlock::text(o.echoed.clone())])
        .execute(|a, cx| async move {
            if let Some(ms) = a.sleep_ms {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    () = cx.signal.cancelled() => return Err(ToolFailure::message("cancelled")),
                }
            }
            Ok(EchoOut { echoed: a.text })
        })
        .unwrap();
    tools.register(h.kernel.root(), def).unwrap().detach();
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

#[tokio::test]
async fn text_turn_event_sequence() {
    let h = Harness::new(vec![text("hello")]).await;
    let agent = h.agent().await;
    agent.followup(user("hi")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    assert_eq!(
        kinds(session),
        s(&[
            "agent/inbox/spliced",
            "turn/start",
            "agent/inbox/spliced",
            "step/start",
            "user/message",
            "request/header",
            "request/context",
            "assistant/chunk*4",
            "assistant/message",
            "step/end",
            "turn/end",
        ])
    );
    assert_eq!(turn_end_reasons(session), vec![json!({"kind":"completed"})]);
    let msgs = session.derive_messages();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1].text(), "hello");
    let header = session.request_header().unwrap();
    assert_eq!(
        serde_json::to_value(&header).unwrap(),
        json!({"config":{"provider":"test","model":"m"},"system":"You are an AI agent powered by dsh."})
    );
    assert_requests_reconstructable(&h.script, session);
}

#[tokio::test]
async fn three_step_tool_turn() {
    let h = Harness::new(vec![
        tool_calls(&[("c1", "echo", r#"{"text":"one"}"#)]),
        tool_calls(&[("c2", "echo", r#"{"text":"two"}"#)]),
        text("done"),
    ])
    .await;
    register_echo(&h, false);
    let agent = h.agent().await;
    agent.followup(user("go")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    assert_eq!(
        kinds(session),
        s(&[
            "agent/inbox/spliced",
            "turn/start",
            "agent/inbox/spliced",
            "step/start",
            "user/message",
            "request/header",
            "request/context",
            "assistant/chunk*4",
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "step/start",
            "assistant/chunk*4",
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "step/start",
            "assistant/chunk*4",
            "assistant/message",
            "step/end",
            "turn/end",
        ])
    );
    // The header was logged once: nothing changed between steps.
    let msgs = session.derive_messages();
    assert_eq!(msgs.len(), 6);
    assert_eq!(
        serde_json::to_value(&msgs[2].content).unwrap(),
        json!([{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"one"}],"isError":false}])
    );
    // Step 2's request ends with step 1's tool result; step 3's with step 2's.
    let reqs = h.script.requests.lock().unwrap();
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        reqs[1].opts.messages.last().unwrap().content,
        msgs[2].content
    );
    assert_eq!(
        reqs[2].opts.messages.last().unwrap().content,
        msgs[4].content
    );
    drop(reqs);
    assert_requests_reconstructable(&h.script, session);
}

#[tokio::test]
async fn parallel_safe_calls_commit_in_model_order() {
    let h = Harness::new(vec![
        tool_calls(&[
            ("slow", "echo", r#"{"text":"first","sleep_ms":200}"#),
            ("fast", "echo", r#"{"text":"second"}"#),
        ]),
        text("ok"),
    ])
    .await;
    register_echo(&h, true);
    let agent = h.agent().await;
    agent.followup(user("go")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    let calls: Vec<String> = session
        .events()
        .iter()
        .filter(|e| e.kind.as_str().starts_with("tool/"))
        .map(|e| {
            let v = e.data.to_value();
            let id = v
                .get("callId")
                .cloned()
                .or_else(|| v.pointer("/message/source/callId").cloned())
                .unwrap();
            format!("{}:{}", e.kind.as_str(), id.as_str().unwrap())
        })
        .collect();
    // Both start before either result; results in model order although `fast` finished first.
    assert_eq!(
        calls,
        s(&[
            "tool/call:slow",
            "tool/call:fast",
            "tool/result:slow",
            "tool/result:fast"
        ])
    );
}

#[tokio::test]
async fn followups_queue_fifo_one_per_turn() {
    let h = Harness::new(vec![text("a"), text("b"), text("c")]).await;
    let agent = h.agent().await;
    agent.followup(user("one")).unwrap();
    agent.followup(user("two")).unwrap();
    agent.followup(user("three")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    let prompts: Vec<String> = session
        .events()
        .iter()
        .filter_map(|e| match &e.data {
            dsh_session::EventData::UserMessage(m) => Some(m.text()),
            _ => None,
        })
        .collect();
    assert_eq!(prompts, s(&["one", "two", "three"]));
    assert_eq!(turn_end_reasons(session).len(), 3);
    let reqs = h.script.requests.lock().unwrap();
    assert_eq!(reqs[2].opts.messages.len(), 5);
}

#[tokio::test]
async fn inject_while_idle_waits_for_the_next_wake() {
    let h = Harness::new(vec![text("ok")]).await;
    let agent = h.agent().await;
    agent.inject(user("context")).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(kinds(agent.session()), s(&["agent/inbox/spliced"]));
    agent.followup(user("prompt")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    let texts: Vec<String> = session.derive_messages().iter().map(|m| m.text()).collect();
    // At the turn boundary the prompt comes first, then the injected next-step input.
    assert_eq!(texts, s(&["prompt", "context", "ok"]));
}

#[tokio::test]
async fn steering_during_a_running_step_enters_the_next_step() {
    let h = Harness::new(vec![
        tool_calls(&[("c1", "echo", r#"{"text":"x","sleep_ms":300}"#)]),
        text("steered"),
    ])
    .await;
    register_echo(&h, false);
    let agent = h.agent().await;
    agent.followup(user("go")).unwrap();
    // Wait for the tool call to start, then steer.
    for _ in 0..200 {
        if kinds(agent.session()).contains(&"tool/call".to_owned()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    agent.steer(user("also do y")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    let texts: Vec<String> = session.derive_messages().iter().map(|m| m.text()).collect();
    assert_eq!(texts, s(&["go", "", "", "also do y", "steered"]));
    assert_eq!(turn_end_reasons(session).len(), 1);
}

#[tokio::test]
async fn pre_step_reject_ends_the_turn_blocked() {
    let h = Harness::new(vec![]).await;
    h.kernel
        .root()
        .on_waterfall::<AgentPreStep, _, _>(|_, _next| async { PreStepDecision::Reject })
        .unwrap()
        .detach();
    let agent = h.agent().await;
    agent.followup(user("blocked?")).unwrap();
    idle(&agent).await;
    assert_eq!(
        kinds(agent.session()),
        s(&[
            "agent/inbox/spliced",
            "turn/start",
            "agent/inbox/spliced",
            "turn/end"
        ])
    );
    assert_eq!(
        turn_end_reasons(agent.session()),
        vec![json!({"kind":"blocked"})]
    );
    assert!(h.script.requests.lock().unwrap().is_empty());
}

#[tokio::test]
async fn max_tokens_drops_tool_calls_and_is_sticky() {
    let h = Harness::new(vec![Resp::Chunks(vec![
        StreamChunk::TextDelta {
            index: 0,
            text: "partial".into(),
        },
        StreamChunk::ToolCallDelta {
            index: 1,
            id: "c1".into(),
            name: Some("echo".into()),
            arguments_delta: "{".into(),
        },
        finish(FinishReason::MaxTokens),
    ])])
    .await;
    register_echo(&h, false);
    let agent = h.agent().await;
    agent.followup(user("go")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    assert_eq!(
        turn_end_reasons(session),
        vec![json!({"kind":"max-tokens"})]
    );
    assert!(!kinds(session).contains(&"tool/call".to_owned()));
    assert_eq!(session.derive_messages()[1].text(), "partial");
}

#[tokio::test]
async fn request_error_then_retry_success_stays_in_the_same_turn_and_step() {
    let h = Harness::new(vec![failure("SERVER"), text("recovered")]).await;
    h.kernel
        .root()
        .on_waterfall::<AgentRequestError, _, _>(|_, _next| async { Some(RetryDecision::Retry) })
        .unwrap()
        .detach();
    let agent = h.agent().await;
    agent.followup(user("go")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    assert_eq!(
        kinds(session),
        s(&[
            "agent/inbox/spliced",
            "turn/start",
            "agent/inbox/spliced",
            "step/start",
            "user/message",
            "request/header",
            "request/context",
            "assistant/chunk*5",
            "assistant/message",
            "step/end",
            "turn/end",
        ])
    );
    assert_eq!(turn_end_reasons(session), vec![json!({"kind":"completed"})]);
    assert_eq!(h.script.requests.lock().unwrap().len(), 2);
    assert_requests_reconstructable(&h.script, session);
}

#[tokio::test]
async fn unrecovered_request_error_ends_the_turn_with_error() {
    let h = Harness::new(vec![failure("AUTH")]).await;
    let agent = h.agent().await;
    agent.followup(user("go")).unwrap();
    idle(&agent).await;
    assert_eq!(
        turn_end_reasons(agent.session()),
        vec![json!({"kind":"error","error":{"message":"simulated AUTH","code":"AUTH"}})]
    );
}

#[tokio::test]
async fn cancel_mid_stream_logs_the_partial_message_as_interrupted() {
    let h = Harness::new(vec![Resp::Hang(vec![
        StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into(),
        },
        StreamChunk::TextDelta {
            index: 0,
            text: "partial".into(),
        },
    ])])
    .await;
    let agent = h.agent().await;
    agent.followup(user("long task")).unwrap();
    for _ in 0..400 {
        if kinds(agent.session()).contains(&"assistant/chunk*2".to_owned()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    agent.cancel(AgentCancelCause::User, false);
    idle(&agent).await;
    let session = agent.session();
    assert_eq!(
        kinds(session),
        s(&[
            "agent/inbox/spliced",
            "turn/start",
            "agent/inbox/spliced",
            "step/start",
            "user/message",
            "request/header",
            "request/context",
            "assistant/chunk*2",
            "assistant/message",
            "step/end",
            "turn/end",
        ])
    );
    let last_msg = session
        .events()
        .iter()
        .rev()
        .find(|e| e.kind.as_str() == "assistant/message")
        .unwrap()
        .data
        .to_value();
    assert_eq!(last_msg["interrupted"], json!(true));
    assert_eq!(
        last_msg["message"]["content"],
        json!([{"type":"text","text":"partial"}])
    );
    assert_eq!(
        turn_end_reasons(session),
        vec![json!({"kind":"aborted","reason":{"kind":"user"}})]
    );
}

#[tokio::test]
async fn cancel_mid_tool_leaves_no_call_without_a_result() {
    let h = Harness::new(vec![tool_calls(&[
        ("c1", "echo", r#"{"text":"a","sleep_ms":10000}"#),
        ("c2", "echo", r#"{"text":"b"}"#),
    ])])
    .await;
    register_echo(&h, false);
    let agent = h.agent().await;
    agent.followup(user("go")).unwrap();
    for _ in 0..400 {
        if kinds(agent.session()).contains(&"tool/call".to_owned()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    agent.cancel(AgentCancelCause::User, false);
    idle(&agent).await;
    let session = agent.session();
    let tail: Vec<String> = kinds(session).into_iter().skip(8).collect();
    assert_eq!(
        tail,
        s(&[
            "assistant/message",
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result",
            "step/end",
            "turn/end"
        ])
    );
    let results: Vec<String> = session
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == "tool/result")
        .map(|e| {
            e.data.to_value()["message"]["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(results[1], "Error: tool call aborted before dispatch");
    assert_eq!(
        turn_end_reasons(session),
        vec![json!({"kind":"aborted","reason":{"kind":"user"}})]
    );
}

#[tokio::test]
async fn header_is_relogged_only_on_change() {
    let h = Harness::new(vec![text("a"), text("b"), text("c")]).await;
    let agent = h.agent().await;
    agent.followup(user("one")).unwrap();
    idle(&agent).await;
    agent.followup(user("two")).unwrap();
    idle(&agent).await;
    let mut opts = agent.options();
    opts.max_tokens = Some(77);
    agent.set_options(opts);
    agent.followup(user("three")).unwrap();
    idle(&agent).await;
    let headers: Vec<serde_json::Value> = agent
        .session()
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == "request/header")
        .map(|e| e.data.to_value())
        .collect();
    assert_eq!(
        headers,
        vec![
            json!({"header":{"config":{"provider":"test","model":"m"},"system":"You are an AI agent powered by dsh."},"reason":"initial"}),
            json!({"header":{"config":{"provider":"test","model":"m","maxTokens":77},"system":"You are an AI agent powered by dsh."},"reason":"change"}),
        ]
    );
    let contexts = agent
        .session()
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == "request/context")
        .count();
    assert_eq!(contexts, 1);
    assert_requests_reconstructable(&h.script, agent.session());
}

#[tokio::test]
async fn agent_emits_are_scope_filtered_to_the_agent() {
    use dsh_agent::{AgentStatus, StatusKind};
    let h = Harness::new(vec![text("a"), text("b")]).await;
    let a1 = h.agent().await;
    let a2 = h
        .registry
        .create(dsh_agent::CreateAgentOptions {
            id: Some("s2".into()),
            options: a1.options(),
            ..Default::default()
        })
        .await
        .unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(String, StatusKind)>::new()));
    let s1 = seen.clone();
    a1.ctx()
        .on_emit::<AgentStatus>(move |p| {
            s1.lock()
                .unwrap()
                .push((p.session.id().to_owned(), p.status));
        })
        .unwrap()
        .detach();
    a2.followup(user("x")).unwrap();
    idle(&a2).await;
    a1.followup(user("y")).unwrap();
    idle(&a1).await;
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ("s1".to_owned(), StatusKind::Running),
            ("s1".to_owned(), StatusKind::Idle)
        ]
    );
}

#[tokio::test]
async fn runtime_contexts_travel_as_snapshots_sent_only_on_change() {
    use dsh_system_prompt::{PromptContext, PromptSection, SystemPrompt};
    let h = Harness::new(vec![text("a"), text("b"), text("c")]).await;
    let sp = h.kernel.root().require::<SystemPrompt>().unwrap();
    sp.section(
        h.kernel.root(),
        PromptSection::new("test:persona", 0.0, "Be brief."),
    )
    .unwrap()
    .detach();
    let policy = Arc::new(std::sync::Mutex::new("mode: ask".to_owned()));
    let p = policy.clone();
    sp.context(
        h.kernel.root(),
        PromptContext::new(
            "test:policy",
            0.0,
            dsh_system_prompt::PromptText::dynamic(move |_| p.lock().unwrap().clone()),
        ),
    )
    .unwrap()
    .detach();
    let agent = h.agent().await;
    agent.followup(user("one")).unwrap();
    idle(&agent).await;
    agent.followup(user("two")).unwrap();
    idle(&agent).await;
    *policy.lock().unwrap() = "mode: auto".to_owned();
    agent.followup(user("three")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    let texts: Vec<String> = session.derive_messages().iter().map(|m| m.text()).collect();
    assert_eq!(
        texts,
        s(&[
            "one",
            "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\nmode: ask",
            "a",
            "two",
            "b",
            "three",
            "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\nmode: auto",
            "c",
        ])
    );
    // The system prompt stayed stable: one header for all three turns.
    let headers: Vec<serde_json::Value> = session
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == "request/header")
        .map(|e| e.data.to_value()["header"]["system"].clone())
        .collect();
    assert_eq!(
        headers,
        vec![json!("You are an AI agent powered by dsh.\n\nBe brief.")]
    );
    assert_requests_reconstructable(&h.script, session);
}

/// Trial 14 defect 4: a pre-step replace (a compaction) that shadows the retained snapshot
/// makes the same step send the current snapshot again.
#[tokio::test]
async fn a_snapshot_shadowed_by_a_pre_step_replace_is_sent_again() {
    use dsh_system_prompt::{PromptContext, SystemPrompt};
    let h = Harness::new(vec![text("a"), text("b")]).await;
    let sp = h.kernel.root().require::<SystemPrompt>().unwrap();
    sp.context(
        h.kernel.root(),
        PromptContext::new(
            "test:policy",
            0.0,
            dsh_system_prompt::PromptText::dynamic(|_| "mode: ask".to_owned()),
        ),
    )
    .unwrap()
    .detach();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let a = armed.clone();
    h.kernel
        .root()
        .on_waterfall::<AgentPreStep, _, _>(move |p, next| {
            let a = a.clone();
            async move {
                if a.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    // Shadow the whole surface with one summary message.
                    let nodes = p.session.surface().nodes;
                    let (first, last) = (nodes[0], *nodes.last().unwrap());
                    p.session
                        .append(
                            "user/message",
                            dsh_session::EventData::UserMessage(Arc::new(user("summary"))),
                            Some(dsh_session::SurfaceIntent::replace(
                                first,
                                last,
                                nodes.clone(),
                            )),
                        )
                        .unwrap();
                }
                next.run(p).await
            }
        })
        .unwrap()
        .detach();
    let agent = h.agent().await;
    agent.followup(user("one")).unwrap();
    idle(&agent).await;
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    agent.followup(user("two")).unwrap();
    idle(&agent).await;
    let texts: Vec<String> = agent
        .session()
        .derive_messages()
        .iter()
        .map(|m| m.text())
        .collect();
    assert_eq!(
        texts,
        s(&[
            "summary",
            "two",
            "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\nmode: ask",
            "b",
        ])
    );
}

#[tokio::test]
async fn a_panicking_plugin_ends_the_turn_not_the_driver() {
    let h = Harness::new(vec![text("second turn works")]).await;
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let a = armed.clone();
    h.kernel
        .root()
        .on_waterfall::<dsh_agent::AgentRequest, _, _>(move |p, next| {
            let a = a.clone();
            async move {
                if a.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    panic!("listener bug");
                }
                next.run(p).await
            }
        })
        .unwrap()
        .detach();
    let agent = h.agent().await;
    agent.followup(user("one")).unwrap();
    idle(&agent).await;
    agent.followup(user("two")).unwrap();
    idle(&agent).await;
    let reasons = turn_end_reasons(agent.session());
    assert_eq!(
        reasons,
        vec![
            json!({"kind":"error","error":{"message":"a plugin panicked during the turn: listener bug","code":"PLUGIN_PANICKED"}}),
            json!({"kind":"completed"}),
        ]
    );
    let k = kinds(agent.session());
    assert_eq!(
        k[..6].to_vec(),
        s(&[
            "agent/inbox/spliced",
            "turn/start",
            "agent/inbox/spliced",
            "step/start",
            "user/message",
            "step/end"
        ])
    );
}

#[tokio::test]
async fn a_failing_request_listener_ends_the_turn_with_its_loop_code() {
    let h = Harness::new(vec![text("second turn works")]).await;
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let a = armed.clone();
    h.kernel
        .root()
        .on_waterfall::<dsh_agent::AgentRequest, _, _>(move |p, next| {
            let a = a.clone();
            async move {
                if a.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    return Err("no route today".into());
                }
                next.run(p).await
            }
        })
        .unwrap()
        .detach();
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = errors.clone();
    h.kernel
        .root()
        .on_emit::<dsh_agent::AgentErrorEvent>(move |p| {
            seen.lock().unwrap().push((p.turn, p.step, p.error.clone()));
        })
        .unwrap()
        .detach();
    let agent = h.agent().await;
    agent.followup(user("one")).unwrap();
    idle(&agent).await;
    agent.followup(user("two")).unwrap();
    idle(&agent).await;
    assert_eq!(
        turn_end_reasons(agent.session()),
        vec![
            json!({"kind":"error","error":{"message":"agent/request listener failed: no route today","code":"REQUEST_LISTENER_FAILED"}}),
            json!({"kind":"completed"}),
        ]
    );
    // `agent/error` carries the same failure; the failed step was closed before the turn ended.
    assert_eq!(
        *errors.lock().unwrap(),
        vec![(
            1,
            None,
            dsh_llm::LlmFailure::new(
                "REQUEST_LISTENER_FAILED",
                "agent/request listener failed: no route today"
            )
        )]
    );
}

#[tokio::test]
async fn a_failing_turn_stopping_listener_ends_the_turn_with_its_loop_code() {
    let h = Harness::new(vec![text("answer")]).await;
    h.kernel
        .root()
        .on_serial::<dsh_agent::AgentTurnStopping, _, _>(|_| async { Err("veto".into()) })
        .unwrap()
        .detach();
    let agent = h.agent().await;
    agent.followup(user("one")).unwrap();
    idle(&agent).await;
    assert_eq!(
        turn_end_reasons(agent.session()),
        vec![json!({"kind":"error","error":{
            "message":"agent/turn-stopping listener failed: listener of `agent/turn-stopping` failed: veto",
            "code":"TURN_STOPPING_FAILED"
        }})]
    );
    // The answer itself was recorded before the stop check failed.
    let k = kinds(agent.session());
    assert_eq!(
        k[k.len() - 3..].to_vec(),
        s(&["assistant/message", "step/end", "turn/end"])
    );
}

#[tokio::test]
async fn system_prompt_follows_variable_and_section_changes_across_turns() {
    // The loop reuses the last rendered system prompt while its sections and variables are
    // unchanged; a changed variable value or a new section must still re-render it.
    use dsh_system_prompt::{PromptSection, SystemPrompt};
    let h = Harness::new(vec![text("a"), text("b"), text("c"), text("d")]).await;
    let sp = h.kernel.root().require::<SystemPrompt>().unwrap();
    let mode = Arc::new(std::sync::Mutex::new("ask".to_owned()));
    let m = mode.clone();
    sp.variable(h.kernel.root(), "mode", move |_| {
        Some(m.lock().unwrap().clone())
    })
    .unwrap()
    .detach();
    sp.section(
        h.kernel.root(),
        PromptSection::new("test:mode", 0.0, "Mode: {{mode}}."),
    )
    .unwrap()
    .detach();
    let agent = h.agent().await;
    agent.followup(user("one")).unwrap();
    idle(&agent).await;
    agent.followup(user("two")).unwrap();
    idle(&agent).await;
    *mode.lock().unwrap() = "auto".to_owned();
    agent.followup(user("three")).unwrap();
    idle(&agent).await;
    let extra = sp
        .section(
            h.kernel.root(),
            PromptSection::new("test:late", 1.0, "Late."),
        )
        .unwrap();
    agent.followup(user("four")).unwrap();
    idle(&agent).await;
    drop(extra);
    let headers: Vec<serde_json::Value> = agent
        .session()
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == "request/header")
        .map(|e| {
            let v = e.data.to_value();
            json!([v["header"]["system"], v["reason"]])
        })
        .collect();
    let identity = "You are an AI agent powered by dsh.";
    assert_eq!(
        headers,
        vec![
            json!([format!("{identity}\n\nMode: ask."), "initial"]),
            json!([format!("{identity}\n\nMode: auto."), "change"]),
            json!([format!("{identity}\n\nMode: auto.\n\nLate."), "change"]),
        ]
    );
    assert_requests_reconstructable(&h.script, agent.session());
}

#[tokio::test]
async fn header_relogs_when_the_tool_set_changes_and_only_then() {
    // Steps reuse the schemas the last logged header was built from; a new tool must still
    // re-log the header (reason change), and an unchanged set must not.
    let h = Harness::new(vec![text("a"), text("b"), text("c")]).await;
    let agent = h.agent().await;
    agent.followup(user("one")).unwrap();
    idle(&agent).await;
    register_echo(&h, false);
    agent.followup(user("two")).unwrap();
    idle(&agent).await;
    agent.followup(user("three")).unwrap();
    idle(&agent).await;
    let headers: Vec<serde_json::Value> = agent
        .session()
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == "request/header")
        .map(|e| {
            let v = e.data.to_value();
            let names: Vec<serde_json::Value> = v["header"]["tools"]
                .as_array()
                .map(|a| a.iter().map(|t| t["name"].clone()).collect())
                .unwrap_or_default();
            json!([names, v["reason"]])
        })
        .collect();
    assert_eq!(
        headers,
        vec![json!([[], "initial"]), json!([["echo"], "change"])]
    );
    assert_requests_reconstructable(&h.script, agent.session());
}

#[tokio::test]
async fn maintenance_runs_from_idle_and_holds_waking_input_until_it_settles() {
    let h = Harness::new(vec![text("after maintenance")]).await;
    let agent = h.agent().await;
    let (release, wait) = tokio::sync::oneshot::channel::<()>();
    let a = agent.clone();
    let task = tokio::spawn(async move {
        a.run_maintenance(|_signal| async move {
            let _ = wait.await;
            42
        })
        .await
    });
    // Wait until the maintenance task owns the agent.
    for _ in 0..200 {
        if agent
            .run_maintenance(|_| async {})
            .await
            .is_err_and(|e| e.code() == "AGENT_BUSY")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Waking input is queued but no turn starts while maintenance runs; status stays idle.
    agent.followup(user("queued")).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(agent.status(), dsh_agent::StatusKind::Idle);
    assert!(!kinds(agent.session()).contains(&"turn/start".to_owned()));
    release.send(()).unwrap();
    assert_eq!(task.await.unwrap().unwrap(), 42);
    // The latched input runs once maintenance settled.
    idle(&agent).await;
    assert_eq!(
        turn_end_reasons(agent.session()),
        vec![json!({"kind":"completed"})]
    );
}

#[tokio::test]
async fn disposing_an_agent_drains_its_running_turn() {
    let h = Harness::new(vec![Resp::Hang(vec![StreamChunk::TextDelta {
        index: 0,
        text: "partial".into(),
    }])])
    .await;
    let agent = h.agent().await;
    agent.followup(user("long")).unwrap();
    for _ in 0..400 {
        if kinds(agent.session()).contains(&"assistant/chunk*1".to_owned()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(h.registry.dispose(agent.id().as_str()).await);
    // The turn was cancelled with cause `disposed` and closed before disposal returned.
    assert_eq!(
        turn_end_reasons(agent.session()),
        vec![json!({"kind":"aborted","reason":{"kind":"disposed"}})]
    );
    assert!(h.registry.get(agent.id().as_str()).is_none());
    assert!(!agent.ctx().is_active());
    assert_eq!(
        agent.followup(user("late")).unwrap_err().code(),
        "AGENT_DISPOSED"
    );
}

/// A model that calls a tool at every step stops at `max_steps_per_turn`: exactly that many
/// requests, each step closed with its tool result, and the turn ends `max-steps` (the limit in
/// the reason); the steps' retried requests would not count (none here).
#[tokio::test]
async fn the_step_limit_ends_an_endless_tool_caller() {
    let responses = (1..=10)
        .map(|i| tool_calls(&[(&format!("c{i}"), "echo", r#"{"text":"again"}"#)]))
        .collect();
    let h = Harness::with_loop_settings(responses, Some(json!({"max_steps_per_turn": 3}))).await;
    register_echo(&h, false);
    let agent = h.agent().await;
    agent.followup(user("loop")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    assert_eq!(h.script.requests.lock().unwrap().len(), 3);
    assert_eq!(
        turn_end_reasons(session),
        vec![json!({"kind":"max-steps","limit":3})]
    );
    let steps: Vec<String> = kinds(session)
        .into_iter()
        .filter(|k| k.starts_with("step/") || k.starts_with("tool/"))
        .collect();
    assert_eq!(
        steps,
        s(&[
            "step/start",
            "tool/call",
            "tool/result",
            "step/end",
            "step/start",
            "tool/call",
            "tool/result",
            "step/end",
            "step/start",
            "tool/call",
            "tool/result",
            "step/end",
        ])
    );
    assert_eq!(
        dsh_agent_loop::max_steps_limit(&dsh_agent_loop::max_steps_reason(3)),
        Some(3)
    );
}

/// The default limit is 200 steps, and `0` turns the limit off.
#[tokio::test]
async fn the_step_limit_defaults_to_200_and_zero_turns_it_off() {
    assert_eq!(
        dsh_agent_loop::LoopConfig::default().max_steps_per_turn,
        200
    );
    let responses = (1..=4)
        .map(|i| tool_calls(&[(&format!("c{i}"), "echo", r#"{"text":"again"}"#)]))
        .chain([text("done")])
        .collect();
    let h = Harness::with_loop_settings(responses, Some(json!({"max_steps_per_turn": 0}))).await;
    register_echo(&h, false);
    let agent = h.agent().await;
    agent.followup(user("loop")).unwrap();
    idle(&agent).await;
    assert_eq!(h.script.requests.lock().unwrap().len(), 5);
    assert_eq!(
        turn_end_reasons(agent.session()),
        vec![json!({"kind":"completed"})]
    );
}

/// The logged chunks of the session as JSON values (turn, step and chunk).
fn logged_chunks(session: &dsh_session::Session) -> Vec<serde_json::Value> {
    session
        .events()
        .iter()
        .filter_map(|e| match &e.data {
            dsh_session::EventData::AssistantChunk(c) => {
                Some(serde_json::to_value(&c.chunk).unwrap())
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_block_end_equal_to_its_logged_deltas_is_not_logged() {
    let h = Harness::new(vec![
        tool_calls(&[("c1", "echo", r#"{"text":"one"}"#)]),
        text("done"),
    ])
    .await;
    register_echo(&h, false);
    let agent = h.agent().await;
    agent.followup(user("go")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    assert_eq!(
        logged_chunks(session),
        vec![
            json!({"type":"block-start","index":0,"blockType":"tool-call"}),
            json!({"type":"tool-call-delta","index":0,"id":"c1","name":"echo","argumentsDelta":"{\"text\":\"one\"}"}),
            json!({"type":"usage","usage":{"inputTokens":10,"outputTokens":5}}),
            json!({"type":"finish","reason":{"kind":"tool-calls"}}),
            json!({"type":"block-start","index":0,"blockType":"text"}),
            json!({"type":"text-delta","index":0,"text":"done"}),
            json!({"type":"usage","usage":{"inputTokens":10,"outputTokens":5}}),
            json!({"type":"finish","reason":{"kind":"stop"}}),
        ]
    );
    // The messages are those the block-ends carried.
    let msgs = session.derive_messages();
    assert_eq!(
        msgs[1].content,
        vec![ContentBlock::tool_call("c1", "echo", r#"{"text":"one"}"#)]
    );
    assert_eq!(msgs[3].text(), "done");
    // The message's provenance lists the logged chunks only.
    let sources: Vec<Vec<u64>> = session
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == "assistant/message")
        .map(|e| e.source_event_seqs.clone().unwrap())
        .collect();
    let chunk_seqs: Vec<u64> = session
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == "assistant/chunk")
        .map(|e| e.seq)
        .collect();
    assert_eq!(
        sources,
        vec![chunk_seqs[..4].to_vec(), chunk_seqs[4..].to_vec()]
    );
}

#[tokio::test]
async fn a_block_end_that_differs_from_its_deltas_or_opens_its_block_is_logged() {
    let h = Harness::new(vec![Resp::Chunks(vec![
        StreamChunk::TextDelta {
            index: 0,
            text: "draft".into(),
        },
        // Differs from the delta: logged, and it wins.
        StreamChunk::BlockEnd {
            index: 0,
            block: ContentBlock::text("final"),
        },
        // No delta opened index 1: logged.
        StreamChunk::BlockEnd {
            index: 1,
            block: ContentBlock::text(" tail"),
        },
        finish(FinishReason::Stop),
    ])])
    .await;
    let agent = h.agent().await;
    agent.followup(user("go")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    assert_eq!(
        logged_chunks(session),
        vec![
            json!({"type":"text-delta","index":0,"text":"draft"}),
            json!({"type":"block-end","index":0,"block":{"type":"text","text":"final"}}),
            json!({"type":"block-end","index":1,"block":{"type":"text","text":" tail"}}),
            json!({"type":"finish","reason":{"kind":"stop"}}),
        ]
    );
    assert_eq!(
        session.derive_messages()[1].content,
        vec![ContentBlock::text("final"), ContentBlock::text(" tail")]
    );
}

#[tokio::test]
async fn a_delta_after_an_unlogged_block_end_is_not_logged_either() {
    let h = Harness::new(vec![Resp::Chunks(vec![
        StreamChunk::TextDelta {
            index: 0,
            text: "kept".into(),
        },
        StreamChunk::BlockEnd {
            index: 0,
            block: ContentBlock::text("kept"),
        },
        // Ignored by the assembler (the block is closed); logged, it would make the logged
        // chunks assemble to "kept late" without the block-end.
        StreamChunk::TextDelta {
            index: 0,
            text: " late".into(),
        },
        finish(FinishReason::Stop),
    ])])
    .await;
    let agent = h.agent().await;
    agent.followup(user("go")).unwrap();
    idle(&agent).await;
    let session = agent.session();
    assert_eq!(
        logged_chunks(session),
        vec![
            json!({"type":"text-delta","index":0,"text":"kept"}),
            json!({"type":"finish","reason":{"kind":"stop"}}),
        ]
    );
    assert_eq!(session.derive_messages()[1].text(), "kept");
    // The logged chunks alone assemble to the message.
    let mut asm = dsh_llm::BlockAssembler::new();
    for e in session.events() {
        if let dsh_session::EventData::AssistantChunk(c) = &e.data {
            asm.push(&c.chunk);
        }
    }
    assert_eq!(asm.blocks().unwrap(), vec![ContentBlock::text("kept")]);
}
