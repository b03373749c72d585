//! End-to-end tests of the built `dsh` binary for defects a fresh-user trial of issue 15 ("The
//! first hour") found, each against the in-process replay provider
//! (`dsh_test_support::ReplayServer` on 127.0.0.1):
//!
//! - `an_approval_question_shows_a_commands_terminal_escapes` (D1): a `bash` command holding
//!   cursor-up / erase-line escapes is shown with them as visible `\x1b` text in its call line
//!   and in the approval question, so it cannot overwrite itself with a harmless-looking one;
//! - `an_exec_output_tail_shows_terminal_escapes` (D1): a command's coloured output is shown
//!   in its tail as `\x1b[31m…` text, not raw escapes.
//! - `a_path_grant_does_not_cover_a_symlink_out_of_it` (D2): after `p` granted a folder for
//!   the session, a write through a symlink in it to a folder elsewhere is asked about again
//!   (the grant is matched against the real location), and denying it writes nothing.
//! - `model_with_an_empty_name_is_refused` (D7): `/model deepseek/` is refused and the next
//!   request keeps the model it had.
//! - `exec_json_usage_errors_carry_the_whole_message_and_their_code` (D9, D11): the JSON result
//!   of a usage error holds clap's whole message (what is missing, not just the first line),
//!   and an ambiguous `--resume` prefix has code `SESSION_ID_AMBIGUOUS` (exit 2).
//! - `a_resume_whose_route_is_gone_says_so` (D4): a session last run on a `[providers.local]`
//!   route that has since been removed from the settings resumes on the settings' route with a
//!   warning on stderr naming the missing route.
//! - `config_shows_the_routes_first_listed_model` (D5): with no model set anywhere, `dsh
//!   --provider local config` names the model the run uses, the route's first listed one.
//! - `a_cancelled_question_does_not_take_the_next_line` (D3): Ctrl-C (SIGINT) at an approval
//!   question cancels the turn, and the next input line is a new turn, not the dead question's
//!   answer.
//! - `a_session_left_in_the_shell_can_be_resumed_elsewhere` (D6): after `/new`, the session
//!   left is released, so `dsh exec --resume` of it from another process works while the shell
//!   is still open.
//! - `an_exec_refusal_names_the_flag_and_not_approval` (D13): `dsh exec`'s refusal of a write
//!   outside the workspace is shown whole, ends in the flag that allows it, and does not offer
//!   approval, which exec cannot ask for.
//!
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, Shell, code, run, text};

use std::process::Command;
use std::time::Duration;

use serde_json::json;

/// "Did not hang" bound for one dsh run (generous; runs take well under a second).
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// Bound for an approval question to appear (a hang guard).
const QUESTION_LIMIT: Duration = Duration::from_secs(60);

fn dsh(env: &Sandbox, url: &str, args: &[&str]) -> Command {
    env.dsh(url, "sk-trial15", args)
}

#[test]
fn an_approval_question_shows_a_commands_terminal_escapes() {
    let env = Sandbox::new();
    let victim = env.root.join("victim");
    std::fs::create_dir_all(victim.join("keep")).unwrap();
    let command = "rm -rf keep\u{1b}[1A\u{1b}[2K\r\u{1b}[2K  $ ls -la";
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {
            "command": command,
            "workdir": victim.display().to_string(),
            "description": "list files",
        }]]},
        {"text": "END"},
    ]));
    let mut shell = Shell::spawn(dsh(&env, &replay.url(), &[]));
    shell.send("go");
    let shown = r"rm -rf keep\x1b[1A\x1b[2K\r\x1b[2K  $ ls -la";
    let call = shell.wait_for("  $ rm -rf", QUESTION_LIMIT);
    assert_eq!(call, format!("  $ {shown}"));
    shell.wait_for("allow tool `bash`", QUESTION_LIMIT);
    let preview = shell.wait_for("  $ rm -rf", QUESTION_LIMIT);
    assert_eq!(preview, format!("  $ {shown}"));
    shell.send("n");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "stderr: {err}");
    assert!(!err.contains('\u{1b}'), "a raw escape on stderr: {err:?}");
    assert!(victim.join("keep").is_dir(), "the command ran: {err}");
}

#[test]
fn an_exec_output_tail_shows_terminal_escapes() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {"command": "printf '\\033[31mred\\033[0m\\n'", "description": "red"}]]},
        {"text": "done"},
    ]));
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &["exec", "--permission-mode", "danger-full-access", "go"],
        ),
        HANG_LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(code(out.status), 0, "stderr: {err}");
    assert!(err.contains("  │ \\x1b[31mred\\x1b[0m\n"), "stderr: {err}");
    assert!(!err.contains('\u{1b}'), "a raw escape on stderr: {err:?}");
}

