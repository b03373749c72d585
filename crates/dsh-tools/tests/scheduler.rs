//! The per-step scheduler: model-order commits with a parallel pool, exclusive barriers, pool
//! size, abort mid-batch with synthetic results, callback failure.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use dsh_kernel::ErrorCode;
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use dsh_kernel::BoxError;
use dsh_tools::scheduler::*;
use dsh_tools::*;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Records callback order as `start:<id>` / `commit:<id>:<text>`.
#[derive(Default)]
struct Recorder {
    trace: Trace,
    fail_commit_at: Option<usize>,
}

impl SchedulerHooks for Recorder {
    fn call_started<'a>(
        &'a self,
        _index: usize,
        call: &'a ToolCallRequest,
        synthetic: bool,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        self.trace.push(format!(
            "{}:{}",
            if synthetic { "synthetic" } else { "start" },
            call.call_id
        ));
        Box::pin(async { Ok(()) })
    }

    fn result_committed<'a>(
        &'a self,
        index: usize,
        call: &'a ToolCallRequest,
        result: &'a Arc<ToolExecutionResult>,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        let fail = self.fail_commit_at == Some(index);
        self.trace.push(format!(
            "commit:{}:{}",
            call.call_id,
            result.content()[0].as_text().unwrap_or("")
        ));
        Box::pin(async move {
            if fail {
                Err::<(), BoxError>("disk gone".into())
            } else {
                Ok(())
            }
        })
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct GateArgs {
    id: String,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Done {
    id: String,
}

/// A parallel-safe tool whose call `id` waits on `gates[id]` (if any) and logs `body:<id>`.
fn gated(
    name: &str,
    parallel: bool,
    gates: Arc<std::collections::HashMap<String, Arc<Notify>>>,
    trace: Trace,
) -> Arc<dyn ToolDefinition> {
    define_tool::<GateArgs, Done>(name, "Waits on a gate.")
        .concurrency_safe(move |_| parallel)
        .render(|_, o| vec![text(&format!("done {}", o.id))])
        .execute(move |a, cx| {
            let gate = gates.get(&a.id).cloned();
            let trace = trace.clone();
            async move {
                trace.push(format!("body>{}", a.id));
                if let Some(g) = gate {
                    tokio::select! {
                        () = g.notified() => {}
                        () = cx.signal.cancelled() => {}
                    }
                }
                trace.push(format!("body<{}", a.id));
                Ok(Done { id: a.id })
            }
        })
        .unwrap()
}

fn call(id: &str, tool: &str) -> ToolCallRequest {
    ToolCallRequest::new(id, tool, format!("{{\"id\":\"{id}\"}}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_first_fast_second_commits_in_model_order() {
    let f = setup();
    let gate = Arc::new(Notify::new());
    let gates = Arc::new([("slow".to_owned(), gate.clone())].into_iter().collect());
    let body_trace = Trace::default();
    f.reg
        .register(&f.root, gated("t", true, gates, body_trace.clone()))
        .unwrap()
        .detach();
    let hooks = Recorder::default();
    let reg = f.reg.clone();
    let fast_done = Arc::new(AtomicUsize::new(0));
    let fd = fast_done.clone();
    let bt = body_trace.clone();
    // Release the slow call only after the fast one finished its body.
    let releaser = tokio::spawn(async move {
        loop {
            if bt.0.lock().unwrap().iter().any(|s| s == "body<fast") {
                fd.fetch_add(1, Ordering::SeqCst);
                gate.notify_one();
                return;
            }
            tokio::task::yield_now().await;
        }
    });
    let out = run_tool_calls(
        &reg,
        None,
        vec![call("slow", "t"), call("fast", "t")],
        CancellationToken::new(),
        &hooks,
        SchedulerConfig::default(),
    )
    .await
    .unwrap();
    releaser.await.unwrap();
    assert_eq!(fast_done.load(Ordering::SeqCst), 1);
    // Both started before either committed; the fast body finished first; commits in model order.
    assert_eq!(
        hooks.trace.take(),
        [
            "start:slow",
            "start:fast",
            "commit:slow:done slow",
            "commit:fast:done fast"
        ]
    );
    let bodies = body_trace.take();
    let pos = |s: &str| bodies.iter().position(|b| b == s).unwrap();
    assert!(pos("body<fast") < pos("body<slow"));
    let ids: Vec<String> = out
        .results
        .iter()
        .map(|c| c.call.call_id.to_string())
        .collect();
    assert_eq!(ids, ["slow", "fast"]);
    assert!(!out.aborted);
}

#[tokio::test]
async fn exclusive_calls_are_barriers() {
    let f = setup();
    let trace = Trace::default();
    let gates = Arc::new(std::collections::HashMap::new());
    f.reg
        .register(&f.root, gated("par", true, gates.clone(), trace.clone()))
        .unwrap()
        .detach();
    f.reg
        .register(&f.root, gated("ex", false, gates, trace.clone()))
        .unwrap()
        .detach();
    let hooks = Recorder {
        trace: trace.clone(),
        fail_commit_at: None,
    };
    run_tool_calls(
        &f.reg,
        None,
        vec![call("p1", "par"), call("x", "ex"), call("p2", "par")],
        CancellationToken::new(),
        &hooks,
        SchedulerConfig::default(),
    )
    .await
    .unwrap();
    let t = trace.take();
    let pos = |s: &str| t.iter().position(|b| b == s).unwrap();
    // The exclusive call starts only after p1 committed, and p2 only after x committed.
    assert!(pos("commit:p1:done p1") < pos("start:x"));
    assert!(pos("commit:x:done x") < pos("start:p2"));
    assert!(pos("body<x") < pos("body>p2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_size_one_is_serial() {
    let f = setup();
    let trace = Trace::default();
    f.reg
        .register(
            &f.root,
            gated("par", true, Arc::new(Default::default()), trace.clone()),
        )
        .unwrap()
        .detach();
    let hooks = Recorder {
        trace: trace.clone(),
        fail_commit_at: None,
    };
    run_tool_calls(
        &f.reg,
        None,
        vec![call("a", "par"), call("b", "par"), call("c", "par")],
        CancellationToken::new(),
        &hooks,
        SchedulerConfig { max_parallel: 1 },
    )
    .await
    .unwrap();
    let t = trace.take();
    let pos = |s: &str| t.iter().position(|b| b == s).unwrap();
    assert!(pos("body<a") < pos("start:b"));
    assert!(pos("body<b") < pos("start:c"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_mid_batch_drains_started_and_synthesises_the_rest() {
    let f = setup();
    let trace = Trace::default();
    let g1 = Arc::new(Notify::new());
    let gates: Arc<std::collections::HashMap<String, Arc<Notify>>> =
        Arc::new([("a".to_owned(), g1.clone())].into_iter().collect());
    f.reg
        .register(&f.root, gated("par", true, gates.clone(), trace.clone()))
        .unwrap()
        .detach();
    f.reg
        .register(&f.root, gated("ex", false, gates, trace.clone()))
        .unwrap()
        .detach();
    let hooks = Recorder {
        trace: trace.clone(),
        fail_commit_at: None,
    };
    let signal = CancellationToken::new();
    let s2 = signal.clone();
    let t2 = trace.clone();
    // Abort once call `a` is blocked inside its body.
    let aborter = tokio::spawn(async move {
        loop {
            if t2.0.lock().unwrap().iter().any(|s| s == "body>a") {
                s2.cancel();
                return;
            }
            tokio::task::yield_now().await;
        }
    });
    // a (parallel, blocks) | x (exclusive: waits for a) | b (never starts)
    let out = run_tool_calls(
        &f.reg,
        None,
        vec![call("a", "par"), call("x", "ex"), call("b", "par")],
        signal,
        &hooks,
        SchedulerConfig::default(),
    )
    .await
    .unwrap();
    aborter.await.unwrap();
    assert!(out.aborted);
    let t: Vec<String> = trace
        .take()
        .into_iter()
        .filter(|s| s.starts_with("start") || s.starts_with("commit") || s.starts_with("synthetic"))
        .collect();
    assert_eq!(
        t,
        [
            "start:a",
            // `a` succeeded after the abort ⇒ ABORTED.
            "commit:a:Error: tool call aborted",
            "synthetic:x",
            "commit:x:Error: tool call aborted before dispatch",
            "synthetic:b",
            "commit:b:Error: tool call aborted before dispatch",
        ]
    );
    let started: Vec<bool> = out.results.iter().map(|c| c.started).collect();
    assert_eq!(started, [true, false, false]);
    assert_eq!(
        out.results[1].result.error_info().unwrap().code,
        "ABORTED_BEFORE_DISPATCH"
    );
}

#[tokio::test]
async fn arguments_empty_and_invalid_json() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let hooks = Recorder::default();
    let out = run_tool_calls(
        &f.reg,
        None,
        vec![
            ToolCallRequest::new("c1", "echo", ""),
            ToolCallRequest::new("c2", "echo", "{\"text\":"),
        ],
        CancellationToken::new(),
        &hooks,
        SchedulerConfig::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        out.results[0].result.error_message(),
        Some("invalid arguments for tool \"echo\": missing field `text`")
    );
    assert_eq!(
        out.results[1].result.error_message(),
        Some(
            "invalid arguments for tool \"echo\": the arguments are not valid JSON (EOF while parsing a value at line 1 column 8)"
        )
    );
}

#[tokio::test]
async fn callback_failure_stops_without_fabricating_results() {
    let f = setup();
    let trace = Trace::default();
    f.reg
        .register(
            &f.root,
            gated("par", true, Arc::new(Default::default()), trace.clone()),
        )
        .unwrap()
        .detach();
    let hooks = Recorder {
        trace: trace.clone(),
        fail_commit_at: Some(0),
    };
    let e = run_tool_calls(
        &f.reg,
        None,
        vec![call("a", "par"), call("b", "par")],
        CancellationToken::new(),
        &hooks,
        SchedulerConfig::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.to_string(), "tool scheduler failed: disk gone");
    assert_eq!(e.code(), "SCHEDULER_FAILED");
    let commits = trace
        .take()
        .into_iter()
        .filter(|s| s.starts_with("commit") || s.starts_with("synthetic"))
        .count();
    assert_eq!(commits, 1);
}

#[tokio::test]
async fn concludes_turn_is_reported() {
    let f = setup();
    let def = define_tool::<EchoArgs, String>("finish", "Ends the turn.")
        .execute(|a, cx| async move {
            cx.conclude_turn();
            Ok(a.text)
        })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    let out = run_tool_calls(
        &f.reg,
        None,
        vec![ToolCallRequest::new("c", "finish", "{\"text\":\"bye\"}")],
        CancellationToken::new(),
        &NoHooks,
        SchedulerConfig::default(),
    )
    .await
    .unwrap();
    assert!(out.concludes_turn);
}

#[tokio::test]
async fn session_hooks_write_paired_call_and_result_events() {
    use dsh_session::{EventData, StepData, TurnStartData};
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let def = define_tool::<EchoArgs, String>("ctx", "Adds context.")
        .execute(|a, cx| async move {
            cx.defer_context(dsh_llm::Message::user_text("later"));
            Ok(a.text)
        })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    let a = agent(&f.root, "a", false);
    a.session
        .append(
            "turn/start",
            EventData::TurnStart(TurnStartData {
                turn: 1,
                trigger: None,
            }),
            None,
        )
        .unwrap();
    a.session
        .append(
            "step/start",
            EventData::StepStart(StepData { turn: 1, step: 1 }),
            None,
        )
        .unwrap();
    let hooks = SessionHooks::new(a.session.clone(), 1, 1);
    let signal = CancellationToken::new();
    let out = run_tool_calls(
        &f.reg,
        Some(a.caller.clone()),
        vec![
            ToolCallRequest::new("c1", "echo", "{\"text\":\"hi\"}"),
            ToolCallRequest::new("c2", "nope", ""),
            ToolCallRequest::new("c3", "ctx", "{\"text\":\"x\"}"),
        ],
        signal,
        &hooks,
        SchedulerConfig::default(),
    )
    .await
    .unwrap();
    assert_eq!(out.results.len(), 3);
    let log: Vec<serde_json::Value> = a
        .session
        .events()
        .iter()
        .skip(2)
        .map(|e| e.to_value())
        .collect();
    let kinds: Vec<&str> = log.iter().map(|e| e["type"].as_str().unwrap()).collect();
    // Echo is parallel-safe, `nope` is exclusive (unknown), so c2 waits for c1's commit.
    assert_eq!(
        kinds,
        [
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result"
        ]
    );
    assert_eq!(
        log[0]["data"],
        serde_json::json!({"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": "{\"text\":\"hi\"}"})
    );
    assert_eq!(log[1]["sourceEventSeqs"], serde_json::json!([2]));
    assert_eq!(log[1]["surfaceOp"], serde_json::json!("append"));
    assert_eq!(
        log[1]["data"]["message"]["content"],
        serde_json::json!([{"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": "hi"}], "isError": false}])
    );
    assert_eq!(log[1]["data"].get("error"), None);
    assert_eq!(
        log[3]["data"]["error"],
        serde_json::json!({"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"})
    );
    let ctx: Vec<String> = hooks.take_contexts().iter().map(|m| m.text()).collect();
    assert_eq!(ctx, ["later"]);
}
