//! End-to-end tests of the built `dsh` binary for two defects a hostile trial found (issue 13,
//! "Faults and bad input"), each against the in-process replay provider
//! (`dsh_test_support::ReplayServer` on 127.0.0.1):
//!
//! - `a_nameless_call_is_noted_so_the_next_request_differs`: a tool call with an empty name is
//!   not replayed, but the next request carries a note in its place, so it differs from the one
//!   before (the trial saw byte-identical requests until the step limit); the log verifies.
//! - `an_approved_outside_read_then_edit_in_the_shell_changes_the_file`: in the interactive
//!   shell, a `read` and then an `edit` of an existing file outside the workspace, each approved
//!   with `y` on stdin, change the file (the read-before-write rule needs the read, which the
//!   filesystem fence used to refuse with no approval path).
//!
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, Shell, code, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

/// "Did not hang" bound for one dsh run (generous; runs take well under a second).
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// Bound for the approval questions of the shell test (a hang guard).
const QUESTION_LIMIT: Duration = Duration::from_secs(60);

/// The note dsh puts after the results of a step with a nameless call
/// (`dsh_agent_loop::history::NAMELESS_CALL_NOTE`).
const NOTE: &str = "[a tool call without a name was dropped; call tools by their exact names]";

fn run(cmd: Command) -> Output {
    common::e2e::run(cmd, HANG_LIMIT)
}

fn dsh(env: &Sandbox, url: &str, args: &[&str]) -> Command {
    env.dsh(url, "sk-faults-trial", args)
}

/// The only `session.jsonl` under `$DSH_HOME`.
fn session_log(env: &Sandbox) -> PathBuf {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.file_name().is_some_and(|n| n == "session.jsonl") {
                out.push(p);
            }
        }
    }
    let mut logs = Vec::new();
    walk(&env.home, &mut logs);
    assert_eq!(logs.len(), 1, "{logs:?}");
    logs.remove(0)
}

/// The stored log's records whose `type` is `kind`, parsed.
fn records_of(log: &Path, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == kind)
        .collect()
}

/// `dsh sessions verify --json LOG` succeeds with no errors.
fn assert_verifies(env: &Sandbox, log: &Path) {
    let out = run(dsh(
        env,
        "http://127.0.0.1:9",
        &["sessions", "verify", "--json", log.to_str().unwrap()],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["errors"], json!([]));
}

// ---------------------------------------------------------------------------------------------
// 1. A tool call without a name
// ---------------------------------------------------------------------------------------------

#[test]
fn a_nameless_call_is_noted_so_the_next_request_differs() {
    let env = Sandbox::new();
    std::fs::write(env.repo.join("a.txt"), "alpha\n").unwrap();
    let replay = Replay::start(json!([
        {"tool_calls": [["", "{\"file_path\":\"a.txt\"}"]]},
        {"tool_calls": [["", "{\"file_path\":\"a.txt\"}"]]},
        {"text": "done"},
    ]));
    let out = run(dsh(
        &env,
        &replay.url(),
        &["exec", "--max-steps", "5", "read a.txt"],
    ));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), "done");
    let bodies = replay.server.chat_bodies();
    assert_eq!(bodies.len(), 3);
    let messages = |i: usize| bodies[i]["messages"].as_array().unwrap().clone();
    // Each request differs from the one before.
    assert_ne!(messages(1), messages(0));
    assert_ne!(messages(2), messages(1));
    // The nameless call is never replayed (no tool_calls, no tool results), and in its place
    // the model sees the placeholder (assistant) and the note (user), once per nameless call.
    for (i, want) in [(1usize, 1usize), (2, 2)] {
        let msgs = messages(i);
        assert!(msgs.iter().all(|m| m.get("tool_calls").is_none()), "{i}");
        assert!(msgs.iter().all(|m| m["role"] != "tool"), "{i}");
        let tail: Vec<(String, String)> = msgs
            .iter()
            .skip(msgs.len() - 2 * want)
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_owned(),
                    m["content"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let pair = [
            (
                "assistant".to_owned(),
                "[a tool call without a name]".to_owned(),
            ),
            ("user".to_owned(), NOTE.to_owned()),
        ];
        let expected: Vec<(String, String)> = pair.iter().cycle().take(2 * want).cloned().collect();
        assert_eq!(tail, expected, "request {i}");
    }
    // The log holds the calls and their error results as they were; it verifies.
    let log = session_log(&env);
    let results = records_of(&log, "tool/result");
    assert_eq!(results.len(), 2);
    for r in &results {
        assert_eq!(r["data"]["message"]["content"][0]["isError"], true, "{r}");
    }
    assert_verifies(&env, &log);
}

// ---------------------------------------------------------------------------------------------
// 2. An approved read and edit outside the workspace
// ---------------------------------------------------------------------------------------------

#[test]
fn an_approved_outside_read_then_edit_in_the_shell_changes_the_file() {
    let env = Sandbox::new();
    let outside = env.root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let target = outside.join("notes.txt");
    std::fs::write(&target, "colour: red\n").unwrap();
    let t = target.display().to_string();
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": t}]]},
        {"tool_calls": [["edit", {"file_path": t, "old_string": "red", "new_string": "blue"}]]},
        {"text": "edited it"},
    ]));
    let mut shell = Shell::spawn(dsh(&env, &replay.url(), &[]));
    shell.send(&format!("change the colour in {t}"));
    // Each question comes within a second; a missing one fails here rather than at the hang
    // guard (the shell keeps waiting on stdin).
    let read_q = shell.wait_for(
        "allow tool `read` (permission preset workspace-write: read target ",
        QUESTION_LIMIT,
    );
    assert!(read_q.contains(&t), "{read_q}");
    shell.send("y");
    let edit_q = shell.wait_for(
        "allow tool `edit` (permission preset workspace-write: edit target ",
        QUESTION_LIMIT,
    );
    assert!(edit_q.contains(&t), "{edit_q}");
    shell.send("y");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "stderr: {err}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "colour: blue\n",
        "stderr: {err}"
    );

    let log = session_log(&env);
    let decided: Vec<Value> = records_of(&log, "approval/decided")
        .into_iter()
        .map(|v| v["data"]["outcome"].clone())
        .collect();
    assert_eq!(decided, [json!("allowed-once"), json!("allowed-once")]);
    let results = records_of(&log, "tool/result");
    assert_eq!(results.len(), 2);
    for r in &results {
        assert_eq!(r["data"]["message"]["content"][0]["isError"], false, "{r}");
    }
    assert_verifies(&env, &log);
}

#[test]
fn an_outside_read_in_exec_is_still_refused() {
    let env = Sandbox::new();
    let outside = env.root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let target = outside.join("secret.txt");
    std::fs::write(&target, "secret\n").unwrap();
    let t = target.display().to_string();
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": t}]]},
        {"text": "could not"},
    ]));
    let out = run(dsh(&env, &replay.url(), &["exec", "read it"]));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let result = replay.last_message(1);
    assert!(result.starts_with("Error: "), "{result}");
    assert!(!result.contains("secret\n"), "{result}");
    assert!(result.contains("is outside the workspace"), "{result}");
}