#[test]
fn a_path_grant_does_not_cover_a_symlink_out_of_it() {
    let env = Sandbox::new();
    let out = env.root.join("out");
    let other = env.root.join("other2");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    std::os::unix::fs::symlink(&other, out.join("link")).unwrap();
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {"command": "true", "workdir": out.display().to_string()}]]},
        {"tool_calls": [["write", {
            "file_path": out.join("link/f.txt").display().to_string(),
            "content": "f\n",
        }]]},
        {"text": "D"},
    ]));
    let mut shell = Shell::spawn(dsh(&env, &replay.url(), &[]));
    shell.send("go");
    shell.wait_for("allow tool `bash`", QUESTION_LIMIT);
    let grant = shell.wait_for("  [p] allow ", QUESTION_LIMIT);
    assert_eq!(
        grant,
        format!("  [p] allow {} for this session", out.display())
    );
    shell.send("p");
    shell.wait_for("allow tool `write`", QUESTION_LIMIT);
    let grant = shell.wait_for("  [p] allow ", QUESTION_LIMIT);
    assert_eq!(
        grant,
        format!(
            "  [p] allow {} for this session",
            other.join("f.txt").display()
        )
    );
    shell.send("n");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "stderr: {err}");
    assert!(!other.join("f.txt").exists(), "written: {err}");
}

#[test]
fn model_with_an_empty_name_is_refused() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "ok"}]));
    let mut shell = Shell::spawn(dsh(&env, &replay.url(), &["-m", "deepseek-v4-pro"]));
    shell.send("/model deepseek/");
    assert_eq!(
        shell.wait_for("usage: /model", QUESTION_LIMIT),
        "usage: /model [PROVIDER/]MODEL (the model name is empty); the model was not changed"
    );
    shell.send("go");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "{err}");
    assert!(!err.contains("model set to"), "{err}");
    assert_eq!(replay.chat_requests()[0].body["model"], "deepseek-v4-pro");
}

#[test]
fn exec_json_usage_errors_carry_the_whole_message_and_their_code() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([]));
    let out = run(dsh(&env, &replay.url(), &["exec", "--json"]), HANG_LIMIT);
    assert_eq!(code(out.status), 2, "{out:?}");
    let lines = common::e2e::json_lines(&out.stdout);
    assert_eq!(lines.len(), 1, "{out:?}");
    assert_eq!(
        lines[0]["error"],
        json!({
            "message": "the following required arguments were not provided:\n  <PROMPT>",
            "code": "USAGE",
        })
    );

    // Two stored sessions: their time-ordered ids share their first characters.
    let replay = Replay::start(json!([{"text": "one"}, {"text": "two"}]));
    let ids: Vec<String> = (0..2)
        .map(|_| {
            let out = run(
                dsh(&env, &replay.url(), &["exec", "--json", "hi"]),
                HANG_LIMIT,
            );
            assert_eq!(code(out.status), 0, "{out:?}");
            let lines = common::e2e::json_lines(&out.stdout);
            lines.last().unwrap()["sessionId"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let common_len = ids[0]
        .chars()
        .zip(ids[1].chars())
        .take_while(|(a, b)| a == b)
        .count();
    assert!(common_len > 0, "{ids:?}");
    let prefix = &ids[0][..common_len];
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &["exec", "--json", "--resume", prefix, "hi"],
        ),
        HANG_LIMIT,
    );
    assert_eq!(code(out.status), 2, "{out:?}");
    let lines = common::e2e::json_lines(&out.stdout);
    assert_eq!(lines.len(), 1, "{out:?}");
    assert_eq!(
        lines[0]["error"]["code"], "SESSION_ID_AMBIGUOUS",
        "{}",
        lines[0]
    );
    assert_eq!(replay.chat_requests().len(), 2);
}

#[test]
fn a_resume_whose_route_is_gone_says_so() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "one"}, {"text": "two"}]));
    let settings = env.home.join("settings.toml");
    std::fs::write(
        &settings,
        format!(
            "[providers.local]\nbase_url = \"{}\"\nmodels = [\"qwen-y\"]\n",
            replay.url()
        ),
    )
    .unwrap();
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &[
                "exec",
                "--json",
                "--provider",
                "local",
                "-m",
                "qwen-y",
                "local only",
            ],
        ),
        HANG_LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let lines = common::e2e::json_lines(&out.stdout);
    let id = lines.last().unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(&settings, "").unwrap();
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &["exec", "--resume", &id[..13], "again"],
        ),
        HANG_LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(code(out.status), 0, "{err}");
    let requests = replay.chat_requests();
    assert_eq!(requests[0].body["model"], "qwen-y");
    let model = requests[1].body["model"].as_str().unwrap().to_owned();
    assert_eq!(
        err.lines().next().unwrap(),
        format!(
            "warning: session `{id}` last used route `local` (model `qwen-y`), which is not \
             configured now; it continues on `deepseek` / `{model}` from the settings \
             (`--provider`/`-m` choose another)"
        )
    );
}

