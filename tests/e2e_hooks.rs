//! Claude Code / Codex command hooks through the built `dsh` binary (issue 17), with real bash
//! and python3 hook scripts: a PreToolUse deny of `rm -rf` (the file stays, the model reads the
//! reason), an ask that becomes an approval question in the interactive shell and a denial in
//! `exec`, PostToolUse context in the next request, exit code 2, output that is not one JSON
//! object, a hook killed with its process group at its timeout and when the turn is cancelled,
//! the Stop guard, a blocked prompt, SessionStart context in the first request, refused hook
//! files, `dsh hooks list`, discovery of Claude Code's own settings files, the scrubbed
//! environment, Codex hooks that cannot ask, and the whole stdin payload with Claude Code's field
//! names.
//!
//! The model is the replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, Shell, code, json_lines, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

const API_KEY: &str = "sk-e2e-hooks";
/// "Did not hang" bound for one dsh run (runs take well under a second, the timeout test ~1 s).
const HANG_LIMIT: Duration = Duration::from_secs(60);

struct Env(Sandbox);

impl std::ops::Deref for Env {
    type Target = Sandbox;

    fn deref(&self) -> &Sandbox {
        &self.0
    }
}

impl Env {
    fn new() -> Self {
        Self(Sandbox::new())
    }

    /// Writes an executable script `name` under `<root>/hooks/` and returns its path.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = self.root.join("hooks");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// Writes hook file `name` (JSON) under `<root>/hooks/` and returns its path.
    fn hook_file(&self, name: &str, hooks: &Value) -> PathBuf {
        let dir = self.root.join("hooks");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_string_pretty(hooks).unwrap()).unwrap();
        p
    }

    /// `dsh <args>` with `[hooks] claude_code = [files]`.
    fn dsh(&self, url: &str, files: &[&Path], args: &[&str]) -> Command {
        let list: Vec<String> = files
            .iter()
            .map(|f| format!("{:?}", f.display().to_string()))
            .collect();
        let setting = format!("hooks.claude_code=[{}]", list.join(","));
        let mut all = vec!["-c", setting.as_str()];
        all.extend_from_slice(args);
        self.0.dsh(url, API_KEY, &all)
    }

    fn session_log(&self) -> Vec<Value> {
        let logs: Vec<PathBuf> = files_under(&self.home.join("sessions"))
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "session.jsonl"))
            .collect();
        assert_eq!(logs.len(), 1, "{logs:?}");
        json_lines(&std::fs::read(&logs[0]).unwrap())
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn run(cmd: Command) -> Output {
    common::e2e::run(cmd, HANG_LIMIT)
}

/// `{"hooks": {event: [{matcher?, hooks: [{type: command, command, timeout?}]}]}}`.
fn one_hook(event: &str, matcher: Option<&str>, command: &str, timeout: Option<u64>) -> Value {
    let mut entry = json!({"type": "command", "command": command});
    if let Some(t) = timeout {
        entry["timeout"] = json!(t);
    }
    let mut group = json!({"hooks": [entry]});
    if let Some(m) = matcher {
        group["matcher"] = json!(m);
    }
    json!({"hooks": {event: [group]}})
}

/// A hook command as notices show it: at most 60 characters (59 and `…`).
fn shown(command: &str) -> String {
    if command.chars().count() > 60 {
        format!("{}…", command.chars().take(59).collect::<String>())
    } else {
        command.to_owned()
    }
}

fn bash_call(command: &str) -> Value {
    json!({"tool_calls": [["bash", {"command": command, "description": "run it"}]]})
}

/// The tool-message texts of chat request `req`.
fn tool_texts(req: &dsh_test_support::RecordedRequest) -> Vec<String> {
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `data` of every record of type `kind`.
fn records(log: &[Value], kind: &str) -> Vec<Value> {
    log.iter()
        .filter(|e| e["type"] == kind)
        .map(|e| e["data"].clone())
        .collect()
}

/// A python3 guard that denies `rm -rf` with a JSON decision.
const GUARD_PY: &str = r#"#!/usr/bin/env python3
import json, sys
p = json.load(sys.stdin)
cmd = p.get("tool_input", {}).get("command", "")
if "rm -rf" in cmd:
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "rm -rf is not allowed in this repository"}}))
"#;

