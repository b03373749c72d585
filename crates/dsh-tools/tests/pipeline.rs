//! The guarded execution pipeline: every stage and decision, exact denial texts, waterfall
//! order, cancellation, post-execute decisions, finalize_content, scope filtering.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use dsh_approval::{
    ApprovalAnswer, ApprovalConfig, ApprovalOutcome, ApprovalPolicy, ApprovalRequestEvent,
    ApprovalService,
};
use dsh_llm::{ContentBlock, Message};
use dsh_tools::*;
use serde_json::json;

fn input(name: &str, args: serde_json::Value) -> ToolExecutionInput {
    ToolExecutionInput::new("c1", name, args)
}

fn failure_text(r: &ToolExecutionResult) -> String {
    match r {
        ToolExecutionResult::Failure(f) => f.content[0].as_text().unwrap().to_owned(),
        other => panic!("expected failure, got {other:?}"),
    }
}

fn deny_with(root: &dsh_kernel::Context, reason: &'static str) {
    root.on_waterfall::<ToolsPreExecute, _, _>(move |_e, _next| async move {
        Ok(PreToolDecision::Deny {
            reason: reason.into(),
        })
    })
    .unwrap()
    .detach();
}

fn ask_with(root: &dsh_kernel::Context, reason: Option<&'static str>) {
    root.on_waterfall::<ToolsPreExecute, _, _>(move |_e, _next| async move {
        Ok(PreToolDecision::Ask {
            reason: reason.map(Into::into),
        })
    })
    .unwrap()
    .detach();
}

fn count_post(root: &dsh_kernel::Context) -> Arc<AtomicUsize> {
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    root.on_waterfall::<ToolsPostExecute, _, _>(move |p, next| {
        n2.fetch_add(1, Ordering::SeqCst);
        next.run(p)
    })
    .unwrap()
    .detach();
    n
}

#[tokio::test]
async fn allow_by_default_runs_the_body_and_renders() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert_eq!(
        r.to_json(),
        json!({"isError": false, "value": "hi", "content": [{"type": "text", "text": "hi"}]})
    );
}

#[tokio::test]
async fn deny_produces_exact_error_and_still_passes_post_execute() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    deny_with(&f.root, "not here");
    let posts = count_post(&f.root);
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert_eq!(
        r.to_json(),
        json!({"isError": true, "error": {"message": "not here"},
               "content": [{"type": "text", "text": "Error: not here"}]})
    );
    assert_eq!(posts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn ask_without_approval_service_denies_with_reason_or_default_text() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    ask_with(&f.root, None);
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert_eq!(
        failure_text(&r),
        "Error: tool \"echo\" requires approval (not yet supported)"
    );

    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    ask_with(&f.root, Some("writes to disk"));
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert_eq!(failure_text(&r), "Error: writes to disk");
    assert_eq!(r.error_message(), Some("writes to disk"));
}

fn with_approval(f: &Fixture, policy: ApprovalPolicy) {
    f.root
        .provide(Arc::new(ApprovalService::new(
            f.root.clone(),
            ApprovalConfig { policy },
        )))
        .unwrap()
        .detach();
}

fn answer(root: &dsh_kernel::Context, outcome: ApprovalOutcome) {
    root.on_waterfall::<ApprovalRequestEvent, _, _>(move |_q, _next| async move {
        Ok(ApprovalAnswer::Outcome(outcome))
    })
    .unwrap()
    .detach();
}

#[tokio::test]
async fn ask_without_agent_denies_with_exact_text() {
    let f = setup();
    with_approval(&f, ApprovalPolicy::Ask);
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    ask_with(&f.root, Some("why"));
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert_eq!(
        failure_text(&r),
        "Error: tool \"echo\" requires approval, but the call has no agent to route it through"
    );
}

