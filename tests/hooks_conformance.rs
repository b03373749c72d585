//! Every complete `hook-cc-*` / `hook-codex-*` session log the upstream implementation recorded
//! (the corpus in `shared/conformance/upstream-sessions`, read at run time) reproduced through
//! the built `dsh` binary: the log's own model responses are replayed (`ReplayServer` on
//! 127.0.0.1), hook scripts that do what the upstream scenario's hooks did are configured, and
//! the session dsh writes has the same sequence of event types and the same hook, tool and
//! context payload fields (ids and times aside).
//!
//! Compared: `turn/*`, `step/*`, `user/message` (by source: the user, the runtime-context
//! snapshot, the hook bridge), `assistant/message`, `tool/call`, `tool/result`, `hook/invoked`,
//! `hook/result`, `approval/asked`, `approval/decided`. Left out: streaming chunks, request
//! records, inbox splices, titles and the permission preset (bookkeeping the hooks do not
//! touch, with dsh's own shape). The two `*-promptsubmit-block` logs hold only a header (the
//! recording stopped before the turn was written): not complete sessions, so not reproduced
//! here (`tests/e2e_hooks.rs` covers a blocked prompt). The upstream pretool-ask session
//! rejected approvals automatically; here the interactive shell asks and the test answers "n".
//! Reported as skipped when the corpus is absent (`dsh-shared-corpus`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, Shell, code, json_lines, text};

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

const API_KEY: &str = "sk-hooks-conformance";
const HANG_LIMIT: Duration = Duration::from_secs(60);

/// The upstream log of scenario `name`, one JSON value per line.
fn upstream(name: &str) -> Vec<Value> {
    let dir =
        dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "conformance/upstream-sessions");
    let path = dir.join(format!(
        "examples__acp-agent__snapshots__{name}__session.jsonl"
    ));
    json_lines(&std::fs::read(&path).unwrap())
}

/// The replay script: one response per upstream `assistant/message` (reasoning, text, tool
/// calls with their raw argument text).
fn script(log: &[Value]) -> Value {
    let responses: Vec<Value> = log
        .iter()
        .filter(|e| e["type"] == "assistant/message")
        .map(|e| {
            let mut r = json!({});
            let mut text = String::new();
            let mut calls = Vec::new();
            for b in e["data"]["message"]["content"].as_array().unwrap() {
                match b["type"].as_str().unwrap() {
                    "reasoning" => r["reasoning"] = b["text"].clone(),
                    "text" => text.push_str(b["text"].as_str().unwrap()),
                    "tool-call" => calls.push(json!([b["name"], b["arguments"]])),
                    other => panic!("unexpected block {other}"),
                }
            }
            if !text.is_empty() {
                r["text"] = json!(text);
            }
            if !calls.is_empty() {
                r["tool_calls"] = json!(calls);
            }
            r
        })
        .collect();
    json!(responses)
}

/// The first user prompt of the log.
fn prompt(log: &[Value]) -> String {
    log.iter()
        .find(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "user")
        .map(|e| e["data"]["content"][0]["text"].as_str().unwrap().to_owned())
        .unwrap()
}

/// What is compared of one event (`None`: left out). Ids, times and the snapshot's wording
/// (dsh renders its own runtime context) are dropped.
fn comparable(e: &Value) -> Option<Value> {
    let kind = e["type"].as_str()?;
    let d = &e["data"];
    Some(match kind {
        "turn/start" | "turn/end" | "step/start" | "step/end" => json!([kind, d]),
        "user/message" => {
            let s = &d["source"];
            if s["form"] == "snapshot" {
                json!([kind, "runtime-context snapshot"])
            } else if s["kind"] == "plugin" {
                json!([kind, s["plugin"], d["content"]])
            } else {
                json!([kind, "user", d["content"]])
            }
        }
        "assistant/message" => {
            let blocks: Vec<Value> = d["message"]["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| match b["type"].as_str().unwrap() {
                    "tool-call" => json!(["tool-call", b["name"], b["arguments"]]),
                    _ => json!([b["type"], b["text"]]),
                })
                .collect();
            json!([kind, blocks])
        }
        "tool/call" => json!([kind, d["turn"], d["step"], d["name"], d["arguments"]]),
        "tool/result" => {
            let blocks: Vec<Value> = d["message"]["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| json!([b["content"], b["isError"]]))
                .collect();
            json!([kind, d["turn"], d["step"], blocks])
        }
        "hook/invoked" => json!([kind, d]),
        "hook/result" => {
            let mut d = d.clone();
            let ms = d.as_object_mut().unwrap().remove("durationMs");
            assert!(
                ms.is_some_and(|m| m.as_f64().is_some_and(|m| m >= 0.0)),
                "{e}"
            );
            json!([kind, d])
        }
        "approval/asked" => json!([kind, d["toolName"], d["reason"]]),
        "approval/decided" => json!([kind, d["outcome"]]),
        _ => return None,
    })
}

