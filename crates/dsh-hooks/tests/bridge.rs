//! The bridge on the real tool pipeline (`dsh-tools`) with real hook processes: merging several
//! hooks of one point (deny > ask > allow, reasons joined), an ask that a policy further down
//! the chain denies, PostToolUse block and context order, and the records written for each
//! hook. See docs/upstream/hooks.md ("Mapping", "Records").

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use dsh_hooks::{BridgeConfig, Dialect, install};
use dsh_kernel::{Context, Kernel, ScopeKey};
use dsh_llm::{ContentBlock, MessageSource, SessionId};
use dsh_session::{EventData, Session, TurnStartData};
use dsh_tools::{
    PostToolDecision, PreToolDecision, ToolCaller, ToolExecutionInput, ToolExecutionResult,
    ToolRegistry, ToolsPostExecute, ToolsPreExecute, define_tool,
};
use serde_json::{Value, json};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    text: String,
}

struct Fixture {
    _kernel: Kernel,
    root: Context,
    reg: ToolRegistry,
    session: Arc<Session>,
    caller: ToolCaller,
    _dir: tempfile::TempDir,
}

/// A kernel with a tool registry holding `echo`, an agent session with turn 1 open, and the
/// Claude Code bridge over `hooks` (the hook file's JSON).
fn setup(hooks: &Value) -> Fixture {
    let kernel = Kernel::new();
    let root = kernel.root().clone();
    let reg = ToolRegistry::new(root.clone());
    let echo = define_tool::<EchoArgs, String>("echo", "Echo the text.")
        .execute(|a, _cx| async move { Ok(a.text) })
        .unwrap();
    reg.register(&root, echo).unwrap().detach();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hooks.json");
    std::fs::write(&file, hooks.to_string()).unwrap();
    let set = install(
        &root,
        BridgeConfig::new(Dialect::ClaudeCode, vec![file], dir.path().to_path_buf()),
    )
    .unwrap();
    assert!(set.problems.is_empty(), "{:?}", set.problems);
    let key = ScopeKey::new("a-1");
    let ctx = root.tagged(key.clone(), "a-1").unwrap();
    let session = Arc::new(Session::create("a-1", None, None).unwrap());
    session
        .append(
            "turn/start",
            EventData::TurnStart(TurnStartData {
                turn: 1,
                trigger: None,
            }),
            None,
        )
        .unwrap();
    let caller = ToolCaller::new(key, ctx, session.clone(), SessionId::new("a-1"));
    Fixture {
        _kernel: kernel,
        root,
        reg,
        session,
        caller,
        _dir: dir,
    }
}

fn hooks(event: &str, commands: &[&str]) -> Value {
    let entries: Vec<Value> = commands
        .iter()
        .map(|c| json!({"type": "command", "command": c}))
        .collect();
    json!({"hooks": {event: [{"matcher": "echo", "hooks": entries}]}})
}

fn json_out(event: &str, fields: Value) -> String {
    let mut specific = json!({"hookEventName": event});
    specific
        .as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    format!(
        "cat >/dev/null; echo '{}'",
        json!({"hookSpecificOutput": specific})
    )
}

async fn call(f: &Fixture) -> Arc<ToolExecutionResult> {
    f.reg
        .execute(
            ToolExecutionInput::new("call-1", "echo", json!({"text": "hi"}))
                .with_caller(f.caller.clone()),
        )
        .await
}

fn texts(blocks: &[ContentBlock]) -> Vec<String> {
    blocks
        .iter()
        .filter_map(|b| b.as_text().map(str::to_owned))
        .collect()
}