#[tokio::test]
async fn approval_outcomes_map_to_exact_decisions_and_are_audited() {
    let cases = [
        (ApprovalOutcome::AllowedOnce, None),
        (
            ApprovalOutcome::Rejected,
            Some("Error: the user rejected tool \"echo\""),
        ),
        (
            ApprovalOutcome::Cancelled,
            Some("Error: approval for tool \"echo\" was cancelled"),
        ),
        (
            ApprovalOutcome::Unavailable,
            Some("Error: tool \"echo\" requires approval, but no approval channel is available"),
        ),
    ];
    for (outcome, expected) in cases {
        let f = setup();
        with_approval(&f, ApprovalPolicy::Ask);
        f.reg.register(&f.root, echo("echo")).unwrap().detach();
        ask_with(&f.root, Some("needs a human"));
        answer(&f.root, outcome);
        let a = agent(&f.root, "a1", true);
        let r = f
            .reg
            .execute(input("echo", json!({"text": "hi"})).with_caller(a.caller.clone()))
            .await;
        match expected {
            None => assert_eq!(r.value(), Some(&json!("hi"))),
            Some(t) => assert_eq!(failure_text(&r), t),
        }
        let kinds: Vec<String> = a
            .session
            .events()
            .iter()
            .map(|e| e.kind.as_str().to_owned())
            .collect();
        assert_eq!(kinds, ["turn/start", "approval/asked", "approval/decided"]);
        let ev = a.session.events();
        let asked = ev[1].to_value();
        assert_eq!(asked["data"]["toolName"], json!("echo"));
        assert_eq!(asked["data"]["callId"], json!("c1"));
        assert_eq!(asked["data"]["reason"], json!("needs a human"));
        let decided = ev[2].to_value();
        assert_eq!(decided["data"]["outcome"], json!(outcome.as_str()));
        assert_eq!(decided["data"]["id"], asked["data"]["id"]);
    }
}

#[tokio::test]
async fn approval_failure_without_open_turn_is_final_and_skips_post_execute() {
    let f = setup();
    with_approval(&f, ApprovalPolicy::Ask);
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    ask_with(&f.root, None);
    let posts = count_post(&f.root);
    let a = agent(&f.root, "a1", false);
    let r = f
        .reg
        .execute(input("echo", json!({"text": "hi"})).with_caller(a.caller.clone()))
        .await;
    assert_eq!(
        failure_text(&r),
        "Error: approval failed: approval requires an open turn in session a1"
    );
    assert_eq!(r.error_info().unwrap().code, "POLICY_FAILED");
    assert_eq!(posts.load(Ordering::SeqCst), 0);
    assert_eq!(a.session.len(), 0);
}

#[tokio::test]
async fn guards_deny_after_allow_and_cannot_allow() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let seen = Trace::default();
    let s = seen.clone();
    f.reg
        .guard(&f.root, move |e| {
            s.push(format!("g1:{}", e.name));
            None
        })
        .unwrap()
        .detach();
    f.reg
        .guard(&f.root, |e| {
            (e.arguments["text"] == "rm").then(|| "no rm".to_owned())
        })
        .unwrap()
        .detach();
    let posts = count_post(&f.root);
    let ok = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert!(!ok.is_error());
    let denied = f.reg.execute(input("echo", json!({"text": "rm"}))).await;
    assert_eq!(
        denied.to_json(),
        json!({"isError": true, "error": {"message": "no rm"},
               "content": [{"type": "text", "text": "Error: no rm"}]})
    );
    assert_eq!(posts.load(Ordering::SeqCst), 2);
    // A pre-execute denial never reaches guards.
    deny_with(&f.root, "policy");
    seen.take();
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert_eq!(failure_text(&r), "Error: policy");
    assert!(seen.take().is_empty());
}

