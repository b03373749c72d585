//! End-to-end tests of the built `dsh` binary: `dsh exec` runs as a subprocess against the
//! in-process replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1), on a real
//! temporary git repository holding a tiny shell project with a failing test.
//!
//! What is proven: the scripted model reads, edits and tests the project and the file ends up
//! fixed; exact stdout/stderr in text mode; `--json` lines (every line parses, event types in
//! order, a terminal `result` line); exit codes 0 / 1 (401) / 2 (usage) / 3 (output-token limit)
//! / 130 (Ctrl-C during a long bash step, with a balanced, loadable session and no orphan tool
//! call or process); the stored session under `$DSH_HOME` and `--resume ID` sending the whole
//! history; no API key value in any file under `$DSH_HOME`.
//!
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::dsh_bin;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dsh_persistence::{RepairReport, SessionPersistence};
use dsh_persistence_jsonl::{JsonlConfig, jsonl_persistence};
use dsh_test_support::{RecordedRequest, ReplayOptions, ReplayServer, Script};
use serde_json::{Value, json};

/// The API key the tests hand to dsh; it must never reach a file under `$DSH_HOME`.
const API_KEY: &str = "sk-e2e-7f3a9c5d1b-SECRET";
/// "Did not hang" bound for one dsh run (generous; runs take well under a second).
const HANG_LIMIT: Duration = Duration::from_secs(60);

const CALC_BUGGY: &str = "add() {\n  echo $(($1 - $2))\n}\n";
const CALC_FIXED: &str = "add() {\n  echo $(($1 + $2))\n}\n";
const TEST_SCRIPT: &str = "#!/bin/sh\n. ./calc.sh\ngot=$(add 2 3)\n\
if [ \"$got\" = 5 ]; then echo \"ok: add 2 3 = 5\"; \
else echo \"FAIL: add 2 3 = $got, want 5\"; exit 1; fi\n";
const ANSWER: &str = "Fixed: add() now adds, and test_calc.sh passes.";

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// The replay provider on its own runtime (the test thread stays synchronous).
struct Replay {
    server: ReplayServer,
    _rt: tokio::runtime::Runtime,
}

impl Replay {
    fn start(responses: Value) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let script = Script::from_json(&responses.to_string()).unwrap();
        let server = rt
            .block_on(ReplayServer::start(script, ReplayOptions::default()))
            .unwrap();
        Self { server, _rt: rt }
    }

    fn url(&self) -> String {
        self.server.base_url()
    }

    fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .collect()
    }
}

/// A temporary `$DSH_HOME` plus a git repository holding the buggy shell project.
struct Env {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    repo: PathBuf,
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "user.name=e2e",
            "-c",
            "user.email=e2e@example.invalid",
        ])
        .args(args)
        .env("HOME", repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let home = root.join("dsh-home");
        let repo = root.join("proj");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("calc.sh"), CALC_BUGGY).unwrap();
        std::fs::write(repo.join("test_calc.sh"), TEST_SCRIPT).unwrap();
        git(&repo, &["init", "-q", "."]);
        git(&repo, &["add", "calc.sh", "test_calc.sh"]);
        git(&repo, &["commit", "-q", "-m", "calc with a bug"]);
        Self {
            _tmp: tmp,
            home,
            repo,
        }
    }

    fn calc(&self) -> String {
        self.repo.join("calc.sh").display().to_string()
    }

    /// Runs the project's test; returns (exit code, stdout).
    fn project_test(&self) -> (i32, String) {
        let out = Command::new("sh")
            .arg("test_calc.sh")
            .current_dir(&self.repo)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8(out.stdout).unwrap(),
        )
    }

    /// `dsh <args>` in the repository with a hermetic environment (`key` = `DEEPSEEK_API_KEY`).
    fn dsh(&self, url: &str, key: Option<&str>, args: &[&str]) -> Command {
        let mut cmd = Command::new(dsh_bin());
        cmd.args(args)
            .current_dir(&self.repo)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("DSH_HOME", &self.home)
            .env("DEEPSEEK_BASE_URL", url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(k) = key {
            cmd.env("DEEPSEEK_API_KEY", k);
        }
        cmd
    }

    /// Every file under `$DSH_HOME`, recursively.
    fn home_files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.home, &mut out);
        out.sort();
        out
    }

    fn session_logs(&self) -> Vec<PathBuf> {
        self.home_files()
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "session.jsonl"))
            .collect()
    }

    fn store(&self) -> std::sync::Arc<dsh_persistence_jsonl::JsonlPersistence> {
        jsonl_persistence(JsonlConfig {
            root: self.home.join("sessions"),
            ..JsonlConfig::default()
        })
    }

    fn assert_key_never_stored(&self) {
        let files = self.home_files();
        assert!(!files.is_empty());
        for f in files {
            let bytes = std::fs::read(&f).unwrap();
            let hit = bytes
                .windows(API_KEY.len())
                .any(|w| w == API_KEY.as_bytes());
            assert!(!hit, "the API key leaked into {}", f.display());
        }
    }
}

