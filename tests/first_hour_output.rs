//! End-to-end tests of `dsh exec`'s text output as a new user meets it (issue 15, "Output"),
//! against the in-process replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1),
//! with stdout and stderr on pipes:
//!
//! - `exec_stdout_holds_only_the_final_answer`: a three-step run whose first two steps narrate
//!   before their tool calls prints only the last answer on stdout; the narration goes to stderr.
//! - `output_last_message_writes_the_final_answer`: `--output-last-message FILE` writes the
//!   final answer (exactly its text) to FILE.
//! - `a_bash_exiting_3_shows_its_exit_status_and_tail`: the bash call line shows the call's
//!   `description` and command, and its result line the exit status and the output's tail.
//! - `todo_write_is_rendered_as_a_checklist`: a `todo_write` call prints its list as a checklist.
//! - `a_retried_attempts_text_never_reaches_stdout`: the first attempt streams text and then
//!   loses its connection; after the retry stdout holds only the second attempt's answer.
//! - `a_pipe_gets_no_escape_sequences_spinner_or_reasoning`: with reasoning and a slow model,
//!   neither stream holds an ANSI escape, a spinner frame or the reasoning.
//!
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::e2e::{Replay, Sandbox, before_end_line, code, text};

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::json;

/// "Did not hang" bound for one dsh run (generous; runs take well under a second).
const HANG_LIMIT: Duration = Duration::from_secs(120);

fn run(cmd: Command) -> Output {
    common::e2e::run(cmd, HANG_LIMIT)
}

fn dsh(env: &Sandbox, url: &str, args: &[&str]) -> Command {
    env.dsh(url, "sk-first-hour-output", args)
}

/// The scripted model of a run whose interim steps narrate: two narrated bash steps, then the
/// answer.
fn narrating_script() -> serde_json::Value {
    json!([
        {"text": "Let me look at the files first.",
         "tool_calls": [["bash", {"command": "echo one", "description": "Print one"}]]},
        {"text": "Now the second check.",
         "tool_calls": [["bash", {"command": "echo two", "description": "Print two"}]]},
        {"text": "The answer is 42."},
    ])
}

#[test]
fn exec_stdout_holds_only_the_final_answer() {
    let env = Sandbox::new();
    let replay = Replay::start(narrating_script());
    let out = run(dsh(&env, &replay.url(), &["exec", "what is the answer?"]));
    let stderr = before_end_line(&text(&out.stderr));
    assert_eq!(code(out.status), 0, "{stderr}");
    assert_eq!(text(&out.stdout), "The answer is 42.\n");
    assert_eq!(
        stderr,
        "Let me look at the files first.\n\
         • bash Print one\n\
         \x20 $ echo one\n\
         \x20 ✓ exit 0\n\
         \x20 │ one\n\
         Now the second check.\n\
         • bash Print two\n\
         \x20 $ echo two\n\
         \x20 ✓ exit 0\n\
         \x20 │ two\n"
    );
}

#[test]
fn output_last_message_writes_the_final_answer() {
    let env = Sandbox::new();
    let replay = Replay::start(narrating_script());
    let file = env.root.join("last.txt");
    let f = file.display().to_string();
    let out = run(dsh(
        &env,
        &replay.url(),
        &["exec", "--output-last-message", &f, "what is the answer?"],
    ));
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "The answer is 42.");
    assert_eq!(text(&out.stdout), "The answer is 42.\n");

    // With `--json` too (stdout stays JSON Lines).
    let replay = Replay::start(narrating_script());
    let file = env.root.join("last-json.txt");
    let f = file.display().to_string();
    let out = run(dsh(
        &env,
        &replay.url(),
        &["exec", "--json", "--output-last-message", &f, "again"],
    ));
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "The answer is 42.");
}

#[test]
fn a_bash_exiting_3_shows_its_exit_status_and_tail() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {
            "command": "printf 'a\\nb\\nc\\nd\\ne\\nf\\n'; echo oops >&2; exit 3",
            "description": "Fail on purpose"}]]},
        {"text": "It failed."},
    ]));
    let out = run(dsh(&env, &replay.url(), &["exec", "run it"]));
    let stderr = before_end_line(&text(&out.stderr));
    assert_eq!(code(out.status), 0, "{stderr}");
    assert_eq!(text(&out.stdout), "It failed.\n");
    assert_eq!(
        stderr,
        "• bash Fail on purpose\n\
         \x20 $ printf 'a\\nb\\nc\\nd\\ne\\nf\\n'; echo oops >&2; exit 3\n\
         \x20 ✗ exit 3\n\
         \x20 │ … 3 earlier lines\n\
         \x20 │ d\n\
         \x20 │ e\n\
         \x20 │ f\n\
         \x20 │ [stderr]\n\
         \x20 │ oops\n"
    );
}

#[test]
fn todo_write_is_rendered_as_a_checklist() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([
        {"tool_calls": [["todo_write", {"todos": [
            {"content": "Read the code", "status": "completed"},
            {"content": "Fix the bug", "status": "in_progress"},
            {"content": "Run the tests", "status": "pending"},
        ]}]]},
        {"text": "Planned."},
    ]));
    let out = run(dsh(&env, &replay.url(), &["exec", "plan it"]));
    let stderr = before_end_line(&text(&out.stderr));
    assert_eq!(code(out.status), 0, "{stderr}");
    assert_eq!(
        stderr,
        "• todo_write 3 items\n\
         \x20 [x] Read the code\n\
         \x20 [>] Fix the bug\n\
         \x20 [ ] Run the tests\n"
    );
}

#[test]
fn a_pipe_gets_no_escape_sequences_spinner_or_reasoning() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([
        {"reasoning": "Pondering the secret reasoning.", "text": "Plain answer.", "delay_ms": 150},
    ]));
    let out = run(dsh(&env, &replay.url(), &["exec", "think"]));
    let stderr = before_end_line(&text(&out.stderr));
    assert_eq!(code(out.status), 0, "{stderr}");
    assert_eq!(text(&out.stdout), "Plain answer.\n");
    assert_eq!(stderr, "");
    assert!(!out.stdout.contains(&0x1b));
}

#[test]
fn a_retried_attempts_text_never_reaches_stdout() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([
        {"text": "Half of a wrong answer that will be cut off", "disconnect_after": 4},
        {"text": "The real answer."},
    ]));
    let out = run(dsh(
        &env,
        &replay.url(),
        &[
            "-c",
            "plugins.dsh-llm-retry.backoff.initial_delay_ms=10",
            "exec",
            "answer",
        ],
    ));
    let stderr = before_end_line(&text(&out.stderr));
    assert_eq!(code(out.status), 0, "{stderr}");
    assert_eq!(text(&out.stdout), "The real answer.\n");
    assert_eq!(replay.chat_requests().len(), 2, "{stderr}");
    assert!(!stderr.contains("wrong answer"), "{stderr}");
}