#[tokio::test]
async fn scoped_guard_applies_only_to_its_agent() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let a = agent(&f.root, "a", true);
    let b = agent(&f.root, "b", true);
    f.reg
        .guard(&a.ctx, |_| Some("a is read-only".into()))
        .unwrap()
        .detach();
    let ra = f
        .reg
        .execute(input("echo", json!({"text": "x"})).with_caller(a.caller.clone()))
        .await;
    assert_eq!(failure_text(&ra), "Error: a is read-only");
    let rb = f
        .reg
        .execute(input("echo", json!({"text": "x"})).with_caller(b.caller.clone()))
        .await;
    assert!(!rb.is_error());
    let none = f.reg.execute(input("echo", json!({"text": "x"}))).await;
    assert!(!none.is_error());
}

#[tokio::test]
async fn unknown_tool_passes_policy_and_fails_at_dispatch() {
    let f = setup();
    let trace = Trace::default();
    let t = trace.clone();
    f.root
        .on_waterfall::<ToolsPreExecute, _, _>(move |e, next| {
            t.push(format!("pre:{}", e.name));
            next.run(e)
        })
        .unwrap()
        .detach();
    let t = trace.clone();
    f.reg
        .guard(&f.root, move |_| {
            t.push("guard");
            None
        })
        .unwrap()
        .detach();
    let t = trace.clone();
    f.root
        .on_waterfall::<ToolsExecute, _, _>(move |d, next| {
            t.push("execute");
            next.run(d)
        })
        .unwrap()
        .detach();
    let t = trace.clone();
    f.root
        .on_waterfall::<ToolsPostExecute, _, _>(move |p, next| {
            t.push(format!("post:{}", p.result.is_error()));
            next.run(p)
        })
        .unwrap()
        .detach();
    let r = f.reg.execute(input("nope", json!({}))).await;
    assert_eq!(
        r.to_json(),
        json!({"isError": true,
               "error": {"message": "unknown tool \"nope\"",
                         "info": {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"}},
               "content": [{"type": "text", "text": "Error: unknown tool \"nope\""}]})
    );
    assert_eq!(trace.take(), ["pre:nope", "guard", "execute", "post:true"]);
}

#[tokio::test]
async fn waterfalls_run_in_spec_order_and_listeners_outermost_first() {
    let f = setup();
    let trace = Trace::default();
    let t = trace.clone();
    let def = define_tool::<EchoArgs, String>("echo", "Echo.")
        .finalize_content(move |_, _| {
            t.push("finalize");
            None
        })
        .execute({
            let t = trace.clone();
            move |a, _| {
                let t = t.clone();
                async move {
                    t.push("body");
                    Ok(a.text)
                }
            }
        })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    for name in ["pre-1", "pre-2"] {
        let t = trace.clone();
        f.root
            .on_waterfall::<ToolsPreExecute, _, _>(move |e, next| {
                let t = t.clone();
                async move {
                    t.push(format!("{name}>"));
                    let d = next.run(e).await;
                    t.push(format!("<{name}"));
                    d
                }
            })
            .unwrap()
            .detach();
    }
    let t = trace.clone();
    f.reg
        .guard(&f.root, move |_| {
            t.push("guard");
            None
        })
        .unwrap()
        .detach();
    let t = trace.clone();
    f.root
        .on_waterfall::<ToolsExecute, _, _>(move |d, next| {
            let t = t.clone();
            async move {
                t.push("execute>");
                let r = next.run(d).await;
                t.push("<execute");
                r
            }
        })
        .unwrap()
        .detach();
    let t = trace.clone();
    f.root
        .on_waterfall::<ToolsPostExecute, _, _>(move |p, next| {
            t.push("post");
            next.run(p)
        })
        .unwrap()
        .detach();
    let t = trace.clone();
    f.root
        .on_emit::<ToolsResult>(move |_| t.push("result"))
        .unwrap()
        .detach();
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert!(!r.is_error());
    assert_eq!(
        trace.take(),
        [
            "pre-1>", "pre-2>", "<pre-2", "<pre-1", "guard", "execute>", "body", "<execute",
            "post", "finalize", "result"
        ]
    );
}

#[tokio::test]
async fn body_errors_typed_and_untyped() {
    let f = setup();
    f.reg
        .register(&f.root, failing("plain", ToolFailure::message("disk full")))
        .unwrap()
        .detach();
    f.reg
        .register(
            &f.root,
            failing("typed", ToolFailure::typed("gone", "FsError", "NOT_FOUND")),
        )
        .unwrap()
        .detach();
    let r = f.reg.execute(input("plain", json!({"text": ""}))).await;
    assert_eq!(
        r.to_json(),
        json!({"isError": true, "error": {"message": "disk full"},
               "content": [{"type": "text", "text": "Error: disk full"}]})
    );
    let r = f.reg.execute(input("typed", json!({"text": ""}))).await;
    assert_eq!(
        r.to_json(),
        json!({"isError": true, "error": {"message": "gone", "info": {"name": "FsError", "code": "NOT_FOUND"}},
               "content": [{"type": "text", "text": "Error: gone"}]})
    );
}

#[tokio::test]
async fn invalid_args_through_the_pipeline() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let r = f.reg.execute(input("echo", json!({"txt": "hi"}))).await;
    assert_eq!(
        r.to_json(),
        json!({"isError": true,
               "error": {"message": "invalid arguments for tool \"echo\": at `txt`: unknown field `txt`, expected `text`",
                         "info": {"name": "ToolArgsError", "code": "INVALID_ARGS"}},
               "content": [{"type": "text", "text": "Error: invalid arguments for tool \"echo\": at `txt`: unknown field `txt`, expected `text`"}]})
    );
}

/// Arguments that are not a JSON object are an argument error: an array (which serde would
/// read as positional fields: `["hi"]` would run `echo` with `text = "hi"`) or a scalar never
/// reaches a policy or the body.
#[tokio::test]
async fn non_object_arguments_are_refused_before_policy_and_body() {
    let f = setup();
    let ran = Arc::new(AtomicUsize::new(0));
    let ran2 = ran.clone();
    let def = define_tool::<EchoArgs, String>("echo", "Echo the text.")
        .execute(move |a, _cx| {
            ran2.fetch_add(1, Ordering::SeqCst);
            async move { Ok(a.text) }
        })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    let asked = Arc::new(AtomicUsize::new(0));
    let asked2 = asked.clone();
    f.root
        .on_waterfall::<ToolsPreExecute, _, _>(move |e, next| {
            asked2.fetch_add(1, Ordering::SeqCst);
            next.run(e)
        })
        .unwrap()
        .detach();
    for (args, got) in [
        (json!(["hi"]), "an array"),
        (json!(7), "a number"),
        (json!(true), "a boolean"),
        (json!(null), "null"),
        // A JSON string literal: the raw text, quotes included (`parse_arguments`).
        (
            dsh_tools::scheduler::parse_arguments("\"touch x\""),
            "a string",
        ),
    ] {
        let r = f.reg.execute(input("echo", args)).await;
        let message = format!(
            "invalid arguments for tool \"echo\": the arguments must be a JSON object, got {got}"
        );
        assert_eq!(
            r.to_json(),
            json!({"isError": true,
                   "error": {"message": message,
                             "info": {"name": "ToolArgsError", "code": "INVALID_ARGS"}},
                   "content": [{"type": "text", "text": format!("Error: {message}")}]})
        );
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    // The typed parse refuses an array too (a body called outside the pipeline).
    let e = parse_args::<EchoArgs>("echo", &json!(["hi"])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid arguments for tool \"echo\": the arguments must be a JSON object, got an array"
    );
    // An object still runs.
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert!(!r.is_error());
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn throwing_pre_execute_or_execute_wrapper_is_final_and_skips_post() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let posts = count_post(&f.root);
    f.root
        .on_waterfall::<ToolsPreExecute, _, _>(|_e, _next| async { Err("boom".into()) })
        .unwrap()
        .detach();
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert_eq!(failure_text(&r), "Error: tools/pre-execute failed: boom");
    assert_eq!(posts.load(Ordering::SeqCst), 0);

    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let posts = count_post(&f.root);
    f.root
        .on_waterfall::<ToolsExecute, _, _>(|_d, _next| async { Err("wrapper".into()) })
        .unwrap()
        .detach();
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    assert_eq!(failure_text(&r), "Error: tools/execute failed: wrapper");
    assert_eq!(posts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn post_execute_decisions() {
    // replace content
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    f.root
        .on_waterfall::<ToolsPostExecute, _, _>(|_p, _next| async {
            Ok(PostToolDecision::ReplaceContent {
                content: vec![ContentBlock::text("redacted")],
                additional_contexts: vec![Message::user_text("note")],
            })
        })
        .unwrap()
        .detach();
    let r = f
        .reg
        .execute(input("echo", json!({"text": "secret"})))
        .await;
    assert_eq!(r.value(), Some(&json!("secret")));
    assert_eq!(r.content(), [ContentBlock::text("redacted")]);
    assert_eq!(r.additional_contexts()[0].text(), "note");

    // replace value: re-rendered
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    f.root
        .on_waterfall::<ToolsPostExecute, _, _>(|_p, _next| async {
            Ok(PostToolDecision::ReplaceValue {
                value: json!("other"),
                additional_contexts: vec![],
            })
        })
        .unwrap()
        .detach();
    let r = f.reg.execute(input("echo", json!({"text": "x"}))).await;
    assert_eq!(
        r.to_json(),
        json!({"isError": false, "value": "other", "content": [{"type": "text", "text": "other"}]})
    );

    // replace value that violates the output schema
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    f.root
        .on_waterfall::<ToolsPostExecute, _, _>(|_p, _next| async {
            Ok(PostToolDecision::ReplaceValue {
                value: json!(5),
                additional_contexts: vec![],
            })
        })
        .unwrap()
        .detach();
    let r = f.reg.execute(input("echo", json!({"text": "x"}))).await;
    assert_eq!(
        r.error_message(),
        Some(
            "tool \"echo\" returned invalid output: at the top level: expected string, got integer"
        )
    );
    assert_eq!(r.error_info().unwrap().code, "INVALID_TOOL_OUTPUT");

    // block with feedback / without text
    for (feedback, message) in [
        (
            vec![ContentBlock::text("too long"), ContentBlock::text("retry")],
            "too long\nretry",
        ),
        (vec![], "tool result blocked by post-execute policy"),
    ] {
        let f = setup();
        f.reg.register(&f.root, echo("echo")).unwrap().detach();
        let fb = feedback.clone();
        f.root
            .on_waterfall::<ToolsPostExecute, _, _>(move |_p, _next| {
                let fb = fb.clone();
                async move {
                    Ok(PostToolDecision::Block {
                        feedback: fb,
                        additional_contexts: vec![],
                    })
                }
            })
            .unwrap()
            .detach();
        let r = f.reg.execute(input("echo", json!({"text": "x"}))).await;
        assert!(r.is_error());
        assert_eq!(r.error_message(), Some(message));
        assert_eq!(r.content(), feedback.as_slice());
        assert_eq!(r.error_info(), None);
    }

    // throw in post-execute
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    f.root
        .on_waterfall::<ToolsPostExecute, _, _>(|_p, _next| async { Err("post boom".into()) })
        .unwrap()
        .detach();
    let r = f.reg.execute(input("echo", json!({"text": "x"}))).await;
    assert_eq!(
        failure_text(&r),
        "Error: tools/post-execute failed: post boom"
    );
}

#[tokio::test]
async fn deferred_contexts_are_prepended_and_conclude_turn_is_kept() {
    let f = setup();
    let def = define_tool::<EchoArgs, String>("echo", "Echo.")
        .execute(|a, cx| async move {
            cx.defer_context(Message::user_text("deferred"));
            cx.conclude_turn();
            Ok(a.text)
        })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    f.root
        .on_waterfall::<ToolsPostExecute, _, _>(|_p, _next| async {
            Ok(PostToolDecision::Accept {
                additional_contexts: vec![Message::user_text("post")],
            })
        })
        .unwrap()
        .detach();
    let r = f.reg.execute(input("echo", json!({"text": "x"}))).await;
    let texts: Vec<String> = r.additional_contexts().iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["deferred", "post"]);
    assert!(r.concludes_turn());
    assert_eq!(r.to_json()["concludesTurn"], json!(true));
}

#[tokio::test]
async fn finalize_content_runs_exactly_once_for_every_outcome() {
    let f = setup();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let def = define_tool::<EchoArgs, String>("echo", "Echo.")
        .finalize_content(move |_exec, result| {
            c.fetch_add(1, Ordering::SeqCst);
            Some(vec![ContentBlock::text(format!(
                "final(error={})",
                result.is_error()
            ))])
        })
        .execute(|a, _| async move { Ok(a.text) })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    let r = f.reg.execute(input("echo", json!({"text": "x"}))).await;
    assert_eq!(r.content(), [ContentBlock::text("final(error=false)")]);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    deny_with(&f.root, "no");
    let r = f.reg.execute(input("echo", json!({"text": "x"}))).await;
    assert_eq!(r.content(), [ContentBlock::text("final(error=true)")]);
    assert_eq!(r.error_message(), Some("no"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn cancelled_before_entry_is_aborted_before_dispatch_without_policy() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let posts = count_post(&f.root);
    let pre = Arc::new(AtomicUsize::new(0));
    let p = pre.clone();
    f.root
        .on_waterfall::<ToolsPreExecute, _, _>(move |e, next| {
            p.fetch_add(1, Ordering::SeqCst);
            next.run(e)
        })
        .unwrap()
        .detach();
    let signal = tokio_util::sync::CancellationToken::new();
    signal.cancel();
    let r = f
        .reg
        .execute(input("echo", json!({"text": "x"})).with_signal(signal))
        .await;
    assert_eq!(
        r.to_json(),
        json!({"isError": true,
               "error": {"message": "tool call aborted before dispatch",
                         "info": {"name": "AbortError", "code": "ABORTED_BEFORE_DISPATCH"}},
               "content": [{"type": "text", "text": "Error: tool call aborted before dispatch"}]})
    );
    assert_eq!(pre.load(Ordering::SeqCst), 0);
    assert_eq!(posts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn cancelled_during_policy_is_aborted_before_dispatch_and_passes_post() {
    let f = setup();
    let ran = Arc::new(AtomicUsize::new(0));
    let r2 = ran.clone();
    let def = define_tool::<EchoArgs, String>("echo", "Echo.")
        .execute(move |a, _| {
            r2.fetch_add(1, Ordering::SeqCst);
            async move { Ok(a.text) }
        })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    let posts = count_post(&f.root);
    f.root
        .on_waterfall::<ToolsPreExecute, _, _>(|e, next| {
            e.signal.cancel();
            next.run(e)
        })
        .unwrap()
        .detach();
    let r = f.reg.execute(input("echo", json!({"text": "x"}))).await;
    assert_eq!(failure_text(&r), "Error: tool call aborted before dispatch");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(posts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn success_after_abort_is_aborted_and_body_is_drained() {
    let f = setup();
    let drained = Arc::new(AtomicUsize::new(0));
    let d2 = drained.clone();
    let def = define_tool::<EchoArgs, String>("slow", "Waits for cancel, then succeeds.")
        .execute(move |a, cx| {
            let d2 = d2.clone();
            async move {
                cx.signal.cancelled().await;
                tokio::task::yield_now().await;
                d2.fetch_add(1, Ordering::SeqCst);
                Ok(a.text)
            }
        })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    let signal = tokio_util::sync::CancellationToken::new();
    let s2 = signal.clone();
    let reg = f.reg.clone();
    let task = tokio::spawn(async move {
        reg.execute(input("slow", json!({"text": "x"})).with_signal(s2))
            .await
    });
    tokio::task::yield_now().await;
    signal.cancel();
    let r = task.await.unwrap();
    assert_eq!(
        r.to_json(),
        json!({"isError": true,
               "error": {"message": "tool call aborted",
                         "info": {"name": "AbortError", "code": "ABORTED"}},
               "content": [{"type": "text", "text": "Error: tool call aborted"}]})
    );
    assert_eq!(drained.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn execute_wrapper_replacing_the_signal_is_refused_with_caller_signal() {
    let f = setup();
    let def = define_tool::<EchoArgs, String>("slow", "Waits for cancel.")
        .execute(|_a, cx| async move {
            cx.signal.cancelled().await;
            Err(ToolFailure::message("stopped"))
        })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    // A wrapper replaces the signal with an unrelated token.
    f.root
        .on_waterfall::<ToolsExecute, _, _>(|mut d, next| {
            d.signal = tokio_util::sync::CancellationToken::new();
            next.run(d)
        })
        .unwrap()
        .detach();
    let signal = tokio_util::sync::CancellationToken::new();
    let s2 = signal.clone();
    let reg = f.reg.clone();
    let task = tokio::spawn(async move {
        reg.execute(input("slow", json!({"text": "x"})).with_signal(s2))
            .await
    });
    tokio::task::yield_now().await;
    signal.cancel();
    let r = task.await.unwrap();
    // The failure is kept as is (only successes become ABORTED).
    assert_eq!(r.error_message(), Some("stopped"));
}

#[tokio::test]
async fn tools_waterfalls_are_scope_filtered_by_caller_key() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let a = agent(&f.root, "a", true);
    let b = agent(&f.root, "b", true);
    // Registered through agent a's scope: only a's calls are denied.
    a.ctx
        .on_waterfall::<ToolsPreExecute, _, _>(|_e, _next| async {
            Ok(PreToolDecision::Deny {
                reason: "a only".into(),
            })
        })
        .unwrap()
        .detach();
    let seen = Trace::default();
    let s = seen.clone();
    b.ctx
        .on_emit::<ToolsResult>(move |e| s.push(e.exec.call_id.to_string()))
        .unwrap()
        .detach();
    let ra = f
        .reg
        .execute(
            ToolExecutionInput::new("ca", "echo", json!({"text": "x"}))
                .with_caller(a.caller.clone()),
        )
        .await;
    let rb = f
        .reg
        .execute(
            ToolExecutionInput::new("cb", "echo", json!({"text": "x"}))
                .with_caller(b.caller.clone()),
        )
        .await;
    assert_eq!(failure_text(&ra), "Error: a only");
    assert!(!rb.is_error());
    assert_eq!(seen.take(), ["cb"]);
}

#[tokio::test]
async fn body_panic_is_contained() {
    let f = setup();
    let def = define_tool::<EchoArgs, String>("p", "Panics.")
        .execute(|_a, _| async move {
            if true {
                panic!("kaboom");
            }
            Ok(String::new())
        })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    let r = f.reg.execute(input("p", json!({"text": "x"}))).await;
    assert_eq!(failure_text(&r), "Error: tool \"p\" panicked: kaboom");
    assert_eq!(r.error_info().unwrap().code, "TOOL_PANICKED");
}

#[tokio::test]
async fn timeout_wrapper_cancels_the_body_and_reports_tool_timeout() {
    let f = setup();
    install_timeout_wrapper(&f.root).unwrap().detach();
    let drained = Arc::new(AtomicUsize::new(0));
    let d2 = drained.clone();
    let def = define_tool::<EchoArgs, String>("hang", "Waits for its signal.")
        .timeout(std::time::Duration::from_millis(5))
        .execute(move |a, cx| {
            let d2 = d2.clone();
            async move {
                cx.signal.cancelled().await;
                d2.fetch_add(1, Ordering::SeqCst);
                Ok(a.text)
            }
        })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    f.reg.register(&f.root, echo("quick")).unwrap().detach();
    let r = f.reg.execute(input("hang", json!({"text": "x"}))).await;
    assert_eq!(
        r.to_json(),
        json!({"isError": true,
               "error": {"message": "tool \"hang\" timed out after 5 ms",
                         "info": {"name": "ToolTimeoutError", "code": "TOOL_TIMEOUT"}},
               "content": [{"type": "text", "text": "Error: tool \"hang\" timed out after 5 ms"}]})
    );
    assert_eq!(drained.load(Ordering::SeqCst), 1);
    // Tools without a timeout pass straight through.
    let r = f.reg.execute(input("quick", json!({"text": "y"}))).await;
    assert_eq!(r.value(), Some(&json!("y")));
}

#[tokio::test]
async fn non_lossless_meta_or_value_is_invalid_output() {
    let f = setup();
    let def = define_tool::<EchoArgs, u64>("big", "Returns a huge integer.")
        .execute(|_a, _| async { Ok(u64::MAX) })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    let r = f.reg.execute(input("big", json!({"text": "x"}))).await;
    assert_eq!(r.error_info().unwrap().code, "INVALID_TOOL_OUTPUT");
    assert!(
        r.error_message()
            .unwrap()
            .starts_with("tool \"big\" returned invalid output: the value is not lossless JSON"),
        "{r:?}"
    );
    let def = define_tool::<EchoArgs, String>("m", "Meta.")
        .presentation_meta(|_, _| Some(json!({"n": u64::MAX})))
        .execute(|a, _| async move { Ok(a.text) })
        .unwrap();
    f.reg.register(&f.root, def).unwrap().detach();
    let r = f.reg.execute(input("m", json!({"text": "x"}))).await;
    assert!(
        r.error_message()
            .unwrap()
            .starts_with("tool \"m\" returned invalid output: meta is not lossless JSON"),
        "{r:?}"
    );
}

#[tokio::test]
async fn presentation_meta_is_recorded() {
    let f = setup();
    let def = define_tool::<EchoArgs, String>("m", "Meta.")
        .presentation_meta(|a, out| Some(json!({"len": a.text.len(), "out": out})))
        .present_call(|a| Some(json!({"title": a.text})))
        .execute(|a, _| async move { Ok(a.text) })
        .unwrap();
    f.reg.register(&f.root, def.clone()).unwrap().detach();
    let r = f.reg.execute(input("m", json!({"text": "abc"}))).await;
    assert_eq!(r.meta(), Some(&json!({"len": 3, "out": "abc"})));
    assert_eq!(r.to_json()["meta"], json!({"len": 3, "out": "abc"}));
    assert_eq!(
        def.present_call(&json!({"text": "abc"})),
        Some(json!({"title": "abc"}))
    );
}

#[tokio::test]
async fn tools_result_observers_see_the_returned_frozen_result() {
    let f = setup();
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let seen: Arc<std::sync::Mutex<Vec<Arc<ToolExecutionResult>>>> = Arc::default();
    let s = seen.clone();
    f.root
        .on_emit::<ToolsResult>(move |e| s.lock().unwrap().push(e.result.clone()))
        .unwrap()
        .detach();
    // A panicking observer is contained.
    f.root
        .on_emit::<ToolsResult>(|_| panic!("observer bug"))
        .unwrap()
        .detach();
    let r = f.reg.execute(input("echo", json!({"text": "hi"}))).await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(Arc::ptr_eq(&seen[0], &r));
}