#[test]
fn a_pre_tool_use_deny_of_rm_rf_keeps_the_file_and_tells_the_model() {
    let env = Env::new();
    std::fs::write(env.repo.join("keep.txt"), "precious\n").unwrap();
    let guard = env.script("guard.py", GUARD_PY);
    let file = env.hook_file(
        "hooks.json",
        &one_hook(
            "PreToolUse",
            Some("bash"),
            &guard.display().to_string(),
            None,
        ),
    );
    let replay = Replay::start(json!([bash_call("rm -rf keep.txt"), {"text": "I was stopped."}]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "delete keep.txt"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(env.repo.join("keep.txt")).unwrap(),
        "precious\n"
    );
    let reqs = replay.chat_requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        tool_texts(&reqs[1]),
        vec!["Error: rm -rf is not allowed in this repository".to_owned()]
    );
    assert_eq!(
        common::e2e::before_end_line(&text(&out.stderr)),
        "• bash run it\n  $ rm -rf keep.txt\n  ✗ Error: rm -rf is not allowed in this repository\n"
    );
    let log = env.session_log();
    let invoked = records(&log, "hook/invoked");
    assert_eq!(
        invoked,
        vec![
            json!({"turn": 1, "point": "PreToolUse", "dialect": "claude-code",
            "handlerId": "claude-code:PreToolUse:1", "matcher": "bash"})
        ]
    );
    let mut result = records(&log, "hook/result").remove(0);
    assert!(result["durationMs"].as_f64().unwrap() > 0.0);
    result.as_object_mut().unwrap().remove("durationMs");
    assert_eq!(
        result,
        json!({"turn": 1, "point": "PreToolUse", "handlerId": "claude-code:PreToolUse:1",
            "decision": "deny", "exitCode": 0})
    );
}

const ASK_SH: &str = r#"#!/bin/bash
cat > /dev/null
echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"pushes need a human"}}'
"#;

#[test]
fn an_ask_is_an_approval_question_in_the_shell() {
    let env = Env::new();
    let ask = env.script("ask.sh", ASK_SH);
    let file = env.hook_file(
        "hooks.json",
        &one_hook("PreToolUse", Some("bash"), &ask.display().to_string(), None),
    );
    let replay = Replay::start(json!([bash_call("echo approved > out.txt"), {"text": "done"}]));
    let mut shell = Shell::spawn(env.dsh(&replay.url(), &[&file], &[]));
    shell.send("write out.txt");
    shell.wait_for("allow tool `bash` (pushes need a human)?", HANG_LIMIT);
    shell.send("y");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "stderr: {err}");
    assert_eq!(
        std::fs::read_to_string(env.repo.join("out.txt")).unwrap(),
        "approved\n"
    );
    let log = env.session_log();
    let asked = records(&log, "approval/asked");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["reason"], "pushes need a human");
    assert_eq!(
        records(&log, "approval/decided")[0]["outcome"],
        "allowed-once"
    );
    assert_eq!(records(&log, "hook/result")[0]["decision"], "ask");
}

#[test]
fn in_exec_an_ask_is_a_denial_with_the_hooks_reason() {
    let env = Env::new();
    let ask = env.script("ask.sh", ASK_SH);
    let file = env.hook_file(
        "hooks.json",
        &one_hook("PreToolUse", Some("bash"), &ask.display().to_string(), None),
    );
    let replay = Replay::start(json!([bash_call("echo approved > out.txt"), {"text": "ok"}]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "write out.txt"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(!env.repo.join("out.txt").exists());
    assert_eq!(
        tool_texts(&replay.chat_requests()[1]),
        vec!["Error: pushes need a human (dsh exec cannot ask for approval)".to_owned()]
    );
}

#[test]
fn post_tool_use_context_reaches_the_next_request() {
    let env = Env::new();
    let lint = env.script(
        "lint.py",
        r#"#!/usr/bin/env python3
import json, sys
p = json.load(sys.stdin)
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PostToolUse",
    "additionalContext": "lint: " + p["tool_response"].strip()}}))
"#,
    );
    let file = env.hook_file(
        "hooks.json",
        &one_hook(
            "PostToolUse",
            Some("bash"),
            &lint.display().to_string(),
            None,
        ),
    );
    let replay = Replay::start(json!([bash_call("echo clean"), {"text": "ok"}]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "lint"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let reqs = replay.chat_requests();
    let messages = reqs[1].body["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"], "lint: clean");
    assert_eq!(tool_texts(&reqs[1]), vec!["clean\n".to_owned()]);
    let log = env.session_log();
    let contexts: Vec<&Value> = log
        .iter()
        .filter(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "plugin")
        .filter(|e| e["data"]["source"]["plugin"] == "hooks-claude-code")
        .collect();
    assert_eq!(contexts.len(), 1);
    assert_eq!(
        contexts[0]["data"]["content"],
        json!([{"type": "text", "text": "lint: clean"}])
    );
}

