//! End-to-end tests of the built `dsh` binary for issue 15 ("The first hour"), the sessions,
//! workspace/settings and commands parts, each against the in-process replay provider
//! (`dsh_test_support::ReplayServer` on 127.0.0.1) in a hermetic sandbox:
//!
//! - `exec` ends (text mode) with `session <id> · <s> s · <in> in / <out> out tokens` on stderr;
//! - the project's `.dsh/settings.toml` and AGENTS.md are found from a subdirectory of a git
//!   work tree, while the session header's `cwd` is the launch directory;
//! - a resume by a 13-character id prefix from a subdirectory restores the session's model, a
//!   flag overrides it, and the shell shows the last turns; an ambiguous prefix lists the
//!   candidates (exit 2);
//! - starting and quitting the shell stores no session; `/resume` back to the session left with
//!   `/new` works; `/sessions` and `sessions list` order by last activity and mark forks;
//! - `sessions show --seq` and `sessions fork --turn N` / `--at SEQ`;
//! - `dsh config` names the workspace root and where the provider and model came from;
//! - `persona` adds to the working method (`persona_mode = "replace"` replaces it);
//! - `dsh "prompt"` runs the prompt in the shell; `/model` warns for a model the route does not
//!   list; `exec --json` writes a `result` line for usage errors; a settings type error names the
//!   key; piped lines run one turn each; an empty `DEEPSEEK_API_KEY` is called empty.
//!
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, Shell, code, json_lines, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// "Did not hang" bound for one dsh run (generous; runs take well under a second).
const HANG_LIMIT: Duration = Duration::from_secs(120);
/// Bound for one expected stderr line of the shell (a hang guard).
const LINE_LIMIT: Duration = Duration::from_secs(60);
const KEY: &str = "sk-first-hour";

fn run(cmd: Command) -> Output {
    common::e2e::run(cmd, HANG_LIMIT)
}

fn dsh(env: &Sandbox, url: &str, args: &[&str]) -> Command {
    env.dsh(url, KEY, args)
}

/// `dsh` started in `dir` instead of the workspace.
fn dsh_in(env: &Sandbox, dir: &Path, url: &str, args: &[&str]) -> Command {
    let mut cmd = dsh(env, url, args);
    cmd.current_dir(dir);
    cmd
}

/// Makes the sandbox workspace a git work tree (real `git init`) with a `sub/dir` below it;
/// returns the subdirectory.
fn git_workspace(env: &Sandbox) -> PathBuf {
    let st = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&env.repo)
        .env("HOME", &env.home)
        .status()
        .unwrap();
    assert!(st.success());
    let sub = env.repo.join("sub/dir");
    std::fs::create_dir_all(&sub).unwrap();
    sub
}

/// Every `session.jsonl` under `$DSH_HOME`.
fn session_logs(env: &Sandbox) -> Vec<PathBuf> {
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
    logs.sort();
    logs
}

/// The header line of `log`.
fn header(log: &Path) -> Value {
    let text = std::fs::read_to_string(log).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

/// `dsh ARGS` (an `exec --json …` command line) in `dir`; returns the `result` line.
fn exec_json(env: &Sandbox, dir: &Path, url: &str, args: &[&str]) -> Value {
    let out = run(dsh_in(env, dir, url, args));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    let last = lines.last().unwrap().clone();
    assert_eq!(last["type"], "result", "{last}");
    last
}

/// The session id of a fresh `dsh exec --json PROMPT` in the workspace.
fn new_session(env: &Sandbox, url: &str, prompt: &str) -> String {
    exec_json(env, &env.repo, url, &["exec", "--json", prompt])["sessionId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The `sessions list --json` array.
fn list_json(env: &Sandbox) -> Vec<Value> {
    let out = run(dsh(
        env,
        "http://127.0.0.1:9",
        &["sessions", "list", "--json"],
    ));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn system_prompt(body: &Value) -> String {
    let first = &body["messages"][0];
    assert_eq!(first["role"], "system", "{body}");
    first["content"].as_str().unwrap().to_owned()
}

/// The user-message texts of chat request `body`, in order.
fn user_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .filter(|t| !t.starts_with("Current runtime context."))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------------------------

#[test]
fn exec_ends_with_the_session_id_duration_and_tokens_on_stderr() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{
        "text": "the answer",
        "usage": {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}
    }]));
    let out = run(dsh(&env, &replay.url(), &["exec", "say it"]));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let err = text(&out.stderr);
    let last = err.lines().last().unwrap();
    let logs = session_logs(&env);
    assert_eq!(logs.len(), 1);
    let id = header(&logs[0])["id"].as_str().unwrap().to_owned();
    let rest = last
        .strip_prefix(&format!("session {id} · "))
        .unwrap_or_else(|| panic!("last stderr line: {last:?}"));
    let (secs, tokens) = rest.split_once(" s · ").unwrap();
    let (whole, tenth) = secs.split_once('.').unwrap();
    assert!(whole.parse::<u64>().is_ok() && tenth.len() == 1, "{secs}");
    // tokens, then the cost from the built-in catalog's deepseek-v4-flash prices
    assert_eq!(tokens, "120 in / 7 out tokens · $0.000019");
    // The --json result carries the same facts (unchanged).
    let replay = Replay::start(json!([{"text": "again"}]));
    let out = run(dsh(&env, &replay.url(), &["exec", "--ephemeral", "say it"]));
    let err = text(&out.stderr);
    assert!(
        err.lines().last().unwrap().contains(" (not saved) · "),
        "{err}"
    );
}

