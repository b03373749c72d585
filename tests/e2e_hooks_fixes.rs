//! Hooks defects a fresh-user trial found (issue 17), through the built `dsh` binary with real
//! hook scripts: Claude Code tool names in matchers (`Bash`, `Edit|Write`) and the load warning
//! for a matcher that matches no tool; relative hook paths resolved against the settings file
//! that names them, not the launch directory.
//!
//! The model is the replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, code, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

const API_KEY: &str = "sk-e2e-hooks-fixes";
/// "Did not hang" bound for one dsh run.
const HANG_LIMIT: Duration = Duration::from_secs(60);

fn run(cmd: Command) -> Output {
    common::e2e::run(cmd, HANG_LIMIT)
}

fn write_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn write_json(dir: &Path, name: &str, v: &Value) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

fn bash_call(command: &str) -> Value {
    json!({"tool_calls": [["bash", {"command": command, "description": "run it"}]]})
}

fn tool_texts(req: &dsh_test_support::RecordedRequest) -> Vec<String> {
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Denies `rm -rf` when the payload's `tool_name` is dsh's `bash`.
const GUARD_SH: &str = r#"#!/bin/bash
p=$(cat)
case "$p" in
  *'"tool_name":"bash"'*'rm -rf'*) echo 'no rm -rf here' >&2; exit 2 ;;
esac
exit 0
"#;