/// `(type, data without durationMs)` of every hook record.
fn records(session: &Session) -> Vec<(String, Value)> {
    session
        .events()
        .iter()
        .filter(|e| e.kind.as_str().starts_with("hook/"))
        .map(|e| {
            let mut v = e.to_value()["data"].clone();
            v.as_object_mut().unwrap().remove("durationMs");
            (e.kind.as_str().to_owned(), v)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn several_pre_tool_hooks_merge_deny_over_allow_and_record_each() {
    let f = setup(&hooks(
        "PreToolUse",
        &[
            "echo first >&2; exit 2",
            &json_out(
                "PreToolUse",
                json!({"permissionDecision": "deny", "permissionDecisionReason": "second"}),
            ),
            &json_out(
                "PreToolUse",
                json!({"permissionDecision": "allow", "permissionDecisionReason": "fine"}),
            ),
        ],
    ));
    let r = call(&f).await;
    assert!(r.is_error());
    assert_eq!(
        texts(r.content()),
        vec!["Error: first\n\nsecond".to_owned()]
    );
    let got = records(&f.session);
    let want: Vec<(String, Value)> = [("block", Some(2), Some("first")), ("deny", Some(0), None), ("allow", Some(0), None)]
        .iter()
        .enumerate()
        .flat_map(|(i, (decision, exit, stderr))| {
            let id = format!("claude-code:PreToolUse:{}", i + 1);
            let mut result = json!({"turn": 1, "point": "PreToolUse", "handlerId": id, "decision": decision, "exitCode": exit});
            if let Some(s) = stderr {
                result["stderrSummary"] = json!(s);
            }
            [
                (
                    "hook/invoked".to_owned(),
                    json!({"turn": 1, "point": "PreToolUse", "dialect": "claude-code", "handlerId": id, "matcher": "echo"}),
                ),
                ("hook/result".to_owned(), result),
            ]
        })
        .collect();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ask_loses_to_a_deny_further_down_the_chain() {
    let f = setup(&hooks(
        "PreToolUse",
        &[&json_out(
            "PreToolUse",
            json!({"permissionDecision": "ask", "permissionDecisionReason": "needs a human"}),
        )],
    ));
    // Without an approval service the ask is denied with the hook's reason.
    let r = call(&f).await;
    assert_eq!(texts(r.content()), vec!["Error: needs a human".to_owned()]);
    // A policy registered after the bridge (further down) that denies wins over the ask.
    f.root
        .on_waterfall::<ToolsPreExecute, _, _>(|_exec, _next| async {
            Ok(PreToolDecision::Deny {
                reason: "policy says no".into(),
            })
        })
        .unwrap()
        .detach();
    let r = call(&f).await;
    assert_eq!(texts(r.content()), vec!["Error: policy says no".to_owned()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn post_tool_block_keeps_the_context_and_contexts_come_first() {
    let f = setup(&hooks(
        "PostToolUse",
        &[
            &json_out("PostToolUse", json!({"additionalContext": "c1"})),
            "cat >/dev/null; echo 'bad output' >&2; exit 2",
        ],
    ));
    let r = call(&f).await;
    assert!(r.is_error());
    assert_eq!(texts(r.content()), vec!["bad output".to_owned()]);
    assert_eq!(r.error_message(), Some("bad output"));
    let ctx = r.additional_contexts();
    assert_eq!(ctx.len(), 1);
    assert_eq!(texts(&ctx[0].content), vec!["c1".to_owned()]);
    assert_eq!(ctx[0].source, MessageSource::plugin("hooks-claude-code"));

    // Accepted: the bridge's context goes before the ones further down add.
    let f = setup(&hooks(
        "PostToolUse",
        &[&json_out(
            "PostToolUse",
            json!({"additionalContext": "ours"}),
        )],
    ));
    f.root
        .on_waterfall::<ToolsPostExecute, _, _>(|_ev, _next| async {
            Ok(PostToolDecision::Accept {
                additional_contexts: vec![dsh_llm::Message::user_text("theirs")],
            })
        })
        .unwrap()
        .detach();
    let r = call(&f).await;
    assert!(!r.is_error());
    assert_eq!(texts(r.content()), vec!["hi".to_owned()]);
    let all: Vec<Vec<String>> = r
        .additional_contexts()
        .iter()
        .map(|m| texts(&m.content))
        .collect();
    assert_eq!(
        all,
        vec![vec!["ours".to_owned()], vec!["theirs".to_owned()]]
    );
}