#[test]
fn starting_and_quitting_the_shell_stores_no_session() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([]));
    let shell = Shell::spawn(dsh(&env, &replay.url(), &[]));
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "{err}");
    assert_eq!(session_logs(&env), Vec::<PathBuf>::new(), "{err}");
    assert!(err.contains("no session stored"), "{err}");
    // `/exit` and a slash command alone store nothing either.
    let mut shell = Shell::spawn(dsh(&env, &replay.url(), &[]));
    shell.send("/model");
    shell.send("/exit");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "{err}");
    assert_eq!(session_logs(&env), Vec::<PathBuf>::new(), "{err}");
    // So `resume --last` has nothing to pick.
    let out = run(dsh(&env, &replay.url(), &["resume", "--last"]));
    assert_eq!(code(out.status), 2, "{out:?}");
    assert!(
        text(&out.stderr).starts_with("error: no stored session for "),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(replay.chat_requests().len(), 0);
}

#[test]
fn a_resume_by_a_13_character_prefix_from_a_subdirectory_restores_the_model() {
    let env = Sandbox::new();
    let sub = git_workspace(&env);
    let replay = Replay::start(json!([
        {"text": "first answer"},
        {"text": "second answer"},
        {"text": "third answer"},
        {"text": "shell answer"},
    ]));
    let first = exec_json(
        &env,
        &env.repo,
        &replay.url(),
        &[
            "-m",
            "deepseek-v4-pro",
            "exec",
            "--json",
            "remember the colour blue",
        ],
    );
    let id = first["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(replay.chat_requests()[0].body["model"], "deepseek-v4-pro");
    let prefix = &id[..13];
    // The project's settings name another model: the session's own model still wins.
    std::fs::create_dir_all(env.repo.join(".dsh")).unwrap();
    std::fs::write(
        env.repo.join(".dsh/settings.toml"),
        "model = \"deepseek-v4-flash\"\n",
    )
    .unwrap();

    // From a subdirectory, no -m: the session's own model, not the settings' (flash).
    let second = exec_json(
        &env,
        &sub,
        &replay.url(),
        &["exec", "--json", "what colour?"],
    );
    // (a fresh session: --resume was not given)
    assert_ne!(second["sessionId"], first["sessionId"]);
    assert_eq!(replay.chat_requests()[1].body["model"], "deepseek-v4-flash");
    let out = run(dsh_in(
        &env,
        &sub,
        &replay.url(),
        &["exec", "--json", "--resume", prefix, "what colour?"],
    ));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let result = json_lines(&out.stdout).last().unwrap().clone();
    assert_eq!(result["sessionId"], id.as_str());
    let req = &replay.chat_requests()[2].body;
    assert_eq!(req["model"], "deepseek-v4-pro");
    assert_eq!(
        user_texts(req),
        ["remember the colour blue", "what colour?"],
        "{req}"
    );

    // The shell: a flag beats the stored model; the banner says which, and the last turns show.
    let mut shell = Shell::spawn(dsh_in(
        &env,
        &sub,
        &replay.url(),
        &["-m", "deepseek-v4-flash", "resume", prefix],
    ));
    let banner = shell.wait_for("dsh ", LINE_LIMIT);
    assert!(
        banner.ends_with(&format!(
            "— deepseek/deepseek-v4-flash (from the command line) — session {id}"
        )),
        "{banner}"
    );
    shell.wait_for("── earlier in this session (last 2 of 2 turns)", LINE_LIMIT);
    assert_eq!(
        shell.wait_for("> ", LINE_LIMIT),
        "> remember the colour blue"
    );
    assert_eq!(shell.wait_for("first answer", LINE_LIMIT), "first answer");
    assert_eq!(shell.wait_for("> ", LINE_LIMIT), "> what colour?");
    assert_eq!(shell.wait_for("third answer", LINE_LIMIT), "third answer");
    shell.send("and now?");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "{err}");
    assert_eq!(replay.chat_requests()[3].body["model"], "deepseek-v4-flash");

    // Without the flag, the shell restores the stored model too (the last one the session used:
    // flash, from the shell turn just now).
    let shell = Shell::spawn(dsh_in(&env, &sub, &replay.url(), &["resume", prefix]));
    let banner = shell.wait_for("dsh ", LINE_LIMIT);
    assert!(
        banner.ends_with(&format!(
            "— deepseek/deepseek-v4-flash (as the session last used) — session {id}"
        )),
        "{banner}"
    );
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "{err}");
}

