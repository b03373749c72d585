//! End-to-end tests of the built `dsh` binary for issue 15 ("The first hour"): the workspace
//! root — `-C DIR`, else the nearest ancestor holding `.git` — is the filesystem fence, while
//! relative tool paths resolve against the launch directory (the session header's `cwd`). Each
//! runs against the in-process replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1)
//! in a hermetic sandbox holding a real git work tree `proj/` with `proj/sub/`:
//!
//! - from `proj/sub`, `read ../top.txt`, `edit ../top.txt`, `grep` in `..` and `glob` run without
//!   an approval question (in `exec`, where a question would be a denial); `bash` runs in
//!   `proj/sub`, and with `workdir: ".."` in `proj`; the header's `cwd` is `proj/sub`;
//! - `read ../../outside.txt` (outside the repository) is still denied in `exec`, naming the
//!   repository as the workspace, and still asks in the shell (the parent file read before it
//!   asks nothing);
//! - `-C proj/sub` makes the subdirectory the root: `../top.txt` is outside, and the AGENTS.md
//!   chain starts at `proj/sub`; `-C other` (outside the repository) makes `other` the root;
//! - a session resumed from outside its repository keeps the repository as its fence.
//!
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, Shell, code, json_lines, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

/// "Did not hang" bound for one dsh run (generous; runs take well under a second).
const HANG_LIMIT: Duration = Duration::from_secs(120);
/// Bound for one expected stderr line of the shell (a hang guard).
const LINE_LIMIT: Duration = Duration::from_secs(60);
const KEY: &str = "sk-first-hour-fence";

fn run(cmd: Command) -> Output {
    common::e2e::run(cmd, HANG_LIMIT)
}

/// `dsh ARGS` started in `dir`.
fn dsh_in(env: &Sandbox, dir: &Path, url: &str, args: &[&str]) -> Command {
    let mut cmd = env.dsh(url, KEY, args);
    cmd.current_dir(dir);
    cmd
}

/// Makes the sandbox workspace `proj/` a git work tree (real `git init`) holding `top.txt`,
/// with an empty `proj/sub/`, and puts `outside.txt` beside `proj/`; returns `proj/sub`.
fn repository(env: &Sandbox) -> PathBuf {
    let st = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&env.repo)
        .env("HOME", &env.home)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(env.repo.join("top.txt"), "colour: red\n").unwrap();
    std::fs::write(env.root.join("outside.txt"), "secret\n").unwrap();
    let sub = env.repo.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    sub
}

/// The one `session.jsonl` under `$DSH_HOME`.
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

/// The header line of `log`.
fn header(log: &Path) -> Value {
    let text = std::fs::read_to_string(log).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

/// The records of type `kind` in `log`, in order.
fn records_of(log: &Path, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == kind)
        .collect()
}

/// `(isError, text)` of every `tool/result` in `log`, in order.
fn tool_results(log: &Path) -> Vec<(bool, String)> {
    records_of(log, "tool/result")
        .iter()
        .map(|r| {
            let c = &r["data"]["message"]["content"][0];
            (
                c["isError"].as_bool().unwrap(),
                c["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// The `read` result of the one-line file `path` holding `line`.
fn read_envelope(path: &Path, line: &str) -> String {
    format!(
        "<path>{}</path>\n<type>file</type>\n<content>\n1: {line}\n\n(End of file - total 1 lines)\n</content>",
        path.display()
    )
}

/// `dsh exec --json` with `args` in `dir`; returns the `result` line (exit 0 asserted).
fn exec_json(env: &Sandbox, dir: &Path, url: &str, args: &[&str]) -> Value {
    let out = run(dsh_in(env, dir, url, args));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    let last = lines.last().unwrap().clone();
    assert_eq!(last["type"], "result", "{last}");
    last
}

#[test]
fn from_a_subdirectory_the_parent_files_of_the_repository_are_inside() {
    let env = Sandbox::new();
    let sub = repository(&env);
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": "../top.txt"}]]},
        {"tool_calls": [["edit", {"file_path": "../top.txt", "old_string": "red", "new_string": "blue"}]]},
        {"tool_calls": [["bash", {"command": "pwd", "description": "Where am I"}]]},
        {"tool_calls": [["grep", {"pattern": "colour", "path": ".."}]]},
        {"tool_calls": [["glob", {"pattern": "**/*.txt", "path": ".."}]]},
        {"tool_calls": [["bash", {"command": "pwd", "description": "Up one", "workdir": ".."}]]},
        {"text": "done"},
    ]));
    exec_json(&env, &sub, &replay.url(), &["exec", "--json", "recolour"]);
    assert_eq!(
        std::fs::read_to_string(env.repo.join("top.txt")).unwrap(),
        "colour: blue\n"
    );
    let log = session_log(&env);
    // The header records the launch directory, as upstream does.
    assert_eq!(header(&log)["cwd"], json!(sub.display().to_string()));
    // No question was asked (in exec it would have been a denial).
    assert_eq!(records_of(&log, "approval/asked"), Vec::<Value>::new());
    let results = tool_results(&log);
    assert_eq!(results.len(), 6, "{results:?}");
    for (is_error, text) in &results {
        assert!(!is_error, "{results:?}: {text}");
    }
    assert_eq!(
        replay.last_message(1),
        read_envelope(&env.repo.join("top.txt"), "colour: red")
    );
    // bash runs in the launch directory.
    assert_eq!(
        replay.last_message(3),
        format!("{}\n", sub.display()),
        "{results:?}"
    );
    // Search results are shown relative to the launch directory, so `read` takes them as
    // they are.
    assert_eq!(
        replay.last_message(4),
        "Found 1 match\n\n../top.txt\nLine 1: colour: blue"
    );
    assert_eq!(replay.last_message(5), "../top.txt");
    // A `workdir` in the repository above the launch directory is inside too.
    assert_eq!(replay.last_message(6), format!("{}\n", env.repo.display()));
}

#[test]
fn a_file_outside_the_repository_is_still_refused_in_exec() {
    let env = Sandbox::new();
    let sub = repository(&env);
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": "../../outside.txt"}]]},
        {"text": "could not"},
    ]));
    exec_json(&env, &sub, &replay.url(), &["exec", "--json", "read it"]);
    let result = replay.last_message(1);
    let outside = env.root.join("outside.txt");
    assert_eq!(
        result,
        format!(
            "Error: permission preset workspace-write: read target {} is outside the workspace {}; rerun with --permission-mode danger-full-access (dsh exec cannot ask for approval)",
            outside.display(),
            env.repo.display()
        )
    );
}