#[test]
fn config_shows_the_routes_first_listed_model() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "ok"}]));
    std::fs::write(
        env.home.join("settings.toml"),
        format!(
            "[providers.local]\nbase_url = \"{}\"\nmodels = [\"qwen-x\", \"qwen-y\"]\n",
            replay.url()
        ),
    )
    .unwrap();
    let out = run(
        dsh(&env, &replay.url(), &["--provider", "local", "config"]),
        HANG_LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let stdout = text(&out.stdout);
    let line = stdout.lines().find(|l| l.starts_with("model: ")).unwrap();
    assert!(line.starts_with("model: qwen-x    # "), "{line}");
    assert!(
        line.ends_with(" (the route's first listed model)"),
        "{line}"
    );
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &["--provider", "local", "config", "--json"],
        ),
        HANG_LIMIT,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["model"]["value"], "qwen-x");
    let out = run(
        dsh(&env, &replay.url(), &["--provider", "local", "exec", "hi"]),
        HANG_LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(replay.chat_requests()[0].body["model"], "qwen-x");
}

#[test]
fn a_cancelled_question_does_not_take_the_next_line() {
    let env = Sandbox::new();
    let outside = env.root.join("outside.txt");
    let replay = Replay::start(json!([
        {"tool_calls": [["write", {"file_path": outside.display().to_string(), "content": "x\n"}]]},
        {"text": "HELLO-REPLY"},
    ]));
    let mut shell = Shell::spawn(dsh(&env, &replay.url(), &[]));
    shell.send("go");
    shell.wait_for("allow tool `write`", QUESTION_LIMIT);
    shell.wait_for("  [n] deny", QUESTION_LIMIT);
    let kill = Command::new("kill")
        .args(["-INT", &shell.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    shell.wait_for("(turn cancelled)", QUESTION_LIMIT);
    shell.send("hello");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "stderr: {err}");
    assert!(!outside.exists(), "{err}");
    assert_eq!(replay.chat_requests().len(), 2, "stderr: {err}");
    assert!(
        replay.last_message(1).contains("hello"),
        "{}",
        replay.last_message(1)
    );
}

#[test]
fn a_session_left_in_the_shell_can_be_resumed_elsewhere() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "A"}, {"text": "B"}, {"text": "C"}]));
    let mut shell = Shell::spawn(dsh(&env, &replay.url(), &[]));
    shell.send("hello A");
    let a = shell.wait_for("session ", QUESTION_LIMIT);
    let a = a.strip_prefix("session ").unwrap().to_owned();
    shell.send("/new");
    shell.send("hello B");
    shell.wait_for("session ", QUESTION_LIMIT);
    let out = run(
        dsh(&env, &replay.url(), &["exec", "--resume", &a, "hi"]),
        HANG_LIMIT,
    );
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    // Going back loads it from the store, with the turn the other process added.
    shell.send(&format!("/resume {a}"));
    shell.wait_for(&format!("session {a} — "), QUESTION_LIMIT);
    shell.wait_for("> hi", QUESTION_LIMIT);
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "stderr: {err}");
}

#[test]
fn an_exec_refusal_names_the_flag_and_not_approval() {
    let env = Sandbox::new();
    let target = env
        .root
        .join("outside-of-the-workspace-with-a-longish-name")
        .join("f.txt");
    let replay = Replay::start(json!([
        {"tool_calls": [["write", {"file_path": target.display().to_string(), "content": "x\n"}]]},
        {"text": "done"},
    ]));
    let out = run(dsh(&env, &replay.url(), &["exec", "go"]), HANG_LIMIT);
    let err = text(&out.stderr);
    assert_eq!(code(out.status), 0, "{err}");
    let line = err.lines().find(|l| l.starts_with("  ✗ ")).unwrap();
    assert_eq!(
        line,
        format!(
            "  ✗ Error: permission preset workspace-write: write target {} is outside the \
             workspace {}; rerun with --permission-mode danger-full-access (dsh exec cannot ask \
             for approval)",
            target.display(),
            env.repo.display()
        )
    );
    assert!(!target.exists());
}