#[test]
fn an_ambiguous_prefix_is_an_error_listing_the_candidates() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "a"}, {"text": "b"}]));
    let a = new_session(&env, &replay.url(), "one");
    let b = new_session(&env, &replay.url(), "two");
    let common: String = a
        .chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect();
    assert!(common.len() >= 4, "{a} {b}");
    let out = run(dsh(
        &env,
        &replay.url(),
        &["exec", "--resume", &common, "x"],
    ));
    assert_eq!(code(out.status), 2, "{out:?}");
    // Newest first.
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: session id prefix `{common}` matches 2 stored sessions: {b}, {a}; type more \
             characters\n"
        )
    );
    // The session commands take prefixes too.
    let out = run(dsh(&env, &replay.url(), &["sessions", "show", &a[..13]]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(text(&out.stdout).starts_with(&format!("session {a} ")));
    let out = run(dsh(&env, &replay.url(), &["sessions", "show", &common]));
    assert_eq!(code(out.status), 2, "{out:?}");
    assert_eq!(replay.chat_requests().len(), 2);
}

#[test]
fn resume_goes_back_to_the_session_left_with_new() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([
        {"text": "answer one"},
        {"text": "answer two"},
        {"text": "answer three"},
    ]));
    let mut shell = Shell::spawn(dsh(&env, &replay.url(), &[]));
    shell.send("hello");
    let created = shell.wait_for("session ", LINE_LIMIT);
    let id = created.strip_prefix("session ").unwrap().to_owned();
    // Piped input waits for the turn: `/new` runs after the answer.
    shell.send("/new");
    shell.wait_for("new session (stored at the first input)", LINE_LIMIT);
    shell.send("other");
    let other = shell.wait_for("session ", LINE_LIMIT);
    assert_ne!(other, created);
    shell.send(&format!("/resume {}", &id[..13]));
    let back = shell.wait_for("session ", LINE_LIMIT);
    assert!(
        back.starts_with(&format!("session {id} — deepseek/")),
        "{back}"
    );
    shell.send("again");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "{err}");
    assert!(!err.contains("already live"), "{err}");
    let reqs = replay.chat_requests();
    assert_eq!(reqs.len(), 3, "{err}");
    assert_eq!(user_texts(&reqs[1].body), ["other"]);
    assert_eq!(user_texts(&reqs[2].body), ["hello", "again"]);
    assert_eq!(session_logs(&env).len(), 2);
}