#[test]
fn exit_code_two_blocks_with_stderr_as_the_reason() {
    let env = Env::new();
    let file = env.hook_file(
        "hooks.json",
        &one_hook(
            "PreToolUse",
            Some("bash"),
            "echo 'no rm in this repo' >&2; exit 2",
            None,
        ),
    );
    let replay = Replay::start(json!([bash_call("echo ran > ran.txt"), {"text": "ok"}]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "go"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(!env.repo.join("ran.txt").exists());
    assert_eq!(
        tool_texts(&replay.chat_requests()[1]),
        vec!["Error: no rm in this repo".to_owned()]
    );
    let mut result = records(&env.session_log(), "hook/result").remove(0);
    result.as_object_mut().unwrap().remove("durationMs");
    assert_eq!(
        result,
        json!({"turn": 1, "point": "PreToolUse", "handlerId": "claude-code:PreToolUse:1",
            "decision": "block", "exitCode": 2, "stderrSummary": "no rm in this repo"})
    );
}

#[test]
fn two_json_objects_or_plain_text_do_not_block_and_are_logged() {
    let env = Env::new();
    let two =
        r#"echo '{"decision":"block","reason":"a"}'; echo '{"decision":"block","reason":"b"}'"#;
    let file = env.hook_file(
        "hooks.json",
        &json!({"hooks": {"PreToolUse": [{"matcher": "bash", "hooks": [
            {"type": "command", "command": two},
            {"type": "command", "command": "echo 'checked, looks fine'"},
            {"type": "command", "command": "echo oops >&2; exit 1"},
        ]}]}}),
    );
    let replay = Replay::start(json!([bash_call("echo ran > ran.txt"), {"text": "ok"}]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "go"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(env.repo.join("ran.txt")).unwrap(),
        "ran\n"
    );
    let err = text(&out.stderr);
    let notices: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("  ! hook: "))
        .collect();
    assert_eq!(notices.len(), 2, "{err}");
    assert!(
        notices[0].starts_with(&format!(
            "  ! hook: PreToolUse hook `{}` ({}) printed output that is not exactly one JSON object (",
            shown(two),
            file.display()
        )),
        "{err}"
    );
    assert!(notices[0].ends_with("); it is ignored"), "{err}");
    assert_eq!(
        notices[1],
        format!(
            "  ! hook: PreToolUse hook `echo oops >&2; exit 1` ({}) failed with 1 (non-blocking): oops",
            file.display()
        )
    );
    let decisions: Vec<Value> = records(&env.session_log(), "hook/result")
        .into_iter()
        .map(|r| json!([r["decision"], r["exitCode"]]))
        .collect();
    assert_eq!(
        decisions,
        vec![json!(["pass", 0]), json!(["pass", 0]), json!(["pass", 1])]
    );
}

#[test]
fn a_hook_past_its_timeout_is_killed_with_its_group_and_the_turn_goes_on() {
    let env = Env::new();
    let pid_file = env.root.join("bg.pid");
    let command = format!(
        "sleep 120 & echo $! > {}; cat > /dev/null; sleep 120",
        pid_file.display()
    );
    let file = env.hook_file(
        "hooks.json",
        &one_hook("PreToolUse", None, &command, Some(1)),
    );
    let replay = Replay::start(json!([bash_call("echo ran > ran.txt"), {"text": "ok"}]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "go"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    // The tool ran after the hook was given up on.
    assert_eq!(
        std::fs::read_to_string(env.repo.join("ran.txt")).unwrap(),
        "ran\n"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "  ! hook: PreToolUse hook `{}` ({}) timed out after 1000 ms; its process group was killed and the hook is ignored\n",
            shown(&command),
            file.display()
        )),
        "{err}"
    );
    // The hook's background child went with its group.
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z"),
        "the hook's background sleep {pid} survived: {stat}"
    );
    let result = records(&env.session_log(), "hook/result").remove(0);
    assert_eq!(result["decision"], "pass");
    assert_eq!(result.get("exitCode"), None, "{result}");
}

#[test]
fn a_stop_hook_that_always_blocks_ends_at_the_guard() {
    let env = Env::new();
    let payloads = env.root.join("stop-payloads.jsonl");
    let command = format!(
        "cat >> {}; echo >> {0}; echo 'run the tests' >&2; exit 2",
        payloads.display()
    );
    let file = env.hook_file("hooks.json", &one_hook("Stop", None, &command, None));
    let replay = Replay::start(json!(vec![json!({"text": "done"}); 10]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "finish"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    // The first answer plus 8 sent back: 9 requests, then the guard.
    let reqs = replay.chat_requests();
    assert_eq!(reqs.len(), 9);
    let last = reqs[8].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "run the tests");
    let err = text(&out.stderr);
    assert!(
        err.contains("  ! hook: a Stop hook blocked the end of the turn 9 times in a row (turn 1); the turn ends here ([hooks] max_stop_blocks = 8)\n"),
        "{err}"
    );
    let active: Vec<Value> = std::fs::read_to_string(&payloads)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["stop_hook_active"].clone())
        .collect();
    let mut want = vec![json!(false)];
    want.extend(vec![json!(true); 8]);
    assert_eq!(active, want);

    // Configurable: max_stop_blocks = 1 ⇒ two requests.
    let env = Env::new();
    let file = env.hook_file("hooks.json", &one_hook("Stop", None, "exit 2", None));
    let replay = Replay::start(json!(vec![json!({"text": "done"}); 3]));
    let out = run(env.dsh(
        &replay.url(),
        &[&file],
        &["-c", "hooks.max_stop_blocks=1", "exec", "finish"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(replay.chat_requests().len(), 2);
    let last = replay.chat_requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "continue: blocked by Stop hook");
}

#[test]
fn a_user_prompt_submit_block_ends_the_turn_blocked() {
    let env = Env::new();
    let file = env.hook_file(
        "hooks.json",
        &one_hook(
            "UserPromptSubmit",
            None,
            "echo 'no secrets in prompts' >&2; exit 2",
            None,
        ),
    );
    let replay = Replay::start(json!([{"text": "never asked"}]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "my password is hunter2"]));
    assert_eq!(code(out.status), 4, "{out:?}");
    assert_eq!(replay.chat_requests().len(), 0);
    let err = text(&out.stderr);
    assert!(
        err.starts_with(
            "  ! hook: the prompt was blocked by a UserPromptSubmit hook: no secrets in prompts\n"
        ),
        "{err}"
    );
}

#[test]
fn a_bad_file_is_reported_once_and_the_others_still_load() {
    let env = Env::new();
    let bad = env.hook_file(
        "bad.json",
        &json!({"hooks": {"PreToolUse": [
            {"matcher": "bash", "hooks": [{"type": "command", "command": "exit 2"}]},
            {"matcher": "[oops", "hooks": [{"type": "command", "command": "exit 2"}]},
        ]}}),
    );
    let good = env.hook_file(
        "good.json",
        &one_hook(
            "PostToolUse",
            Some("bash"),
            "echo '{\"decision\":\"block\",\"reason\":\"seen\"}'",
            None,
        ),
    );
    let replay = Replay::start(json!([bash_call("echo ran > ran.txt"), {"text": "ok"}]));
    let out = run(env.dsh(&replay.url(), &[&bad, &good], &["exec", "go"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    // bad.json's bash guard is not in force; good.json's PostToolUse block is.
    assert!(env.repo.join("ran.txt").exists());
    assert_eq!(
        tool_texts(&replay.chat_requests()[1]),
        vec!["seen".to_owned()]
    );
    let err = text(&out.stderr);
    let line = format!(
        "warning: hooks: {}: hooks.PreToolUse[1].matcher: the matcher \"[oops\" is not a valid regex (unclosed character class); none of its hooks run\n",
        bad.display()
    );
    assert_eq!(err.matches(&line).count(), 1, "{err}");

    // `dsh hooks list` shows what is in force and what was refused.
    let out = run(env.dsh("http://127.0.0.1:9", &[&bad, &good], &["hooks", "list"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!(
            "claude-code PostToolUse [bash] default timeout: echo '{{\"decision\":\"block\",\"reason\":\"seen\"}}'\n    from {} (hooks.PostToolUse[0].hooks[0])\nrefused: {}: hooks.PreToolUse[1].matcher: the matcher \"[oops\" is not a valid regex (unclosed character class) (none of its hooks run)\n",
            good.display(),
            bad.display()
        )
    );
}

#[test]
fn the_payload_has_claude_codes_field_names() {
    let env = Env::new();
    let dump = env.script(
        "dump.py",
        r#"#!/usr/bin/env python3
import json, os, sys
raw = sys.stdin.read()
p = json.loads(raw)
with open(os.path.join(os.environ["DUMP_DIR"], p["hook_event_name"] + ".json"), "w") as f:
    f.write(raw)
"#,
    );
    let dump_dir = env.root.join("dump");
    std::fs::create_dir_all(&dump_dir).unwrap();
    let command = format!("DUMP_DIR={} {}", dump_dir.display(), dump.display());
    let group = json!([{"hooks": [{"type": "command", "command": command}]}]);
    let file = env.hook_file(
        "hooks.json",
        &json!({"hooks": {"SessionStart": group, "UserPromptSubmit": group, "PreToolUse": group,
            "PostToolUse": group, "Stop": group}}),
    );
    let replay = Replay::start(json!([bash_call("echo hi"), {"text": "bye"}]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "--json", "say hi"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let lines = json_lines(&out.stdout);
    let id = lines.last().unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let transcript: Vec<PathBuf> = files_under(&env.home.join("sessions"))
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "session.jsonl"))
        .collect();
    let transcript = transcript[0].display().to_string();
    let cwd = env.repo.display().to_string();
    let read = |event: &str| -> Value {
        let raw = std::fs::read_to_string(dump_dir.join(format!("{event}.json"))).unwrap();
        assert!(raw.ends_with("}\n"), "one line and a newline: {raw:?}");
        serde_json::from_str(&raw).unwrap()
    };
    let base = |event: &str| json!({"session_id": id, "transcript_path": transcript, "cwd": cwd, "hook_event_name": event});
    let with = |event: &str, extra: Value| {
        let mut v = base(event);
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    assert_eq!(
        read("SessionStart"),
        with("SessionStart", json!({"source": "startup"}))
    );
    assert_eq!(
        read("UserPromptSubmit"),
        with("UserPromptSubmit", json!({"prompt": "say hi"}))
    );
    assert_eq!(
        read("PreToolUse"),
        with(
            "PreToolUse",
            json!({"tool_name": "bash", "tool_input": {"command": "echo hi", "description": "run it"},
                "tool_use_id": "call_00_replay0"})
        )
    );
    assert_eq!(
        read("PostToolUse"),
        with(
            "PostToolUse",
            json!({"tool_name": "bash", "tool_input": {"command": "echo hi", "description": "run it"},
                "tool_use_id": "call_00_replay0", "tool_response": "hi\n"})
        )
    );
    assert_eq!(
        read("Stop"),
        with("Stop", json!({"stop_hook_active": false}))
    );
    // Key order as Claude Code writes it.
    let raw = std::fs::read_to_string(dump_dir.join("PostToolUse.json")).unwrap();
    let keys: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(&raw)
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        keys,
        [
            "session_id",
            "transcript_path",
            "cwd",
            "hook_event_name",
            "tool_name",
            "tool_input",
            "tool_use_id",
            "tool_response"
        ]
    );
}

/// Waits (hang-guarded) until `path` holds a line, and returns it.
fn wait_for_line(path: &Path) -> String {
    let deadline = std::time::Instant::now() + HANG_LIMIT;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s.trim().to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn gone(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z")
}

#[test]
fn cancelling_the_turn_kills_a_running_hook_with_its_group() {
    let env = Env::new();
    let pid_file = env.root.join("hook-bg.pid");
    // No timeout of its own (10 minutes): only the turn's cancellation stops it.
    let command = format!("sleep 300 & echo $! > {}; sleep 300", pid_file.display());
    let file = env.hook_file("hooks.json", &one_hook("PreToolUse", None, &command, None));
    let replay = Replay::start(json!([bash_call("echo ran > ran.txt"), {"text": "never"}]));
    let mut child = env
        .dsh(&replay.url(), &[&file], &["exec", "go"])
        .spawn()
        .unwrap();
    let bg: u32 = wait_for_line(&pid_file).parse().unwrap();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let exit = rx.recv_timeout(HANG_LIMIT).unwrap_or_else(|_| {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string(), &bg.to_string()])
            .status();
        panic!("dsh did not exit after SIGTERM")
    });
    assert_eq!(code(exit.unwrap()), 130);
    let deadline = std::time::Instant::now() + HANG_LIMIT;
    while !gone(bg) {
        assert!(
            std::time::Instant::now() < deadline,
            "the hook's sleep {bg} survived"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!env.repo.join("ran.txt").exists());
}

#[test]
fn session_start_context_is_in_the_first_request() {
    let env = Env::new();
    let file = env.hook_file(
        "hooks.json",
        &one_hook(
            "SessionStart",
            Some("startup"),
            r#"echo '{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"ticket ABC-1: fix the login page"}}'"#,
            None,
        ),
    );
    let replay = Replay::start(json!([{"text": "ok"}]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "what is my ticket?"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let reqs = replay.chat_requests();
    let users: Vec<Value> = reqs[0].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(users.first(), Some(&json!("what is my ticket?")));
    assert_eq!(
        users.last(),
        Some(&json!("ticket ABC-1: fix the login page"))
    );
    // Resumed: the matcher `startup` does not take `resume`.
    let id = env.session_log()[0]["id"].as_str().unwrap().to_owned();
    let replay = Replay::start(json!([{"text": "ok"}]));
    let out = run(env.dsh(&replay.url(), &[&file], &["exec", "--resume", &id, "again"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let last = replay.chat_requests()[0].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].clone())
        .collect::<Vec<_>>();
    assert_eq!(
        last.iter()
            .filter(|c| **c == json!("ticket ABC-1: fix the login page"))
            .count(),
        1,
        "{last:?}"
    );
}

#[test]
fn codex_hooks_cannot_ask_and_hooks_list_json() {
    let env = Env::new();
    let file = env.hook_file(
        "codex-hooks.json",
        &json!({"hooks": {"PreToolUse": [{"matcher": "bash", "hooks": [
            {"command": ASK_SH_ONE_LINE, "timeoutSec": 30},
        ]}]}}),
    );
    let setting = format!("hooks.codex=[{:?}]", file.display().to_string());
    let replay = Replay::start(json!([bash_call("echo ran > ran.txt"), {"text": "ok"}]));
    let out = run(env
        .0
        .dsh(&replay.url(), API_KEY, &["-c", &setting, "exec", "go"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(
        env.repo.join("ran.txt").exists(),
        "a Codex ask decides nothing"
    );
    let out = run(env.0.dsh(
        "http://127.0.0.1:9",
        API_KEY,
        &["-c", &setting, "hooks", "list", "--json"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        json!({"hooks": [{"dialect": "codex", "event": "PreToolUse", "matcher": "bash",
            "timeoutMs": 30000, "command": ASK_SH_ONE_LINE, "file": file.display().to_string(),
            "entry": "hooks.PreToolUse[0].hooks[0]"}], "refused": [], "skipped": []})
    );
}

const ASK_SH_ONE_LINE: &str = r#"cat >/dev/null; echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"?"}}'"#;

#[test]
fn discover_reads_claude_codes_own_files_and_hooks_get_a_scrubbed_environment() {
    let env = Env::new();
    let seen = env.root.join("env-seen.txt");
    // The user's file: records what the hook's environment holds.
    std::fs::create_dir_all(env.home.join(".claude")).unwrap();
    std::fs::write(
        env.home.join(".claude/settings.json"),
        json!({"model": "opus", "hooks": {"PreToolUse": [{"matcher": "bash", "hooks": [{"type": "command",
            "command": format!("echo \"key=${{DEEPSEEK_API_KEY:-unset}} project=$CLAUDE_PROJECT_DIR\" > {}", seen.display())}]}]}})
        .to_string(),
    )
    .unwrap();
    // The project's file: denies.
    std::fs::create_dir_all(env.repo.join(".claude")).unwrap();
    std::fs::write(
        env.repo.join(".claude/settings.json"),
        one_hook(
            "PreToolUse",
            Some("bash"),
            "echo 'not in this repo' >&2; exit 2",
            None,
        )
        .to_string(),
    )
    .unwrap();
    let script = json!([bash_call("echo ran > ran.txt"), {"text": "ok"}]);

    // Without discover nothing runs.
    let replay = Replay::start(script.clone());
    let out = run(env.0.dsh(&replay.url(), API_KEY, &["exec", "go"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(env.repo.join("ran.txt").exists());
    assert!(!seen.exists());
    std::fs::remove_file(env.repo.join("ran.txt")).unwrap();

    let replay = Replay::start(script);
    let out = run(env.0.dsh(
        &replay.url(),
        API_KEY,
        &["-c", "hooks.discover=true", "exec", "go"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(!env.repo.join("ran.txt").exists());
    assert_eq!(
        tool_texts(&replay.chat_requests()[1]),
        vec!["Error: not in this repo".to_owned()]
    );
    // dsh's API key is scrubbed from the hook's environment; the project dir is set.
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        format!("key=unset project={}\n", env.repo.display())
    );
}
