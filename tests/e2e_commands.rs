//! Slash commands in `dsh exec` through the built binary: a custom command file's `$ARGUMENTS`
//! and `$1…` expansion is exactly the prompt the model gets; a `/name` naming a skill passes
//! through (the skill is loaded); an unknown `/name` is a usage error (exit 2) listing the
//! known commands and skills. Behaviour: docs/upstream/commands.md.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::e2e::{Replay, Sandbox, Shell, code, run, text};
use serde_json::json;

const HANG_LIMIT: Duration = Duration::from_secs(60);
const KEY: &str = "sk-e2e-commands";

fn write(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

/// The text of the first user message of chat request 0.
fn first_prompt(replay: &Replay) -> String {
    let body = &replay.chat_requests()[0].body;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    write(
        &sb.repo.join(".dsh/commands/review.md"),
        "---\ndescription: Review files\nargument-hint: <files>\n---\nReview $ARGUMENTS for bugs.\nStart with $1.\n",
    );
    write(
        &sb.repo.join(".claude/commands/fix.md"),
        "Fix issue #$1 in $2.",
    );
    write(
        &sb.home.join(".claude/skills/greet/SKILL.md"),
        "---\nname: greet\ndescription: Greets.\n---\nSay hello.\n",
    );
    sb
}

#[test]
fn a_custom_command_expands_its_arguments_exactly() {
    let sb = sandbox();
    let replay = Replay::start(json!([{"text": "reviewed"}]));
    let out = run(
        sb.dsh(&replay.url(), KEY, &["exec", "/review src/a.rs  src/b.rs"]),
        HANG_LIMIT,
    );
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), "reviewed");
    assert_eq!(
        first_prompt(&replay),
        "Review src/a.rs  src/b.rs for bugs.\nStart with src/a.rs."
    );

    let replay = Replay::start(json!([{"text": "fixed"}]));
    let out = run(
        sb.dsh(&replay.url(), KEY, &["exec", "/fix 42 parser.rs"]),
        HANG_LIMIT,
    );
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(first_prompt(&replay), "Fix issue #42 in parser.rs.");
}

#[test]
fn a_skill_name_passes_through_and_an_unknown_name_lists_what_is_known() {
    let sb = sandbox();
    let replay = Replay::start(json!([{"text": "hello"}]));
    let out = run(sb.dsh(&replay.url(), KEY, &["exec", "/greet"]), HANG_LIMIT);
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(first_prompt(&replay), "/greet");

    let replay = Replay::start(json!([]));
    let out = run(sb.dsh(&replay.url(), KEY, &["exec", "/nope x"]), HANG_LIMIT);
    assert_eq!(code(out.status), 2);
    assert_eq!(
        text(&out.stderr),
        "error: unknown command /nope: no custom command or skill has that name (commands: /fix, /review; skills: /greet)\n"
    );
    assert!(replay.chat_requests().is_empty());
    // Not command syntax: an ordinary prompt.
    let replay = Replay::start(json!([{"text": "ok"}]));
    let out = run(
        sb.dsh(&replay.url(), KEY, &["exec", "/etc/hosts looks odd"]),
        HANG_LIMIT,
    );
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(first_prompt(&replay), "/etc/hosts looks odd");
}

#[test]
fn the_interactive_shell_runs_custom_commands_and_reports_unknown_ones() {
    let sb = sandbox();
    let replay = Replay::start(json!([{"text": "reviewed"}]));
    let mut shell = Shell::spawn(sb.dsh(&replay.url(), KEY, &[]));
    shell.send("/nope");
    let line = shell.wait_for("unknown command /nope", HANG_LIMIT);
    assert_eq!(
        line,
        "unknown command /nope: not a command or skill (built-in: /compact, /exit, /help, /model, /new, /quit, /resume, /sessions; custom: /fix, /review; skills: /greet)"
    );
    shell.send("/review x.rs");
    let (status, stderr) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "{stderr}");
    assert_eq!(replay.chat_requests().len(), 1, "{stderr}");
    assert_eq!(
        first_prompt(&replay),
        "Review x.rs for bugs.\nStart with x.rs."
    );
}