#[test]
fn lists_are_ordered_by_last_activity_and_mark_forks() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "a1"}, {"text": "b1"}, {"text": "a2"}]));
    let a = new_session(&env, &replay.url(), "first A");
    let b = new_session(&env, &replay.url(), "first B");
    // A is older but active last.
    std::thread::sleep(Duration::from_millis(20));
    exec_json(
        &env,
        &env.repo,
        &replay.url(),
        &["exec", "--json", "--resume", &a, "second A"],
    );
    let ids: Vec<Value> = list_json(&env).iter().map(|r| r["id"].clone()).collect();
    assert_eq!(ids, [json!(a), json!(b)]);
    // A fork of B is the newest; it is marked as B's fork.
    let out = run(dsh(&env, &replay.url(), &["sessions", "fork", &b]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let c = text(&out.stdout).trim().to_owned();
    let rows = list_json(&env);
    let ids: Vec<Value> = rows.iter().map(|r| r["id"].clone()).collect();
    assert_eq!(ids, [json!(c), json!(a), json!(b)]);
    assert_eq!(rows[0]["parentSession"], b.as_str());
    let out = run(dsh(&env, &replay.url(), &["sessions", "list"]));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[1].starts_with(&c), "{table}");
    assert!(
        lines[1].contains(&format!("first B  [fork of {b}]")),
        "{table}"
    );
    assert!(
        lines[2].starts_with(&a) && !lines[2].contains("fork of"),
        "{table}"
    );
    // `/sessions` in the shell: the same order and marks.
    let mut shell = Shell::spawn(dsh(&env, &replay.url(), &[]));
    shell.send("/sessions");
    let first = shell.wait_for(&c, LINE_LIMIT);
    assert!(
        first.ends_with(&format!("first B  [fork of {b}]")),
        "{first}"
    );
    let second = shell.wait_for(&a[..8], LINE_LIMIT);
    assert!(
        second.starts_with(&a) && second.contains("2 turns  first A"),
        "{second}"
    );
    let third = shell.wait_for(&b[..8], LINE_LIMIT);
    assert!(third.starts_with(&b), "{third}");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "{err}");
}