fn sequence(log: &[Value]) -> Vec<Value> {
    log.iter().filter_map(comparable).collect()
}

struct Scenario {
    /// Upstream scenario name (`hook-cc-pretool-deny`).
    name: &'static str,
    /// `claude_code` or `codex`.
    dialect: &'static str,
    /// The hook file: `<dir>` in commands is replaced by a per-run state directory.
    hooks: Value,
    /// Answer an approval question with "n" in the interactive shell instead of `exec`.
    reject_in_shell: bool,
}

fn reproduce(s: &Scenario) {
    let log = upstream(s.name);
    let sandbox = Sandbox::new();
    let state = sandbox.root.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let hooks = s
        .hooks
        .to_string()
        .replace("<dir>", &state.display().to_string());
    let file: PathBuf = sandbox.root.join("hooks.json");
    std::fs::write(&file, hooks).unwrap();
    let replay = Replay::start(script(&log));
    let setting = format!("hooks.{}=[{:?}]", s.dialect, file.display().to_string());
    let base = [
        "-c",
        setting.as_str(),
        "--permission-mode",
        "danger-full-access",
    ];
    let task = prompt(&log);
    let (events, stderr) = if s.reject_in_shell {
        let mut shell = Shell::spawn(sandbox.dsh(&replay.url(), API_KEY, &base));
        shell.send(&task);
        shell.wait_for("allow tool `bash`", HANG_LIMIT);
        shell.send("n");
        let (status, err) = shell.finish(HANG_LIMIT);
        assert_eq!(code(status), 0, "{err}");
        (stored_log(&sandbox.home), err)
    } else {
        let mut args = base.to_vec();
        args.extend(["exec", "--json", task.as_str()]);
        let out = common::e2e::run(sandbox.dsh(&replay.url(), API_KEY, &args), HANG_LIMIT);
        assert_eq!(code(out.status), 0, "{out:?}");
        let mut lines = json_lines(&out.stdout);
        assert_eq!(lines.pop().unwrap()["type"], "result");
        (lines, text(&out.stderr))
    };
    let want = sequence(&log);
    let got = sequence(&events);
    if want != got {
        let show = |v: &[Value]| v.iter().map(|e| format!("  {e}\n")).collect::<String>();
        panic!(
            "{}: the event sequences differ\nupstream:\n{}dsh:\n{}stderr:\n{stderr}",
            s.name,
            show(&want),
            show(&got)
        );
    }
    assert_eq!(
        replay.chat_requests().len(),
        script(&log).as_array().unwrap().len()
    );
    if s.name.ends_with("invalid-matcher") {
        // The refused file is reported once, with the entry; none of its hooks ran.
        let line = format!(
            "warning: hooks: {}: hooks.PreToolUse[0].matcher: the matcher \"(unclosed\" is not a valid regex (unclosed group); none of its hooks run\n",
            file.display()
        );
        assert_eq!(stderr.matches(&line).count(), 1, "{stderr}");
    }
}

fn stored_log(home: &Path) -> Vec<Value> {
    let mut stack = vec![home.join("sessions")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "session.jsonl") {
                let mut lines = json_lines(&std::fs::read(&p).unwrap());
                lines.remove(0); // the header
                return lines;
            }
        }
    }
    panic!("no session log under {}", home.display())
}

fn group(event: &str, matcher: Option<&str>, command: &str) -> Value {
    let mut g = json!({"hooks": [{"type": "command", "command": command}]});
    if let Some(m) = matcher {
        g["matcher"] = json!(m);
    }
    json!({"hooks": {event: [g]}})
}

/// Exit 2 with `reason` on stderr the first time, then exit 0 (a marker file in `<dir>`).
fn block_once(reason: &str) -> String {
    format!(
        "cat >/dev/null; if [ -e <dir>/seen ]; then exit 0; fi; touch <dir>/seen; echo '{reason}' >&2; exit 2"
    )
}

fn context_json(event: &str, text: &str) -> String {
    let out = json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}});
    format!("cat >/dev/null; echo '{out}'")
}