#[test]
fn claude_code_tool_names_in_matchers_fire_on_dsh_tools() {
    let sb = Sandbox::new();
    std::fs::write(sb.repo.join("keep.txt"), "precious\n").unwrap();
    let guard = write_script(&sb.root.join("hooks"), "guard.sh", GUARD_SH);
    let file = write_json(
        &sb.root.join("hooks"),
        "hooks.json",
        &json!({"hooks": {"PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": guard.display().to_string()}]},
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "exit 0"}]},
        ]}}),
    );
    let setting = format!("hooks.claude_code=[{:?}]", file.display().to_string());
    let replay = Replay::start(json!([bash_call("rm -rf keep.txt"), {"text": "stopped"}]));
    let out = run(sb.dsh(
        &replay.url(),
        API_KEY,
        &["-c", &setting, "exec", "delete it"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(sb.repo.join("keep.txt")).unwrap(),
        "precious\n"
    );
    assert_eq!(
        tool_texts(&replay.chat_requests()[1]),
        vec!["Error: no rm -rf here".to_owned()]
    );
    assert!(!text(&out.stderr).contains("matches no tool"), "{out:?}");
}

#[test]
fn a_matcher_that_matches_no_tool_is_warned_about_at_load_and_in_hooks_list() {
    let sb = Sandbox::new();
    let file = write_json(
        &sb.root.join("hooks"),
        "hooks.json",
        &json!({"hooks": {"PreToolUse": [
            {"matcher": "Shell", "hooks": [{"command": "exit 0"}, {"command": "exit 0"}]},
        ]}}),
    );
    let setting = format!("hooks.claude_code=[{:?}]", file.display().to_string());
    let warning = format!(
        "{}: hooks.PreToolUse[0].matcher: \"Shell\" matches no tool of this harness; its hooks never run",
        file.display()
    );
    let out = run(sb.dsh(
        "http://127.0.0.1:9",
        API_KEY,
        &["-c", &setting, "hooks", "list", "--json"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["skipped"], json!([warning]));
    let replay = Replay::start(json!([{"text": "hi"}]));
    let out = run(sb.dsh(&replay.url(), API_KEY, &["-c", &setting, "exec", "hi"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr
            .matches(&format!("warning: hooks: {warning}\n"))
            .count(),
        1,
        "{stderr}"
    );
}

#[test]
fn relative_hook_paths_resolve_against_the_settings_file_not_the_launch_dir() {
    let sb = Sandbox::new();
    let marker = sb.root.join("PWNED");
    let hook = |tag: &str| {
        json!({"hooks": {"SessionStart": [{"hooks": [{"type": "command",
            "command": format!("echo {tag} >> {}", marker.display())}]}]}})
    };
    // The user's own file, next to their settings.
    write_json(&sb.home.join("hooks"), "guard.json", &hook("user"));
    // A cloned repository supplying a file at the same relative path.
    write_json(&sb.repo.join("hooks"), "guard.json", &hook("repo"));
    std::fs::write(
        sb.home.join("settings.toml"),
        "[hooks]\nclaude_code = [\"hooks/guard.json\"]\n",
    )
    .unwrap();
    let replay = Replay::start(json!([{"text": "hi"}]));
    let out = run(sb.dsh(&replay.url(), API_KEY, &["exec", "hi"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "user\n");

    // `-c` paths are the launch directory's.
    std::fs::remove_file(sb.home.join("settings.toml")).unwrap();
    std::fs::remove_file(&marker).unwrap();
    let replay = Replay::start(json!([{"text": "hi"}]));
    let out = run(sb.dsh(
        &replay.url(),
        API_KEY,
        &[
            "-c",
            "hooks.claude_code=[\"hooks/guard.json\"]",
            "exec",
            "hi",
        ],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "repo\n");
}

/// The user-message texts of chat request `req`.
fn user_texts(req: &dsh_test_support::RecordedRequest) -> Vec<Value> {
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].clone())
        .collect()
}

#[test]
fn claude_code_plain_stdout_of_user_prompt_submit_and_session_start_is_context() {
    let sb = Sandbox::new();
    let file = write_json(
        &sb.root.join("hooks"),
        "hooks.json",
        &json!({"hooks": {
            "SessionStart": [{"hooks": [{"command": "echo 'on branch main'"}]}],
            "UserPromptSubmit": [{"hooks": [{"command": "cat >/dev/null; echo 'ticket ABC-1: fix login'"}]}],
        }}),
    );
    let setting = format!("hooks.claude_code=[{:?}]", file.display().to_string());
    let replay = Replay::start(json!([{"text": "ok"}]));
    let out = run(sb.dsh(&replay.url(), API_KEY, &["-c", &setting, "exec", "go"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let users = user_texts(&replay.chat_requests()[0]);
    assert!(users.contains(&json!("on branch main")), "{users:?}");
    assert!(
        users.contains(&json!("ticket ABC-1: fix login")),
        "{users:?}"
    );
    assert_eq!(users.first(), Some(&json!("go")));
}

#[test]
fn claude_project_dir_is_expanded_by_bash_not_pasted_into_the_command() {
    let sb = Sandbox::new();
    let pwn = sb.root.join("PWN2");
    // A workspace whose name is a command substitution.
    let ws = sb.root.join(format!("sp ace $(touch {})", pwn.display()));
    std::fs::create_dir_all(&ws).unwrap();
    let seen = sb.root.join("seen.txt");
    let file = write_json(
        &sb.root.join("hooks"),
        "hooks.json",
        &json!({"hooks": {"SessionStart": [{"hooks": [{"command":
            format!("printf '%s' \"${{CLAUDE_PROJECT_DIR}}\" > {}", seen.display())}]}]}}),
    );
    let setting = format!("hooks.claude_code=[{:?}]", file.display().to_string());
    let replay = Replay::start(json!([{"text": "ok"}]));
    let mut cmd = sb.dsh(&replay.url(), API_KEY, &["-c", &setting, "exec", "go"]);
    cmd.current_dir(&ws);
    let out = run(cmd);
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(!pwn.exists(), "the directory name ran as a command");
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        ws.display().to_string()
    );
}

#[test]
fn claude_code_post_tool_use_runs_only_after_a_tool_succeeded() {
    let sb = Sandbox::new();
    let ran = sb.root.join("post-ran.txt");
    let file = write_json(
        &sb.root.join("hooks"),
        "hooks.json",
        &json!({"hooks": {
            "PreToolUse": [{"matcher": "bash", "hooks": [{"command":
                "grep -q denied-call && { echo 'not this one' >&2; exit 2; }; exit 0"}]}],
            "PostToolUse": [{"hooks": [{"command":
                format!("python3 -c 'import json,sys; p=json.load(sys.stdin); print(p[\"tool_name\"], p[\"tool_input\"].get(\"command\", p[\"tool_input\"].get(\"file_path\")))' >> {}", ran.display())}]}],
        }}),
    );
    let setting = format!("hooks.claude_code=[{:?}]", file.display().to_string());
    let replay = Replay::start(json!([
        bash_call("echo denied-call"),
        bash_call("exit 3"),
        {"tool_calls": [["read", {"file_path": sb.repo.join("missing.txt").display().to_string()}]]},
        bash_call("echo fine"),
        {"text": "done"}
    ]));
    let out = run(sb.dsh(&replay.url(), API_KEY, &["-c", &setting, "exec", "go"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "bash echo fine\n");
}

#[test]
fn large_hook_output_is_read_and_output_past_the_cap_fails_closed_for_pre_tool_use() {
    let sb = Sandbox::new();
    // A valid 2 MB deny (padded reason context) is decoded.
    let big = write_script(
        &sb.root.join("hooks"),
        "big.py",
        r#"#!/usr/bin/env python3
import json, sys
sys.stdin.read()
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
    "permissionDecision": "deny", "permissionDecisionReason": "too big to run",
    "additionalContext": "x" * 2_000_000}}))
"#,
    );
    let file = write_json(
        &sb.root.join("hooks"),
        "big.json",
        &json!({"hooks": {"PreToolUse": [{"matcher": "bash", "hooks": [{"command": big.display().to_string()}]}]}}),
    );
    let setting = format!("hooks.claude_code=[{:?}]", file.display().to_string());
    let replay = Replay::start(json!([bash_call("echo ran > ran.txt"), {"text": "ok"}]));
    let out = run(sb.dsh(&replay.url(), API_KEY, &["-c", &setting, "exec", "go"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(!sb.repo.join("ran.txt").exists());
    assert_eq!(
        tool_texts(&replay.chat_requests()[1]),
        vec!["Error: too big to run".to_owned()]
    );

    // Past the 16 MiB the runner reads: not decoded, the call is denied, and the notice says why.
    let huge = "head -c 17000000 /dev/zero | tr '\\0' ' '; echo '{}'";
    let file = write_json(
        &sb.root.join("hooks"),
        "huge.json",
        &json!({"hooks": {"PreToolUse": [{"matcher": "bash", "hooks": [{"command": huge}]}]}}),
    );
    let setting = format!("hooks.claude_code=[{:?}]", file.display().to_string());
    let replay = Replay::start(json!([bash_call("echo ran > ran.txt"), {"text": "ok"}]));
    let out = run(sb.dsh(&replay.url(), API_KEY, &["-c", &setting, "exec", "go"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(!sb.repo.join("ran.txt").exists());
    assert_eq!(
        tool_texts(&replay.chat_requests()[1]),
        vec![
            "Error: the PreToolUse hook's output exceeded 16777216 bytes and was not read; the call is denied"
                .to_owned()
        ]
    );
    assert!(
        text(&out.stderr)
            .contains("printed more than 16777216 bytes of output; the call is denied"),
        "{}",
        text(&out.stderr)
    );
}