#[test]
fn show_seq_and_fork_after_a_turn() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "one done"}, {"text": "two done"}]));
    let id = new_session(&env, &replay.url(), "turn one");
    exec_json(
        &env,
        &env.repo,
        &replay.url(),
        &["exec", "--json", "--resume", &id, "turn two"],
    );
    let out = run(dsh(
        &env,
        &replay.url(),
        &["sessions", "show", "--seq", &id],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    let shown = text(&out.stdout);
    // Every transcript line after the header names its event's seq.
    let end_one = shown
        .lines()
        .find(|l| l.ends_with("── turn 1 end: completed"))
        .unwrap_or_else(|| panic!("{shown}"));
    let seq: u64 = end_one
        .strip_prefix('#')
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with('#') && l.ends_with("> turn one")),
        "{shown}"
    );
    // The JSON view agrees: that seq is turn 1's turn/end.
    let out = run(dsh(
        &env,
        &replay.url(),
        &["sessions", "show", "--json", &id],
    ));
    let events = json_lines(&out.stdout);
    let ev = events.iter().find(|e| e["seq"] == seq).unwrap();
    assert_eq!(ev["type"], "turn/end");
    assert_eq!(ev["data"]["turn"], 1);

    let fork = |args: &[&str]| -> (String, Vec<Value>) {
        let mut all = vec!["sessions", "fork", id.as_str()];
        all.extend(args);
        let out = run(dsh(&env, &replay.url(), &all));
        assert_eq!(code(out.status), 0, "{out:?}");
        let child = text(&out.stdout).trim().to_owned();
        let out = run(dsh(
            &env,
            &replay.url(),
            &["sessions", "show", "--json", &child],
        ));
        (child, json_lines(&out.stdout))
    };
    let (by_turn, turn_events) = fork(&["--turn", "1"]);
    let (by_seq, seq_events) = fork(&["--at", &seq.to_string()]);
    assert_ne!(by_turn, by_seq);
    let types = |evs: &[Value]| -> Vec<Value> { evs.iter().map(|e| e["type"].clone()).collect() };
    assert_eq!(types(&turn_events), types(&seq_events));
    assert_eq!(turn_events.last().unwrap()["type"], "session/end-seed");
    let starts = turn_events
        .iter()
        .filter(|e| e["type"] == "turn/start")
        .count();
    assert_eq!(starts, 1);
    // A turn that did not end is refused.
    let out = run(dsh(
        &env,
        &replay.url(),
        &["sessions", "fork", &id, "--turn", "3"],
    ));
    assert_eq!(code(out.status), 2, "{out:?}");
    assert_eq!(
        text(&out.stderr),
        format!("error: session `{id}` has no ended turn 3 (it has 2 ended turns)\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Workspace and settings
// ---------------------------------------------------------------------------------------------

#[test]
fn settings_and_agents_md_are_found_from_a_subdirectory() {
    let env = Sandbox::new();
    let sub = git_workspace(&env);
    std::fs::create_dir_all(env.repo.join(".dsh")).unwrap();
    std::fs::write(
        env.repo.join(".dsh/settings.toml"),
        "model = \"deepseek-v4-pro\"\n",
    )
    .unwrap();
    std::fs::write(env.repo.join("AGENTS.md"), "ROOT RULES: be brief.\n").unwrap();
    let replay = Replay::start(json!([{"text": "ok"}, {"text": "ok"}]));
    let result = exec_json(&env, &sub, &replay.url(), &["exec", "--json", "hi"]);
    let body = &replay.chat_requests()[0].body;
    assert_eq!(body["model"], "deepseek-v4-pro");
    assert!(
        system_prompt(body).contains("ROOT RULES: be brief."),
        "{body}"
    );
    // The header records the launch directory.
    let logs = session_logs(&env);
    assert_eq!(logs.len(), 1);
    let h = header(&logs[0]);
    assert_eq!(h["id"], result["sessionId"]);
    assert_eq!(h["cwd"], sub.display().to_string());
    // `--continue` from the root finds the session started below it.
    let again = exec_json(
        &env,
        &env.repo,
        &replay.url(),
        &["exec", "--json", "--continue", "more"],
    );
    assert_eq!(again["sessionId"], result["sessionId"]);

    // `-C` says otherwise: the subdirectory is the root, the project file is not read.
    let out = run(dsh_in(
        &env,
        &env.root,
        &replay.url(),
        &["-C", sub.to_str().unwrap(), "config", "--json"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["workspace"], sub.display().to_string());
    assert_eq!(c["workspaceSource"], "-C");
    assert_eq!(c["model"]["value"], "deepseek-v4-flash");
}

#[test]
fn config_shows_the_workspace_root_and_where_provider_and_model_came_from() {
    let env = Sandbox::new();
    let sub = git_workspace(&env);
    std::fs::create_dir_all(env.repo.join(".dsh")).unwrap();
    let project = env.repo.join(".dsh/settings.toml");
    std::fs::write(&project, "model = \"deepseek-v4-pro\"\n").unwrap();
    let out = run(dsh_in(&env, &sub, "http://127.0.0.1:9", &["config"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let shown = text(&out.stdout);
    let head: Vec<&str> = shown.lines().take(4).collect();
    assert_eq!(
        head,
        [
            format!(
                "workspace: {}    # the nearest ancestor holding .git; project settings, \
                 AGENTS.md, the file fence and --continue use it",
                env.repo.display()
            ),
            format!(
                "launch directory: {}    # recorded as a new session's cwd",
                sub.display()
            ),
            "provider: deepseek    # built-in defaults".to_owned(),
            format!("model: deepseek-v4-pro    # {}", project.display()),
        ]
    );
    let out = run(dsh_in(
        &env,
        &sub,
        "http://127.0.0.1:9",
        &["-m", "deepseek-v4-flash", "config", "--json"],
    ));
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["launchDir"], sub.display().to_string());
    assert_eq!(
        c["model"],
        json!({"value": "deepseek-v4-flash", "origin": "command line", "builtInDefault": false})
    );
    assert_eq!(c["provider"]["origin"], "built-in defaults");
}

#[test]
fn persona_adds_to_the_working_method_unless_told_to_replace_it() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "a"}, {"text": "b"}]));
    exec_json(
        &env,
        &env.repo,
        &replay.url(),
        &[
            "-c",
            "persona=\"Answer in French.\"",
            "exec",
            "--json",
            "hi",
        ],
    );
    exec_json(
        &env,
        &env.repo,
        &replay.url(),
        &[
            "-c",
            "persona=\"Answer in French.\"",
            "-c",
            "plugins.dsh-context.persona_mode=\"replace\"",
            "exec",
            "--json",
            "hi",
        ],
    );
    let added = system_prompt(&replay.chat_requests()[0].body);
    assert!(added.contains("How to work:"), "{added}");
    assert!(
        added.contains("left undone or uncertain.\n\nAnswer in French."),
        "{added}"
    );
    let replaced = system_prompt(&replay.chat_requests()[1].body);
    assert!(!replaced.contains("How to work:"), "{replaced}");
    assert!(replaced.contains("Answer in French."), "{replaced}");
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

#[test]
fn a_bare_prompt_starts_the_shell_with_it() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "hello from the shell"}]));
    let out = run(dsh(&env, &replay.url(), &["fix the test"]));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    assert_eq!(
        user_texts(&replay.chat_requests()[0].body),
        ["fix the test"]
    );
    assert!(
        text(&out.stdout).contains("hello from the shell\n"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(session_logs(&env).len(), 1);
}

#[test]
fn model_warns_for_a_model_the_route_does_not_list() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "ok"}]));
    let mut shell = Shell::spawn(dsh(&env, &replay.url(), &[]));
    shell.send("/model deepseek-v9-imaginary");
    assert_eq!(
        shell.wait_for("warning: ", LINE_LIMIT),
        "warning: `deepseek-v9-imaginary` is not in the model list of route `deepseek` \
         (deepseek-v4-flash, deepseek-v4-pro); using it anyway"
    );
    shell.send("/model deepseek-v4-pro");
    assert_eq!(
        shell.wait_for("model set to ", LINE_LIMIT),
        "model set to deepseek-v9-imaginary (from the next request on)"
    );
    assert_eq!(
        shell.wait_for("model set to ", LINE_LIMIT),
        "model set to deepseek-v4-pro (from the next request on)"
    );
    shell.send("/model nope/x");
    shell.wait_for(
        "unknown provider `nope`; the model was not changed",
        LINE_LIMIT,
    );
    shell.send("go");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "{err}");
    assert_eq!(err.matches("warning: ").count(), 1, "{err}");
    assert_eq!(replay.chat_requests()[0].body["model"], "deepseek-v4-pro");
}