/// Runs `cmd` to completion (stdin closed), killing it and failing if it hangs.
fn run(mut cmd: Command) -> Output {
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(HANG_LIMIT) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("dsh did not finish within {HANG_LIMIT:?}");
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

fn code(s: ExitStatus) -> i32 {
    s.code()
        .unwrap_or_else(|| panic!("dsh died from a signal: {s}"))
}

/// Parses every stdout line as JSON (panics naming the first bad line).
fn json_lines(stdout: &[u8]) -> Vec<Value> {
    text(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Event labels (`assistant/chunk` refined by chunk type), consecutive repeats collapsed: the
/// number of delta chunks depends on the temp path length, the kinds and their order do not.
fn event_shape(events: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events {
        let mut t = e["type"].as_str().unwrap().to_owned();
        if t == "assistant/chunk" {
            t = format!("{t}:{}", e["data"]["chunk"]["type"].as_str().unwrap());
        }
        if out.last() != Some(&t) {
            out.push(t);
        }
    }
    out
}

/// The shape of one model step that ends in a tool call and its result.
fn tool_step() -> Vec<&'static str> {
    vec![
        "step/start",
        "assistant/chunk:block-start",
        "assistant/chunk:tool-call-delta",
        // no `block-end`: it would repeat the deltas (docs/formats.md, "Copies of the content")
        "assistant/chunk:usage",
        "assistant/chunk:finish",
        "assistant/message",
        "tool/call",
        "tool/result",
        "step/end",
    ]
}

/// The scripted model of the main scenario: read, edit, run the test, answer.
fn fix_script(env: &Env) -> Value {
    json!([
        {"tool_calls": [["read", {"file_path": env.calc()}]]},
        {"tool_calls": [["edit", {"file_path": env.calc(), "old_string": "$1 - $2", "new_string": "$1 + $2"}]]},
        {"tool_calls": [["bash", {"command": "sh test_calc.sh", "description": "Run the tests"}]]},
        {"text": ANSWER},
    ])
}

/// Role sequence of a recorded chat request.
fn roles(req: &RecordedRequest) -> Vec<String> {
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect()
}

/// Every `tool/call` of a stored log has exactly one `tool/result` with its call id.
fn assert_calls_paired(events: &[dsh_session::SessionEvent]) -> usize {
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for e in events {
        let v = e.to_value();
        match v["type"].as_str().unwrap() {
            "tool/call" => calls.push(v["data"]["callId"].as_str().unwrap().to_owned()),
            "tool/result" => {
                let content = v["data"]["message"]["content"].as_array().unwrap();
                for b in content {
                    if b["type"] == "tool-result" {
                        results.push(b["toolCallId"].as_str().unwrap().to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    let mut c = calls.clone();
    c.sort();
    results.sort();
    assert_eq!(c, results, "tool calls without exactly one result");
    calls.len()
}

/// Violations of the session invariants in a loaded log.
fn invariant_violations(events: &[dsh_session::SessionEvent]) -> Vec<String> {
    let arcs: Vec<std::sync::Arc<dsh_session::SessionEvent>> =
        events.iter().cloned().map(std::sync::Arc::new).collect();
    dsh_session::check_invariants(&arcs, None)
        .into_iter()
        .map(|v| format!("{v:?}"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn exec_text_fixes_the_project_and_prints_the_answer() {
    let env = Env::new();
    assert_eq!(
        env.project_test(),
        (1, "FAIL: add 2 3 = -1, want 5\n".to_owned())
    );
    let replay = Replay::start(fix_script(&env));
    let out = run(env.dsh(
        &replay.url(),
        Some(API_KEY),
        &["exec", "fix the failing test"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), format!("{ANSWER}\n"));
    assert_eq!(
        common::e2e::before_end_line(&text(&out.stderr)),
        format!(
            "• read {calc}\n  ✓ End of file - total 3 lines\n\
             • edit {calc}\n  ✓ The file {calc} has been updated successfully.\n\
             • bash Run the tests\n  $ sh test_calc.sh\n  ✓ exit 0\n  │ ok: add 2 3 = 5\n",
            calc = env.calc()
        )
    );
    // The file is fixed and the project's test passes.
    assert_eq!(
        std::fs::read_to_string(env.repo.join("calc.sh")).unwrap(),
        CALC_FIXED
    );
    assert_eq!(env.project_test(), (0, "ok: add 2 3 = 5\n".to_owned()));
    assert_eq!(git(&env.repo, &["status", "--porcelain"]), " M calc.sh\n");

    // Four model requests, each carrying the growing history; the key went out as a bearer token.
    let reqs = replay.chat_requests();
    assert_eq!(reqs.len(), 4);
    for r in &reqs {
        assert_eq!(
            r.headers.get("authorization").map(String::as_str),
            Some(format!("Bearer {API_KEY}").as_str())
        );
    }
    // system, the task, the runtime-context snapshot (date, git status, permission policy).
    assert_eq!(roles(&reqs[0]), ["system", "user", "user"]);
    let msgs = reqs[0].body["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"], "fix the failing test");
    assert!(
        msgs[2]["content"]
            .as_str()
            .unwrap()
            .starts_with("Current runtime context.")
    );
    // After the edit the git status changed, so step 3 carries a fresh context snapshot.
    assert_eq!(
        roles(&reqs[3]),
        [
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "user",
            "assistant",
            "tool"
        ]
    );
    // The bash step's tool message is what the test printed.
    let msgs = reqs[3].body["messages"].as_array().unwrap();
    let bash_result = msgs[9]["content"].as_str().unwrap();
    assert_eq!(bash_result, "ok: add 2 3 = 5\n");

    // Exactly one stored session, balanced, every call paired; no key on disk.
    let logs = env.session_logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    env.assert_key_never_stored();
}

#[test]
fn exec_json_streams_every_event_then_a_result_line_and_resume_sends_the_history() {
    let env = Env::new();
    let replay = Replay::start(fix_script(&env));
    let out = run(env.dsh(
        &replay.url(),
        Some(API_KEY),
        &["exec", "--json", "fix the failing test"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stderr), "");
    let lines = json_lines(&out.stdout);
    let (result, events) = lines.split_last().unwrap();

    let mut want = vec![
        "permission/preset",
        "agent/inbox/spliced",
        "turn/start",
        "agent/inbox/spliced",
        "step/start",
        "user/message", // the task, then the runtime-context snapshot (collapsed)
        "request/header",
        "request/context",
    ];
    want.extend(&tool_step()[1..]); // read
    want.extend(tool_step()); // edit
    let mut bash_step = tool_step();
    bash_step.insert(1, "user/message"); // git status changed: a fresh context snapshot
    want.extend(bash_step);
    want.extend([
        "step/start",
        "assistant/chunk:block-start",
        "assistant/chunk:text-delta",
        "assistant/chunk:usage",
        "assistant/chunk:finish",
        "assistant/message",
        "step/end",
        "turn/end",
    ]);
    assert_eq!(event_shape(events), want);
    // seqs are contiguous from 0: every event of the fresh session is streamed exactly once,
    // including `permission/preset`, written while the session was created.
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    let tool_names: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| e["data"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tool_names, ["read", "edit", "bash"]);
    assert_eq!(
        events.last().unwrap()["data"],
        json!({"turn": 1, "reason": {"kind": "completed"}})
    );

    // The terminal result line.
    let id = result["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(result["type"], "result");
    assert_eq!(result["reason"], "completed");
    assert_eq!(result["text"], ANSWER);
    assert_eq!(
        result["usage"]["inputTokens"], 400,
        "4 requests × 100 prompt tokens"
    );
    assert!(result["durationMs"].is_u64());
    let keys: Vec<&str> = result
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "type",
            "sessionId",
            "reason",
            "text",
            "usage",
            "durationMs",
            "contextTokens",
            "contextWindow",
            "sessionUsage"
        ]
    );
    // deepseek-v4-flash: the built-in catalog's window (issue 14).
    assert_eq!(result["contextWindow"], 1_048_576);
    assert!(result["contextTokens"].as_u64().unwrap() > 0);
    assert_eq!(
        std::fs::read_to_string(env.repo.join("calc.sh")).unwrap(),
        CALC_FIXED
    );

    // The session is stored under $DSH_HOME, at the project's path, with exactly the streamed
    // events.
    let log = dsh_persistence_jsonl::log_path(
        &env.home.join("sessions"),
        Some(env.repo.to_str().unwrap()),
        &id,
    )
    .unwrap();
    assert_eq!(env.session_logs(), [log]);
    let store = env.store();
    let loaded = store.inspect(&id).unwrap();
    assert_eq!(loaded.repair, RepairReport::default());
    assert_eq!(loaded.header.cwd.as_deref(), env.repo.to_str());
    let stored: Vec<Value> = loaded.events.iter().map(|e| e.to_value()).collect();
    assert_eq!(
        stored[0],
        json!({"type": "permission/preset", "seq": 0, "time": stored[0]["time"],
               "data": {"preset": "workspace-write"}})
    );
    assert_eq!(stored, *events);
    assert_eq!(assert_calls_paired(&loaded.events), 3);
    assert_eq!(invariant_violations(&loaded.events), Vec::<String>::new());

    // --resume adds a turn whose request carries the whole history.
    let replay2 = Replay::start(json!([{"text": "The bug was a minus sign."}]));
    let out = run(env.dsh(
        &replay2.url(),
        Some(API_KEY),
        &["exec", "--json", "--resume", &id, "what was the bug?"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    let lines = json_lines(&out.stdout);
    let result = lines.last().unwrap();
    assert_eq!(result["sessionId"], id.as_str());
    assert_eq!(result["reason"], "completed");
    assert_eq!(result["text"], "The bug was a minus sign.");
    // Only the new events are streamed, continuing the stored seqs.
    assert_eq!(lines[0]["seq"].as_u64().unwrap(), stored.len() as u64);
    // The resumed loop re-logs its request header with reason `resume` (spec: first request
    // of a loop instance on a session that already has a header).
    let header_reasons: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "request/header")
        .map(|l| l["data"]["reason"].as_str().unwrap())
        .collect();
    assert_eq!(header_reasons, ["resume"]);
    let reqs = replay2.chat_requests();
    assert_eq!(reqs.len(), 1);
    // The stored history replayed in order (the git status is unchanged since the last
    // snapshot, so no new context message), then the new prompt.
    assert_eq!(
        roles(&reqs[0]),
        [
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user"
        ]
    );
    let msgs = reqs[0].body["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"], "fix the failing test");
    assert_eq!(msgs[10]["content"], ANSWER);
    assert_eq!(msgs[11]["content"], "what was the bug?");
    let calls: Vec<&str> = [3, 5, 8]
        .iter()
        .map(|&i| {
            msgs[i]["tool_calls"][0]["function"]["name"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(calls, ["read", "edit", "bash"]);

    // Still one session; now two completed turns.
    assert_eq!(env.session_logs().len(), 1);
    let loaded = env.store().inspect(&id).unwrap();
    assert_eq!(loaded.repair, RepairReport::default());
    let turn_ends: Vec<Value> = loaded
        .events
        .iter()
        .map(|e| e.to_value())
        .filter(|e| e["type"] == "turn/end")
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(
        turn_ends,
        [
            json!({"turn": 1, "reason": {"kind": "completed"}}),
            json!({"turn": 2, "reason": {"kind": "completed"}})
        ]
    );
    env.assert_key_never_stored();
}

#[test]
fn exec_exits_1_on_a_provider_401() {
    let env = Env::new();
    let replay = Replay::start(json!([{
        "status": 401,
        "body": {"error": {"message": "Authentication Fails, Your api key is invalid",
                           "type": "authentication_error", "param": null, "code": "invalid_request_error"}}
    }]));
    let out = run(env.dsh(&replay.url(), Some(API_KEY), &["exec", "hello"]));
    assert_eq!(code(out.status), 1, "{out:?}");
    assert_eq!(text(&out.stdout), "");
    let err = common::e2e::before_end_line(&text(&out.stderr));
    assert_eq!(
        err,
        "error: deepseek: Authentication Fails, Your api key is invalid (HTTP 401); \
         check the API key in env DEEPSEEK_API_KEY (AUTH)\n"
    );
    // Not retried: a 401 is permanent.
    assert_eq!(replay.chat_requests().len(), 1);

    // The same with --json: a result line with reason "error".
    let replay = Replay::start(json!([{"status": 401, "body": {"error": {"message": "bad key"}}}]));
    let out = run(env.dsh(&replay.url(), Some(API_KEY), &["exec", "--json", "hello"]));
    assert_eq!(code(out.status), 1, "{out:?}");
    let lines = json_lines(&out.stdout);
    let result = lines.last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["reason"], "error");
    assert_eq!(result["text"], "");
    let turn_end = &lines[lines.len() - 2];
    assert_eq!(turn_end["type"], "turn/end");
    assert_eq!(turn_end["data"]["reason"]["kind"], "error");
    env.assert_key_never_stored();
}

#[test]
fn exec_exits_3_at_the_output_token_limit() {
    let env = Env::new();
    let replay = Replay::start(json!([{"text": "The answer is cut sh", "finish": "length"}]));
    let out = run(env.dsh(
        &replay.url(),
        Some(API_KEY),
        &["exec", "explain everything"],
    ));
    assert_eq!(code(out.status), 3, "{out:?}");
    assert_eq!(text(&out.stdout), "The answer is cut sh\n");
    assert_eq!(
        common::e2e::before_end_line(&text(&out.stderr)),
        "stopped at the output-token limit\n"
    );

    let replay = Replay::start(json!([{"text": "cut", "finish": "length"}]));
    let out = run(env.dsh(&replay.url(), Some(API_KEY), &["exec", "--json", "again"]));
    assert_eq!(code(out.status), 3, "{out:?}");
    let lines = json_lines(&out.stdout);
    let result = lines.last().unwrap();
    assert_eq!(result["reason"], "max-tokens");
    assert_eq!(result["text"], "cut");
}

#[test]
fn exec_usage_errors_exit_2_and_store_nothing() {
    let env = Env::new();
    let replay = Replay::start(json!([{"text": "never served"}]));

    let out = run(env.dsh(&replay.url(), Some(API_KEY), &["exec", ""]));
    assert_eq!(code(out.status), 2, "{out:?}");
    assert_eq!(text(&out.stdout), "");
    assert_eq!(text(&out.stderr), "error: the prompt is empty\n");

    let out = run(env.dsh(&replay.url(), Some(API_KEY), &["exec", "  \n"]));
    assert_eq!(code(out.status), 2, "{out:?}");
    assert_eq!(text(&out.stderr), "error: the prompt is empty\n");

    let out = run(env.dsh(
        &replay.url(),
        Some(API_KEY),
        &["-c", "modle=deepseek-v4-pro", "exec", "hi"],
    ));
    assert_eq!(code(out.status), 2, "{out:?}");
    let err = text(&out.stderr);
    // (the list of known keys that follows grows with the settings schema)
    assert!(
        err.starts_with("error: -c flags: unknown key `modle` (top-level keys: max_tokens, "),
        "{err}"
    );

    let out = run(env.dsh(&replay.url(), None, &["exec", "hi"]));
    assert_eq!(code(out.status), 2, "{out:?}");
    assert_eq!(text(&out.stdout), "");
    let err = text(&out.stderr);
    assert!(
        err.starts_with(
            "error: No API key for provider route \"deepseek\": the environment variable \
             DEEPSEEK_API_KEY is not set."
        ),
        "{err}"
    );

    // An empty key counts as missing.
    let out = run(env.dsh(&replay.url(), Some(""), &["exec", "hi"]));
    assert_eq!(code(out.status), 2, "{out:?}");
    assert!(text(&out.stderr).contains("DEEPSEEK_API_KEY"));

    // clap's own usage errors are 2 as well.
    let out = run(env.dsh(&replay.url(), Some(API_KEY), &["exec", "--bogus", "hi"]));
    assert_eq!(code(out.status), 2, "{out:?}");

    // None of them reached the provider or stored a session.
    assert_eq!(replay.chat_requests().len(), 0);
    assert_eq!(env.session_logs(), Vec::<PathBuf>::new());
}

#[test]
fn ctrl_c_during_a_long_bash_step_exits_130_with_a_balanced_session() {
    let env = Env::new();
    let pid_file = env.repo.join("sleep.pid");
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {
            "command": "echo $$ > sleep.pid; exec sleep 120",
            "description": "Wait a long time"
        }]]},
        {"text": "never served"},
    ]));
    // Unconfined: the test reads the shell's pid from `$$`, which the bubblewrap sandbox's
    // pid namespace would renumber (e2e_sandbox covers Ctrl-C under the sandbox).
    let mut cmd = env.dsh(
        &replay.url(),
        Some(API_KEY),
        &[
            "exec",
            "--json",
            "--permission-mode",
            "danger-full-access",
            "wait",
        ],
    );
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let _ = tx.send(line);
        }
    });
    let stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());

    // Wait until the shell is actually running (its pid file exists and is complete).
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + HANG_LIMIT;
    let sleep_pid: u32 = loop {
        while let Ok(l) = rx.try_recv() {
            lines.push(l);
        }
        if let Ok(s) = std::fs::read_to_string(&pid_file)
            && s.ends_with('\n')
        {
            break s.trim().parse().unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the bash step never started: {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());

    let (tx_exit, rx_exit) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx_exit.send(child.wait());
    });
    let exit = match rx_exit.recv_timeout(HANG_LIMIT) {
        Ok(s) => s.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("dsh did not exit after SIGINT");
        }
    };
    reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    while let Ok(l) = rx.try_recv() {
        lines.push(l);
    }
    assert_eq!(code(exit), 130, "stderr: {stderr}");
    assert!(
        stderr.contains("interrupted — cancelling the turn"),
        "{stderr}"
    );

    // Every stdout line parses; the result line is last and says aborted.
    let values: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (result, events) = values.split_last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["reason"], "aborted");
    assert_eq!(result["text"], "");
    let id = result["sessionId"].as_str().unwrap();
    let turn_end = events.last().unwrap();
    assert_eq!(turn_end["type"], "turn/end");
    assert_eq!(turn_end["data"]["reason"]["kind"], "aborted");

    // The sleeping process was killed, not orphaned.
    let proc_dir = PathBuf::from(format!("/proc/{sleep_pid}"));
    let gone_by = std::time::Instant::now() + HANG_LIMIT;
    while proc_dir.exists() {
        let stat = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
        if stat.contains(") Z ") {
            break; // a zombie awaiting its reaper is dead already
        }
        assert!(
            std::time::Instant::now() < gone_by,
            "sleep {sleep_pid} survived Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The stored session loads without any repair: the turn was closed and the bash call has
    // its result.
    let loaded = env.store().inspect(id).unwrap();
    assert_eq!(loaded.repair, RepairReport::default());
    assert_eq!(assert_calls_paired(&loaded.events), 1);
    assert_eq!(invariant_violations(&loaded.events), Vec::<String>::new());
    let stored: Vec<Value> = loaded.events.iter().map(|e| e.to_value()).collect();
    assert_eq!(stored[0]["type"], "permission/preset");
    assert_eq!(stored, *events);
    assert_eq!(replay.chat_requests().len(), 1);
    // `dsh sessions verify` agrees: clean, nothing to repair.
    let log = dsh_persistence_jsonl::log_path(
        &env.home.join("sessions"),
        Some(env.repo.to_str().unwrap()),
        id,
    )
    .unwrap();
    let out = run(env.dsh(
        "http://127.0.0.1:9",
        Some(API_KEY),
        &["sessions", "verify", "--json", log.to_str().unwrap()],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], true);
    assert_eq!(report["events"], stored.len());
    assert_eq!(report["errors"], json!([]));
    assert_eq!(report["repair"], json!({"tornTail": false, "closers": []}));
    env.assert_key_never_stored();
}

#[test]
fn sessions_list_fork_and_verify_see_exec_sessions() {
    let env = Env::new();
    let url_dead = "http://127.0.0.1:9"; // session commands never call the provider
    let replay = Replay::start(json!([{"text": "Hi."}]));
    let out = run(env.dsh(&replay.url(), Some(API_KEY), &["exec", "--json", "hello"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let id = json_lines(&out.stdout).last().unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let replay = Replay::start(json!([{"text": "Bye."}]));
    let out = run(env.dsh(
        &replay.url(),
        Some(API_KEY),
        &["exec", "--resume", &id, "goodbye"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), "Bye.\n");

    // list --json: the session, its first prompt as title, two turns, the workspace.
    let out = run(env.dsh(url_dead, None, &["sessions", "list", "--json"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{list}");
    assert_eq!(rows[0]["id"], id.as_str());
    assert_eq!(rows[0]["title"], "hello");
    assert_eq!(rows[0]["turns"], 2);
    assert_eq!(rows[0]["cwd"], env.repo.to_str().unwrap());
    assert_eq!(rows[0].get("parentSession"), None);

    // fork --at the first turn's turn/end: a child seeded with turn 1 only.
    let store = env.store();
    let parent = store.inspect(&id).unwrap();
    let turn_end_seqs: Vec<u64> = parent
        .events
        .iter()
        .map(|e| e.to_value())
        .filter(|e| e["type"] == "turn/end")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(turn_end_seqs.len(), 2);
    let at = turn_end_seqs[0];
    // Inside an open turn: refused as a usage error.
    let out = run(env.dsh(
        url_dead,
        None,
        &["sessions", "fork", &id, "--at", &(at - 1).to_string()],
    ));
    assert_eq!(code(out.status), 2, "{out:?}");
    assert!(
        text(&out.stderr).contains("inside open turn 1"),
        "{}",
        text(&out.stderr)
    );
    let out = run(env.dsh(
        url_dead,
        None,
        &["sessions", "fork", &id, "--at", &at.to_string()],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    let child = text(&out.stdout).trim_end().to_owned();
    assert_ne!(child, id);
    let forked = store.inspect(&child).unwrap();
    assert_eq!(forked.header.parent_session.as_deref(), Some(id.as_str()));
    assert_eq!(forked.header.seed_length, Some(at + 1));
    let child_events: Vec<Value> = forked.events.iter().map(|e| e.to_value()).collect();
    let parent_events: Vec<Value> = parent.events.iter().map(|e| e.to_value()).collect();
    assert_eq!(child_events.len() as u64, at + 2);
    assert_eq!(child_events[..=at as usize], parent_events[..=at as usize]);
    assert_eq!(child_events[at as usize + 1]["type"], "session/end-seed");

    let out = run(env.dsh(url_dead, None, &["sessions", "list", "--json"]));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut ids: Vec<(String, Option<String>)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_owned(),
                r.get("parentSession")
                    .map(|p| p.as_str().unwrap().to_owned()),
            )
        })
        .collect();
    ids.sort();
    let mut want = vec![(id.clone(), None), (child.clone(), Some(id.clone()))];
    want.sort();
    assert_eq!(ids, want);

    // The child resumes with turn 1's history only.
    let replay = Replay::start(json!([{"text": "Forked."}]));
    let out = run(env.dsh(
        &replay.url(),
        Some(API_KEY),
        &["exec", "--resume", &child, "and now?"],
    ));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), "Forked.\n");
    let reqs = replay.chat_requests();
    assert_eq!(
        roles(&reqs[0]),
        ["system", "user", "user", "assistant", "user"]
    );
    let msgs = reqs[0].body["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"], "hello");
    assert_eq!(msgs[3]["content"], "Hi.");
    assert_eq!(msgs[4]["content"], "and now?");

    // Both stored logs verify clean.
    for sid in [&id, &child] {
        let log = dsh_persistence_jsonl::log_path(
            &env.home.join("sessions"),
            Some(env.repo.to_str().unwrap()),
            sid,
        )
        .unwrap();
        let out = run(env.dsh(
            url_dead,
            None,
            &["sessions", "verify", "--json", log.to_str().unwrap()],
        ));
        assert_eq!(code(out.status), 0, "{out:?}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["ok"], true, "{report}");
        assert_eq!(report["errors"], json!([]));
    }
    env.assert_key_never_stored();
}

#[test]
fn dsh_log_debug_follows_one_turn_through_its_spans() {
    let env = Env::new();
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": env.calc()}]]},
        {"text": "read it"},
    ]));
    let mut cmd = env.dsh(&replay.url(), Some(API_KEY), &["exec", "read calc"]);
    cmd.env("DSH_LOG", "dsh_agent_loop=debug,dsh_tools=debug");
    let out = run(cmd);
    assert_eq!(code(out.status), 0, "{out:?}");
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let has = |parts: &[&str]| lines.iter().any(|l| parts.iter().all(|p| l.contains(p)));
    // Every line of the turn carries the turn's span; a step's lines the step's; the tool call
    // its call id and tool name; the request its route and model.
    assert!(has(&["turn{session=", "turn=1}", "turn started"]), "{err}");
    assert!(
        has(&[
            "turn=1}:step{step=1}:request{provider=deepseek model=deepseek-v4-flash}",
            "request sent"
        ]),
        "{err}"
    );
    assert!(
        has(&[
            "turn=1}:step{step=1}:tool_call{call_id=",
            "tool=read}",
            "tool call finished"
        ]),
        "{err}"
    );
    assert!(
        has(&["turn=1}:step{step=2}:request{", "request finished"]),
        "{err}"
    );
    assert!(has(&["turn{session=", "turn ended"]), "{err}");
}