#[test]
fn a_file_outside_the_repository_still_asks_in_the_shell() {
    let env = Sandbox::new();
    let sub = repository(&env);
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": "../top.txt"}]]},
        {"tool_calls": [["read", {"file_path": "../../outside.txt"}]]},
        {"text": "read one"},
    ]));
    let mut shell = Shell::spawn(dsh_in(&env, &sub, &replay.url(), &[]));
    shell.send("read both files");
    // The first question is the outside file's: the parent file needed none.
    let q = shell.wait_for("allow tool `read`", LINE_LIMIT);
    let outside = env.root.join("outside.txt");
    assert!(
        q.contains(&format!("read target {}", outside.display())),
        "{q}"
    );
    shell.send("n");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "stderr: {err}");
    let results = tool_results(&session_log(&env));
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(
        results[0],
        (
            false,
            read_envelope(&env.repo.join("top.txt"), "colour: red")
        )
    );
    assert!(results[1].0, "{results:?}");
}

#[test]
fn dash_c_on_a_subdirectory_makes_it_the_root_for_the_fence_and_agents_md() {
    let env = Sandbox::new();
    let sub = repository(&env);
    std::fs::write(env.repo.join("AGENTS.md"), "Top rules: tabs.\n").unwrap();
    std::fs::write(sub.join("AGENTS.md"), "Sub rules: spaces.\n").unwrap();
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": "../top.txt"}]]},
        {"text": "could not"},
    ]));
    let s = sub.display().to_string();
    // Started in the repository's top directory; `-C` names the subdirectory.
    exec_json(
        &env,
        &env.repo,
        &replay.url(),
        &["-C", &s, "exec", "--json", "read it"],
    );
    let body = replay.chat_requests()[0].body.to_string();
    assert!(body.contains("Sub rules: spaces."), "{body}");
    assert!(!body.contains("Top rules: tabs."), "{body}");
    assert_eq!(
        replay.last_message(1),
        format!(
            "Error: permission preset workspace-write: read target {} is outside the workspace {s}; rerun with --permission-mode danger-full-access (dsh exec cannot ask for approval)",
            env.repo.join("top.txt").display()
        )
    );
    assert_eq!(header(&session_log(&env))["cwd"], json!(s));
}

#[test]
fn dash_c_outside_the_repository_makes_that_directory_the_root() {
    let env = Sandbox::new();
    let sub = repository(&env);
    let other = env.root.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("x.txt"), "x marks\n").unwrap();
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": "x.txt"}]]},
        {"tool_calls": [["read", {"file_path": "../proj/top.txt"}]]},
        {"text": "one of two"},
    ]));
    let o = other.display().to_string();
    exec_json(
        &env,
        &sub,
        &replay.url(),
        &["-C", &o, "exec", "--json", "read them"],
    );
    assert_eq!(
        replay.last_message(1),
        read_envelope(&other.join("x.txt"), "x marks")
    );
    assert_eq!(
        replay.last_message(2),
        format!(
            "Error: permission preset workspace-write: read target {} is outside the workspace {o}; rerun with --permission-mode danger-full-access (dsh exec cannot ask for approval)",
            env.repo.join("top.txt").display()
        )
    );
}

#[test]
fn a_session_resumed_from_elsewhere_keeps_its_repository_as_the_fence() {
    let env = Sandbox::new();
    let sub = repository(&env);
    let elsewhere = env.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let replay = Replay::start(json!([
        {"text": "started"},
        {"tool_calls": [["read", {"file_path": "../top.txt"}]]},
        {"text": "read it"},
    ]));
    let first = exec_json(&env, &sub, &replay.url(), &["exec", "--json", "start"]);
    let id = first["sessionId"].as_str().unwrap().to_owned();
    // Resumed from a directory outside the repository: relative paths still resolve against
    // the session's cwd, and its repository is still inside.
    exec_json(
        &env,
        &elsewhere,
        &replay.url(),
        &["exec", "--json", "--resume", &id, "read the top file"],
    );
    assert_eq!(
        replay.last_message(2),
        read_envelope(&env.repo.join("top.txt"), "colour: red")
    );
}