#[test]
fn exec_json_writes_a_result_line_for_usage_errors() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([]));
    for (args, want) in [
        (vec!["--provider", "nope", "exec", "--json", "hi"], "USAGE"),
        (vec!["exec", "--json", "--bogus", "hi"], "USAGE"),
        (
            vec!["exec", "--json", "--resume", "ffff", "hi"],
            "SESSION_NOT_FOUND",
        ),
    ] {
        let out = run(dsh(&env, &replay.url(), &args));
        assert_eq!(code(out.status), 2, "{args:?}: {out:?}");
        let lines = json_lines(&out.stdout);
        assert_eq!(lines.len(), 1, "{args:?}");
        let r = &lines[0];
        assert_eq!(r["type"], "result");
        assert_eq!(r["reason"], "error");
        assert_eq!(r["sessionId"], Value::Null);
        assert_eq!(r["error"]["code"], want, "{r}");
        let first_err = text(&out.stderr);
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(
            first_err.contains(msg.lines().next().unwrap()),
            "{first_err} / {msg}"
        );
    }
    assert_eq!(replay.chat_requests().len(), 0);
}

#[test]
fn a_settings_type_error_names_the_file_and_the_key() {
    let env = Sandbox::new();
    std::fs::create_dir_all(env.repo.join(".dsh")).unwrap();
    let project = env.repo.join(".dsh/settings.toml");
    std::fs::write(&project, "[agent]\nmax_steps_per_turn = \"many\"\n").unwrap();
    let out = run(dsh(&env, "http://127.0.0.1:9", &["exec", "hi"]));
    assert_eq!(code(out.status), 2, "{out:?}");
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: {}: agent.max_steps_per_turn: invalid type: string \"many\", expected a \
             non-negative integer\n",
            project.display()
        )
    );
}

#[test]
fn piped_lines_run_one_turn_each() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "answer one"}, {"text": "answer two"}]));
    let mut cmd = dsh(&env, &replay.url(), &[]);
    cmd.stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"first question\nsecond question\n")
            .unwrap();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx.recv_timeout(HANG_LIMIT).unwrap().unwrap();
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let reqs = replay.chat_requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(user_texts(&reqs[0].body), ["first question"]);
    assert_eq!(
        user_texts(&reqs[1].body),
        ["first question", "second question"]
    );
    // The first prompt comes before the session exists, later ones show its context use.
    assert_eq!(
        text(&out.stdout),
        "> answer one\n[0% ctx] > answer two\n[0% ctx] > "
    );
    assert!(
        !text(&out.stderr).contains("queued"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_empty_api_key_is_called_empty() {
    let env = Sandbox::new();
    let out = run(env.dsh("http://127.0.0.1:9", "", &["exec", "hi"]));
    assert_eq!(code(out.status), 2, "{out:?}");
    assert!(
        text(&out.stderr).starts_with(
            "error: No API key for provider route \"deepseek\": the environment variable \
             DEEPSEEK_API_KEY is set but empty."
        ),
        "{}",
        text(&out.stderr)
    );
    let mut cmd = env.dsh("http://127.0.0.1:9", "", &["exec", "hi"]);
    cmd.env_remove("DEEPSEEK_API_KEY");
    let out = run(cmd);
    assert!(
        text(&out.stderr).contains("DEEPSEEK_API_KEY is not set."),
        "{}",
        text(&out.stderr)
    );
}