const AUDIT: &str = "Note: command output has been verified against the audit log.";
const TEAL: &str = "The user has previously stated their favorite color is teal.";
const SECOND: &str = "Also reply with the single word SECOND, then stop.";

macro_rules! conformance {
    ($($test:ident => $scenario:expr;)*) => {$(
        #[test]
        #[cfg_attr(not(shared_corpus), ignore = "needs ../shared/conformance beside the repository")]
        fn $test() {
            reproduce(&$scenario);
        }
    )*};
}

conformance! {
    cc_pretool_deny => Scenario {
        name: "hook-cc-pretool-deny",
        dialect: "claude_code",
        hooks: group("PreToolUse", Some("bash"), "echo 'bash is disabled by policy in this session' >&2; exit 2"),
        reject_in_shell: false,
    };
    cc_pretool_ask => Scenario {
        name: "hook-cc-pretool-ask",
        dialect: "claude_code",
        hooks: group("PreToolUse", Some("bash"), &format!("cat >/dev/null; echo '{}'", json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask", "permissionDecisionReason": "bash requires manual approval in this session"}}))),
        reject_in_shell: true,
    };
    cc_posttool_block => Scenario {
        name: "hook-cc-posttool-block",
        dialect: "claude_code",
        hooks: group("PostToolUse", Some("bash"), &block_once("tool output rejected by policy: retry once")),
        reject_in_shell: false,
    };
    cc_posttool_context => Scenario {
        name: "hook-cc-posttool-context",
        dialect: "claude_code",
        hooks: group("PostToolUse", Some("bash"), &context_json("PostToolUse", AUDIT)),
        reject_in_shell: false,
    };
    cc_promptsubmit_context => Scenario {
        name: "hook-cc-promptsubmit-context",
        dialect: "claude_code",
        hooks: group("UserPromptSubmit", None, &context_json("UserPromptSubmit", TEAL)),
        reject_in_shell: false,
    };
    cc_stop_continue => Scenario {
        name: "hook-cc-stop-continue",
        dialect: "claude_code",
        hooks: group("Stop", None, &block_once(SECOND)),
        reject_in_shell: false,
    };
    cc_invalid_matcher => Scenario {
        name: "hook-cc-invalid-matcher",
        dialect: "claude_code",
        hooks: json!({"hooks": {
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "exit 2"}]}],
            "PreToolUse": [{"matcher": "(unclosed", "hooks": [{"type": "command", "command": "exit 2"}]}],
        }}),
        reject_in_shell: false,
    };
    codex_pretool_block => Scenario {
        name: "hook-codex-pretool-block",
        dialect: "codex",
        hooks: group("PreToolUse", Some("bash"), "echo 'bash is disabled by codex policy in this session' >&2; exit 2"),
        reject_in_shell: false,
    };
    codex_posttool_block => Scenario {
        name: "hook-codex-posttool-block",
        dialect: "codex",
        hooks: group("PostToolUse", Some("bash"), "cat >/dev/null; echo 'tool output rejected by codex policy: summarize instead' >&2; exit 2"),
        reject_in_shell: false,
    };
    codex_posttool_context => Scenario {
        name: "hook-codex-posttool-context",
        dialect: "codex",
        hooks: group("PostToolUse", Some("bash"), &context_json("PostToolUse", AUDIT)),
        reject_in_shell: false,
    };
    codex_promptsubmit_context => Scenario {
        name: "hook-codex-promptsubmit-context",
        dialect: "codex",
        // Codex: plain stdout of UserPromptSubmit is context.
        hooks: group("UserPromptSubmit", None, &format!("cat >/dev/null; echo '{TEAL}'")),
        reject_in_shell: false,
    };
    codex_stop_continue => Scenario {
        name: "hook-codex-stop-continue",
        dialect: "codex",
        hooks: group("Stop", None, &block_once(SECOND)),
        reject_in_shell: false,
    };
    codex_invalid_matcher => Scenario {
        name: "hook-codex-invalid-matcher",
        dialect: "codex",
        hooks: json!({"hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "exit 2"}]}],
            "PreToolUse": [{"matcher": "(unclosed", "hooks": [{"type": "command", "command": "exit 2"}]}],
        }}),
        reject_in_shell: false,
    };
}

/// The two header-only logs really are header-only (so leaving them out is honest).
#[test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
fn the_prompt_block_logs_hold_only_a_header() {
    for name in [
        "hook-cc-promptsubmit-block",
        "hook-codex-promptsubmit-block",
    ] {
        let log = upstream(name);
        assert_eq!(log.len(), 1, "{name}");
        assert_eq!(log[0]["type"], "session");
    }
}
