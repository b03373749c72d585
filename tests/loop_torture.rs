//! kill -9 torture of the whole agent loop: the real `dsh` binary runs `dsh exec --json` on a
//! temporary workspace against the in-process replay provider (`dsh_test_support::ReplayServer`
//! on 127.0.0.1) with the real tools, and is SIGKILLed at a pseudo-random point of a scripted
//! seven-step session (bash `sleep 0.05; echo step N >> ran.log; echo step N`, `write` then `read` of a file, parallel
//! `grep` + `glob`, another bash, then a final text answer; the replay server paces every frame so
//! the kill points spread across all steps).
//!
//! After each kill, when a session was stored at all, checks that:
//! - it loads through `Persistence::load` (torn tail dropped, open turn closed, durably);
//! - the repaired log passes `dsh_session::check_invariants`;
//! - every assistant tool-call block of the derived history (`Session::from_restore` →
//!   `derive_messages`) has a later tool-result block (no orphan tool call), and every
//!   `tool/call` event has exactly one `tool/result`;
//! - a second load changes nothing and repairs nothing (repair is idempotent);
//! - every 5th iteration, `dsh sessions verify --json` on the crashed log (before any repair)
//!   reports no errors and exactly the repair `inspect` computes (torn tail, closer types);
//! - crash consistency: stored and streamed events agree; a tool side effect on disk implies its
//!   `tool/call` is durable; a request the provider received implies its `step/start` is;
//! - every 10th iteration (or the next one that stored a session; `DSH_TORTURE_RESUME_EVERY`
//!   overrides), `dsh exec --resume ID "continue"` on the repaired session (iterations 10–19,
//!   30–39, …: on the crashed log as it is, only `inspect`ed, so dsh's own resume repairs it)
//!   exits 0, and the
//!   provider request it sent is valid:
//!   every assistant message with `tool_calls` is immediately followed by exactly one `tool`
//!   message per call id, and no `tool` message is orphaned. The resumed log is checked again.
//!
//! Iterations 3, 7, 11, … run with `-c persistence.write_batch_ms=0` (no batching window).
//! Iterations 5, 15, 25, … crash twice: the repaired session is resumed with a bash step and
//! killed again at a random point, re-checked (the first repair stays its prefix), then resumed
//! to completion.
//!
//! One more iteration runs with `-c persistence.backend=sqlite` and checks the same through the
//! SQLite seam (`DSH_TORTURE_SQLITE_ITERATIONS` adds randomly killed ones). Before the kills, one calibration run completes the script unkilled (exit 0).
//!
//! Kill points: iteration i draws `k` from a deterministic LCG; `k == 0` kills during start-up
//! (0–150 ms after spawn), otherwise after the k-th streamed `--json` event line (k ≤ the
//! calibration run's event count) plus 0–24 ms. Iterations: 50 by default,
//! `DSH_TORTURE_ITERATIONS` overrides; `DSH_TORTURE_RESUME_EVERY=1` resumes after every kill;
//! `DSH_TORTURE_SEED` (decimal) changes the kill points.
//! Runs serially (nextest test group `serial-torture`).
//!
//! The `dsh` binary is located/built exactly like `e2e_exec.rs` does (`$CARGO build -p dsh` into
//! this test's target directory once; `DSH_E2E_BIN=/path/to/dsh` skips the build).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use dsh_kernel::ErrorCode;
mod common;
use common::dsh_bin;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_llm::{ContentBlock, Role};
use dsh_persistence::{LoadedSession, RepairReport, SessionPersistence};
use dsh_persistence_jsonl::{JsonlConfig, jsonl_persistence};
use dsh_session::{EventData, Session, SessionEvent, check_invariants};
use dsh_test_support::{RecordedRequest, ReplayOptions, ReplayServer, Script};
use serde_json::{Value, json};

/// "Did not hang" bound for one dsh run (generous; a full run takes about a second).
const HANG_LIMIT: Duration = Duration::from_secs(60);
const API_KEY: &str = "test";
const FINAL_TEXT: &str =
    "All six steps are done: two shell steps, notes.txt written and read back, needle found.";
/// The task of the scripted session.
const TASK: &[&str] = &["do the six steps"];
/// The command of the bash step of a resumed turn (its side effect: a `resumed` line in ran.log).
const RESUMED_BASH: &str = "sleep 0.05; echo resumed >> ran.log; echo resumed";
/// Replay pacing: ms before every SSE frame (arguments are cut into 8-character pieces).
const FRAME_DELAY_MS: u64 = 2;

// ---------------------------------------------------------------------------------------------
// Harness (binary location as in e2e_exec.rs)
// ---------------------------------------------------------------------------------------------

fn iterations() -> u64 {
    std::env::var("DSH_TORTURE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
}

/// Resume every n-th iteration (default 10; `DSH_TORTURE_RESUME_EVERY` overrides, 1 = always).
fn resume_every() -> u64 {
    std::env::var("DSH_TORTURE_RESUME_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
        .max(1)
}

/// Deterministic LCG (same constants as `persistence_torture.rs`).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound.max(1)
    }
}

/// A temporary `$DSH_HOME` plus a workspace directory.
struct Env {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    repo: PathBuf,
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let home = root.join("dsh-home");
        let repo = root.join("proj");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(repo.join("src/lib.txt"), "no match here\n").unwrap();
        Self {
            _tmp: tmp,
            home,
            repo,
        }
    }

    fn notes(&self) -> String {
        self.repo.join("notes.txt").display().to_string()
    }

    /// `dsh <extra> exec --json <args>` in the workspace with a hermetic environment.
    fn dsh(&self, url: &str, extra: &[&str], args: &[&str]) -> Command {
        let mut cmd = self.dsh_plain(url);
        cmd.args(extra).arg("exec").arg("--json").args(args);
        cmd
    }

    /// `dsh` (no arguments yet) in the workspace with a hermetic environment.
    fn dsh_plain(&self, url: &str) -> Command {
        let mut cmd = Command::new(dsh_bin());
        cmd.current_dir(&self.repo)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("DSH_HOME", &self.home)
            .env("DEEPSEEK_BASE_URL", url)
            .env("DEEPSEEK_API_KEY", API_KEY)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn sessions_dir(&self) -> PathBuf {
        self.home.join("sessions")
    }

    /// Ids of the JSONL sessions stored under `$DSH_HOME/sessions/<project>/<id>/`.
    fn jsonl_ids(&self) -> Vec<String> {
        let mut out = Vec::new();
        let Ok(projects) = std::fs::read_dir(self.sessions_dir()) else {
            return out;
        };
        for p in projects {
            let p = p.unwrap().path();
            if !p.is_dir() {
                continue;
            }
            for s in std::fs::read_dir(&p).unwrap() {
                let s = s.unwrap().path();
                let has_log = std::fs::read_dir(&s).is_ok_and(|mut d| {
                    d.any(|f| {
                        f.unwrap()
                            .file_name()
                            .to_str()
                            .is_some_and(|n| n.starts_with("session.jsonl"))
                    })
                });
                if has_log {
                    out.push(s.file_name().unwrap().to_str().unwrap().to_owned());
                }
            }
        }
        out.sort();
        out
    }

    fn jsonl_store(&self) -> Arc<dyn SessionPersistence> {
        jsonl_persistence(JsonlConfig {
            root: self.sessions_dir(),
            ..JsonlConfig::default()
        })
    }

    fn sqlite_store(&self) -> Arc<dyn SessionPersistence> {
        dsh_persistence_sqlite::open_persistence(dsh_persistence_sqlite::SqliteConfig {
            path: dsh_persistence_sqlite::default_db_path(&self.sessions_dir()),
            pack_chunks: true,
        })
        .unwrap()
    }
}

/// The scripted model: seven steps, each frame paced by [`FRAME_DELAY_MS`].
fn script(env: &Env) -> Value {
    let bash = |n: u32| {
        json!({"tool_calls": [["bash", {"command": format!("sleep 0.05; echo step {n} >> ran.log; echo step {n}"),
                                        "description": format!("Step {n}")}]],
               "delay_ms": FRAME_DELAY_MS})
    };
    let repo = env.repo.display().to_string();
    json!([
        bash(1),
        bash(2),
        {"tool_calls": [["write", {"file_path": env.notes(), "content": "alpha\nbeta needle\ngamma\n"}]],
         "delay_ms": FRAME_DELAY_MS},
        {"tool_calls": [["read", {"file_path": env.notes()}]], "delay_ms": FRAME_DELAY_MS},
        {"tool_calls": [["grep", {"pattern": "needle", "path": repo}],
                        ["glob", {"pattern": "**/*.txt", "path": repo}]],
         "delay_ms": FRAME_DELAY_MS},
        bash(6),
        {"text": FINAL_TEXT, "delay_ms": FRAME_DELAY_MS},
    ])
}

/// Starts a replay server for `responses` on `rt`.
fn start_replay(rt: &tokio::runtime::Runtime, responses: &Value) -> ReplayServer {
    let script = Script::from_json(&responses.to_string()).unwrap();
    rt.block_on(ReplayServer::start(script, ReplayOptions::default()))
        .unwrap()
}

fn chat_requests(server: &ReplayServer) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect()
}

/// Kills `pid` with SIGKILL.
fn kill9(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

/// A spawned dsh whose stdout lines arrive on a channel.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    reader: std::thread::JoinHandle<()>,
    stderr: std::thread::JoinHandle<String>,
}

fn spawn(mut cmd: Command) -> Running {
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    Running {
        child,
        lines: rx,
        reader,
        stderr,
    }
}

impl Running {
    /// Waits for the exit (killing and failing on a hang); returns (status, stdout lines, stderr).
    fn finish(self) -> (std::process::ExitStatus, Vec<String>, String) {
        let pid = self.child.id();
        let (tx, rx) = mpsc::channel();
        let mut child = self.child;
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = match rx.recv_timeout(HANG_LIMIT) {
            Ok(s) => s.unwrap(),
            Err(_) => {
                kill9(pid);
                panic!("dsh did not finish within {HANG_LIMIT:?}");
            }
        };
        self.reader.join().unwrap();
        let mut lines = Vec::new();
        while let Ok(l) = self.lines.try_recv() {
            lines.push(l);
        }
        let stderr = self.stderr.join().unwrap();
        (status, lines, stderr)
    }
}

fn run(cmd: Command) -> Output {
    let (status, lines, stderr) = spawn(cmd).finish();
    let mut stdout = lines.join("\n").into_bytes();
    if !stdout.is_empty() {
        stdout.push(b'\n');
    }
    Output {
        status,
        stdout,
        stderr: stderr.into_bytes(),
    }
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// Every `tool/call` event has exactly one `tool/result`, and every other `tool/result` is the
/// repair's "not started" closer for a call the assistant requested but never dispatched (its
/// `tool/call` was never durable); returns the number of `tool/call` events.
fn assert_calls_paired(events: &[SessionEvent], what: &str) -> usize {
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut not_started = Vec::new();
    for e in events {
        match &e.data {
            EventData::ToolCall(_) => {
                let v = e.to_value();
                calls.push(v["data"]["callId"].as_str().unwrap().to_owned());
            }
            EventData::ToolResult(r) => {
                let id = r.call_id().map(ToString::to_string).unwrap_or_default();
                let v = e.to_value();
                let text = &v["data"]["message"]["content"][0]["content"][0]["text"];
                if *text == dsh_persistence::NOT_STARTED_TEXT {
                    not_started.push(id.clone());
                }
                results.push(id);
            }
            _ => {}
        }
    }
    for id in &not_started {
        assert!(
            !calls.contains(id),
            "{what}: a 'not started' result for the recorded call {id}"
        );
    }
    let mut want = calls.clone();
    want.extend(not_started);
    want.sort();
    results.sort();
    assert_eq!(
        want, results,
        "{what}: tool/call without exactly one tool/result"
    );
    calls.len()
}

/// Every assistant tool-call block of the derived history has a later tool-result block.
fn assert_no_orphan_in_history(loaded: &LoadedSession, id: &str, what: &str) {
    let session = Session::from_restore(id, loaded.events.clone(), Some(loaded.header.clone()))
        .unwrap_or_else(|e| panic!("{what}: from_restore failed: {e}"));
    let messages = session.derive_messages();
    let mut open: Vec<String> = Vec::new();
    for m in &messages {
        for b in &m.content {
            match b {
                ContentBlock::ToolCall { id, .. } if m.role == Role::Assistant => {
                    open.push(id.to_string());
                }
                ContentBlock::ToolResult { tool_call_id, .. } => {
                    let c = tool_call_id.to_string();
                    assert!(
                        open.contains(&c),
                        "{what}: tool result {c} before/without its call"
                    );
                    open.retain(|o| *o != c);
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        open,
        Vec::<String>::new(),
        "{what}: orphan tool calls in the derived history"
    );
}

fn invariant_violations(events: &[SessionEvent]) -> Vec<String> {
    let arcs: Vec<Arc<SessionEvent>> = events.iter().cloned().map(Arc::new).collect();
    check_invariants(&arcs, None)
        .into_iter()
        .map(|v| format!("{v:?}"))
        .collect()
}

/// The provider request is well-formed: every assistant message with `tool_calls` is followed
/// immediately by one `tool` message per call id (in any order), and every `tool` message answers
/// a call of the assistant message right before its run. Returns the number of tool calls.
fn assert_request_balanced(req: &RecordedRequest, what: &str) -> usize {
    let msgs = req.body["messages"].as_array().unwrap();
    let mut calls = 0;
    let mut i = 0;
    while i < msgs.len() {
        let m = &msgs[i];
        assert_ne!(m["role"], "tool", "{what}: orphan tool message at {i}: {m}");
        i += 1;
        let Some(tc) = m.get("tool_calls").and_then(Value::as_array) else {
            continue;
        };
        if tc.is_empty() {
            continue;
        }
        assert_eq!(m["role"], "assistant", "{what}: {m}");
        let mut want: Vec<String> = tc
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect();
        let mut got = Vec::new();
        while i < msgs.len() && msgs[i]["role"] == "tool" {
            got.push(msgs[i]["tool_call_id"].as_str().unwrap().to_owned());
            i += 1;
        }
        want.sort();
        got.sort();
        assert_eq!(
            got, want,
            "{what}: tool calls at message {} not answered exactly",
            i
        );
        calls += want.len();
    }
    calls
}

/// Outcome counters.
#[derive(Default, Debug)]
struct Tally {
    no_session: u64,
    completed_before_kill: u64,
    clean: u64,
    torn_tail: u64,
    closed_by_repair: u64,
    resumes: u64,
    /// Crashed logs checked with `dsh sessions verify --json` before any repair.
    verified: u64,
    /// Resumes of a crashed log nobody repaired before (`dsh` repairs it on resume).
    raw_resumes: u64,
    /// Repaired sessions resumed, killed again, repaired again and resumed to the end.
    double_crashes: u64,
    /// Histogram of the number of `step/start` events in the stored log after a kill.
    steps: [u64; 8],
    /// Stored-event counts seen (min, max).
    events_min: usize,
    events_max: usize,
}

/// Loads (`commit`: `load`, which writes the repair; else `inspect`, in memory only), checks and
/// reloads one killed session; returns the (repaired) log.
fn check_killed(
    store: &dyn SessionPersistence,
    reopen: &dyn Fn() -> Arc<dyn SessionPersistence>,
    id: &str,
    commit: bool,
    what: &str,
    tally: &mut Tally,
) -> LoadedSession {
    let loaded = if commit {
        store.load(id)
    } else {
        store.inspect(id)
    }
    .unwrap_or_else(|e| panic!("{what}: load failed: {} {e}", e.code()));
    assert_eq!(
        invariant_violations(&loaded.events),
        Vec::<String>::new(),
        "{what}: invariants"
    );
    for (i, e) in loaded.events.iter().enumerate() {
        assert_eq!(e.seq, i as u64, "{what}: seqs not contiguous");
    }
    assert_calls_paired(&loaded.events, what);
    assert_no_orphan_in_history(&loaded, id, what);
    if loaded.repair.torn_tail_dropped {
        tally.torn_tail += 1;
    }
    if loaded.repair.closers > 0 {
        tally.closed_by_repair += 1;
    }
    if loaded.repair == RepairReport::default() {
        tally.clean += 1;
    }
    let steps = loaded
        .events
        .iter()
        .filter(|e| matches!(e.data, EventData::StepStart(_)))
        .count();
    tally.steps[steps.min(7)] += 1;
    tally.events_min = tally.events_min.min(loaded.events.len());
    tally.events_max = tally.events_max.max(loaded.events.len());
    if !commit {
        // Nothing was written: a fresh seam computes the same repair again.
        let again = reopen().inspect(id).unwrap();
        assert_eq!(again, loaded, "{what}: inspect not deterministic");
        return loaded;
    }
    store.release(id);
    // Idempotent: a fresh seam sees the repaired log, unchanged, with nothing left to repair.
    let again = reopen()
        .load(id)
        .unwrap_or_else(|e| panic!("{what}: second load failed: {} {e}", e.code()));
    assert_eq!(
        again.repair,
        RepairReport::default(),
        "{what}: second load repaired again"
    );
    assert_eq!(again.events, loaded.events, "{what}: repair not idempotent");
    assert_eq!(again.header, loaded.header, "{what}");
    loaded
}

/// `dsh sessions verify --json` on the crashed, not yet repaired log agrees with `inspect`:
/// no errors, the same stored event count, torn-tail flag and closer types; exit 0 iff no repair.
fn check_verify(env: &Env, id: &str, inspected: &LoadedSession, what: &str) {
    let log = dsh_persistence_jsonl::log_path(&env.sessions_dir(), env.repo.to_str(), id).unwrap();
    let mut cmd = env.dsh_plain("http://127.0.0.1:9");
    cmd.args(["sessions", "verify", "--json"]).arg(&log);
    let out = run(cmd);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: verify printed no JSON ({e}): {out:?}"));
    let closers = inspected.repair.closers;
    let stored = &inspected.events[..inspected.events.len() - closers];
    let closer_types: Vec<Value> = inspected.events[stored.len()..]
        .iter()
        .map(|e| e.to_value()["type"].clone())
        .collect();
    assert_eq!(report["errors"], json!([]), "{what}: verify found errors");
    assert_eq!(report["events"], stored.len(), "{what}: verify {report}");
    assert_eq!(
        report["repair"],
        json!({"tornTail": inspected.repair.torn_tail_dropped, "closers": closer_types}),
        "{what}: verify and inspect disagree on the repair"
    );
    let clean = inspected.repair == RepairReport::default();
    assert_eq!(report["ok"], clean, "{what}");
    assert_eq!(out.status.code(), Some(if clean { 0 } else { 1 }), "{what}");
}

/// `dsh exec --resume ID "continue"` on the repaired session: exit 0, a balanced provider
/// request carrying the stored history, and a clean balanced log afterwards.
fn check_resume(
    rt: &tokio::runtime::Runtime,
    env: &Env,
    extra: &[&str],
    reopen: &dyn Fn() -> Arc<dyn SessionPersistence>,
    id: &str,
    before: &LoadedSession,
    what: &str,
) {
    let server = start_replay(rt, &json!([{"text": "Resumed and finished."}]));
    let out = run(env.dsh(&server.base_url(), extra, &["--resume", id, "continue"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: resume failed: stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let last: Value = serde_json::from_slice(
        out.stdout
            .split(|b| *b == b'\n')
            .rfind(|l| !l.is_empty())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["type"], "result", "{what}");
    assert_eq!(last["reason"], "completed", "{what}");
    assert_eq!(last["sessionId"], id, "{what}");
    assert_eq!(last["text"], "Resumed and finished.", "{what}");
    let reqs = chat_requests(&server);
    assert_eq!(reqs.len(), 1, "{what}");
    let sent_calls = assert_request_balanced(&reqs[0], what);
    let stored_calls = before
        .events
        .iter()
        .filter(|e| matches!(e.data, EventData::ToolCall(_)))
        .count();
    assert_eq!(
        sent_calls, stored_calls,
        "{what}: request lost stored tool calls"
    );
    let msgs = reqs[0].body["messages"].as_array().unwrap();
    assert!(
        msgs.iter()
            .any(|m| m["role"] == "user" && m["content"] == "continue"),
        "{what}: the new prompt is missing"
    );
    // The resumed log: the old prefix unchanged, then a clean completed turn.
    let after = reopen().inspect(id).unwrap();
    assert_eq!(
        after.repair,
        RepairReport::default(),
        "{what}: resumed log needs repair"
    );
    assert_eq!(
        after.events[..before.events.len()],
        before.events[..],
        "{what}"
    );
    assert_eq!(
        invariant_violations(&after.events),
        Vec::<String>::new(),
        "{what}"
    );
    assert_calls_paired(&after.events, what);
    assert_no_orphan_in_history(&after, id, what);
    let v = after.events.last().unwrap().to_value();
    assert_eq!(v["type"], "turn/end", "{what}");
    assert_eq!(v["data"]["reason"]["kind"], "completed", "{what}");
}

/// What one killed run left behind, as seen from outside the process.
struct Killed {
    /// The run finished on its own before the kill point.
    finished: bool,
    /// Every `--json` line it streamed.
    lines: Vec<Value>,
}

/// Spawns one scripted run and SIGKILLs it per `(k, extra_ms)`.
fn run_and_kill(
    env: &Env,
    url: &str,
    extra: &[&str],
    args: &[&str],
    k: u64,
    extra_ms: u64,
) -> Killed {
    let running = spawn(env.dsh(url, extra, args));
    let pid = running.child.id();
    let deadline = Instant::now() + HANG_LIMIT;
    let mut seen: Vec<String> = Vec::new();
    let mut finished = false;
    if k == 0 {
        std::thread::sleep(Duration::from_millis(extra_ms * 6));
    } else {
        while (seen.len() as u64) < k {
            match running
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    let done = line.contains("\"type\":\"result\"");
                    seen.push(line);
                    if done {
                        finished = true;
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    finished = true;
                    break;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    kill9(pid);
                    panic!(
                        "dsh produced only {} lines within {HANG_LIMIT:?}",
                        seen.len()
                    );
                }
            }
        }
        std::thread::sleep(Duration::from_millis(extra_ms));
    }
    kill9(pid);
    let (status, rest, _stderr) = running.finish();
    seen.extend(rest);
    // A line cut by the kill is not JSON; every complete one must be.
    let complete = seen.len().saturating_sub(1);
    let lines: Vec<Value> = seen
        .iter()
        .enumerate()
        .filter_map(|(i, l)| match serde_json::from_str(l) {
            Ok(v) => Some(v),
            Err(e) => {
                assert_eq!(i, complete, "streamed line {i} is not JSON ({e}): {l}");
                None
            }
        })
        .collect();
    Killed {
        finished: finished || status.code().is_some(),
        lines,
    }
}

/// A second crash on top of a repaired session: `dsh exec --resume ID "continue"` runs a bash
/// step then a text answer and is SIGKILLed after `k` streamed lines (+`extra_ms`). The stored
/// log must keep the first repair as its prefix and pass every check again; returns it.
#[allow(clippy::too_many_arguments)]
fn check_double_crash(
    rt: &tokio::runtime::Runtime,
    env: &Env,
    reopen: &dyn Fn() -> Arc<dyn SessionPersistence>,
    id: &str,
    before: &LoadedSession,
    k: u64,
    extra_ms: u64,
    tally: &mut Tally,
    what: &str,
) -> LoadedSession {
    let server = start_replay(
        rt,
        &json!([
            {"tool_calls": [["bash", {"command": RESUMED_BASH, "description": "Resume step"}]],
             "delay_ms": FRAME_DELAY_MS},
            {"text": "Resumed once.", "delay_ms": FRAME_DELAY_MS},
        ]),
    );
    let killed = run_and_kill(
        env,
        &server.base_url(),
        &[],
        &["--resume", id, "continue"],
        k,
        extra_ms,
    );
    let store = reopen();
    let loaded = check_killed(store.as_ref(), reopen, id, true, what, tally);
    drop(store);
    assert_eq!(
        loaded.events[..before.events.len()],
        before.events[..],
        "{what}: the second crash changed the first repair"
    );
    check_crash_consistency(env, &loaded, &killed, chat_requests(&server).len(), what);
    loaded
}

/// Crash consistency of one killed run against its stored prefix (`loaded` minus the closers):
/// - the stored events and the streamed event lines agree wherever both exist (same seq);
/// - every side effect a tool produced has a durable `tool/call` (the body only starts after
///   its call is flushed): `notes.txt` ⇒ the `write` call, `ran.log` line N ⇒ bash step N's call;
/// - every request the provider received has a durable `step/start` before it (the request opens
///   only after the buffered events are flushed).
fn check_crash_consistency(
    env: &Env,
    loaded: &LoadedSession,
    killed: &Killed,
    requests: usize,
    what: &str,
) {
    let stored = &loaded.events[..loaded.events.len() - loaded.repair.closers];
    for line in &killed.lines {
        if line["type"] == "result" {
            continue;
        }
        let seq = line["seq"].as_u64().unwrap() as usize;
        if let Some(e) = stored.get(seq) {
            assert_eq!(
                &e.to_value(),
                line,
                "{what}: stored event {seq} differs from the streamed one"
            );
        }
    }
    let calls: Vec<Value> = stored
        .iter()
        .filter(|e| matches!(e.data, EventData::ToolCall(_)))
        .map(|e| e.to_value()["data"].clone())
        .collect();
    if env.repo.join("notes.txt").exists() {
        assert!(
            calls.iter().any(|c| c["name"] == "write"),
            "{what}: notes.txt was written but the write call is not durable: {calls:?}"
        );
    }
    let ran = std::fs::read_to_string(env.repo.join("ran.log")).unwrap_or_default();
    for step in ran.lines() {
        let command = if step == "resumed" {
            RESUMED_BASH.to_owned()
        } else {
            format!("sleep 0.05; echo {step} >> ran.log; echo {step}")
        };
        assert!(
            calls.iter().any(|c| c["name"] == "bash"
                && serde_json::from_str::<Value>(c["arguments"].as_str().unwrap()).unwrap()
                    ["command"]
                    == command.as_str()),
            "{what}: bash `{step}` ran but its call is not durable: {calls:?}"
        );
    }
    let steps = stored
        .iter()
        .filter(|e| matches!(e.data, EventData::StepStart(_)))
        .count();
    assert!(
        steps >= requests,
        "{what}: the provider got {requests} requests but only {steps} step/start are durable"
    );
}

// ---------------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------------

#[test]
fn loop_torture_kill9_at_random_points_leaves_resumable_sessions() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    dsh_bin(); // build first, outside the timings
    let started = Instant::now();

    // Calibration: the script completes unkilled; its event count bounds the kill points.
    let env = Env::new();
    let server = start_replay(&rt, &script(&env));
    let t0 = Instant::now();
    let out = run(env.dsh(&server.base_url(), &[], &["do the six steps"]));
    let full_run = t0.elapsed();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (result, events) = lines.split_last().unwrap();
    assert_eq!(result["reason"], "completed");
    assert_eq!(result["text"], FINAL_TEXT);
    let tool_names: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| e["data"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tool_names,
        ["bash", "bash", "write", "read", "grep", "glob", "bash"]
    );
    assert_eq!(
        std::fs::read_to_string(env.repo.join("notes.txt")).unwrap(),
        "alpha\nbeta needle\ngamma\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.repo.join("ran.log")).unwrap(),
        "step 1\nstep 2\nstep 6\n"
    );
    assert_eq!(chat_requests(&server).len(), 7);
    let total_lines = events.len() as u64;
    let id = result["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(env.jsonl_ids(), vec![id.clone()]);
    let full = env.jsonl_store().load(&id).unwrap();
    assert_eq!(full.repair, RepairReport::default());
    assert_eq!(assert_calls_paired(&full.events, "calibration"), 7);
    assert_no_orphan_in_history(&full, &id, "calibration");
    drop(env);

    let seed = std::env::var("DSH_TORTURE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x9E37_79B9_7F4A_7C15);
    let mut rng = Lcg(seed);
    let mut tally = Tally {
        events_min: usize::MAX,
        ..Tally::default()
    };
    let mut resume_due = false;
    let n = iterations();
    let every = resume_every();
    for i in 0..n {
        let k = rng.next(total_lines + 1);
        let extra_ms = rng.next(25);
        // Every 4th run writes every event at once (no batching window): more, smaller appends.
        let unbatched = i % 4 == 3;
        let extra: &[&str] = if unbatched {
            &["-c", "persistence.write_batch_ms=0"]
        } else {
            &[]
        };
        let what = format!("iteration {i} (kill after line {k} + {extra_ms} ms{extra:?})");
        resume_due |= i % every == 0;
        let env = Env::new();
        let server = start_replay(&rt, &script(&env));
        let killed = run_and_kill(&env, &server.base_url(), extra, TASK, k, extra_ms);
        if killed.finished {
            tally.completed_before_kill += 1;
        }
        let ids = env.jsonl_ids();
        assert!(ids.len() <= 1, "{what}: {ids:?}");
        let Some(id) = ids.first() else {
            tally.no_session += 1;
            continue;
        };
        let reopen = || env.jsonl_store();
        if i % 5 == 2 {
            let inspected = env.jsonl_store().inspect(id).unwrap();
            check_verify(&env, id, &inspected, &what);
            tally.verified += 1;
        }
        let store = env.jsonl_store();
        // Every other resumed block of ten resumes the crashed log as it is (dsh repairs it
        // itself); the others resume the log `Persistence::load` repaired.
        let raw = resume_due && (i / 10) % 2 == 1 && i % 10 != 5;
        let loaded = check_killed(store.as_ref(), &reopen, id, !raw, &what, &mut tally);
        drop(store);
        check_crash_consistency(&env, &loaded, &killed, chat_requests(&server).len(), &what);
        if raw {
            let what = format!("{what}, resumed unrepaired");
            check_resume(&rt, &env, &[], &reopen, id, &loaded, &what);
            tally.raw_resumes += 1;
            tally.resumes += 1;
            resume_due = false;
        } else if i % 10 == 5 {
            // Crash the resumed run too (k: 0..=40 lines of its ~45), then resume to the end.
            let k2 = rng.next(41);
            let ms2 = rng.next(25);
            let what = format!("{what}, second kill after line {k2} + {ms2} ms");
            let twice =
                check_double_crash(&rt, &env, &reopen, id, &loaded, k2, ms2, &mut tally, &what);
            check_resume(&rt, &env, &[], &reopen, id, &twice, &what);
            tally.double_crashes += 1;
            tally.resumes += 1;
        } else if resume_due {
            check_resume(&rt, &env, &[], &reopen, id, &loaded, &what);
            tally.resumes += 1;
            resume_due = false;
        }
    }

    // SQLite: the first iteration is killed mid-session (half-way through the event lines), further
    // ones (`DSH_TORTURE_SQLITE_ITERATIONS`) at random points; each is resumed to the end.
    let sqlite = ["-c", "persistence.backend=sqlite"];
    let sqlite_n = std::env::var("DSH_TORTURE_SQLITE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1u64);
    for j in 0..sqlite_n {
        let (k, extra_ms) = if j == 0 {
            (total_lines / 2, 7)
        } else {
            (rng.next(total_lines) + 1, rng.next(25))
        };
        let env = Env::new();
        let server = start_replay(&rt, &script(&env));
        let killed = run_and_kill(&env, &server.base_url(), &sqlite, TASK, k, extra_ms);
        let what = format!("sqlite iteration {j} (kill after line {k} + {extra_ms} ms)");
        let reopen = || env.sqlite_store();
        let ids: Vec<String> = env
            .sqlite_store()
            .list()
            .unwrap()
            .into_iter()
            .map(|h| h.id)
            .collect();
        assert!(
            env.jsonl_ids().is_empty(),
            "{what}: the sqlite run wrote JSONL"
        );
        assert!(ids.len() <= 1, "{what}: {ids:?}");
        let Some(id) = ids.first() else {
            assert_ne!(j, 0, "{what}: nothing stored half-way through the session");
            tally.no_session += 1;
            continue;
        };
        let store = env.sqlite_store();
        let loaded = check_killed(store.as_ref(), &reopen, id, true, &what, &mut tally);
        drop(store);
        check_crash_consistency(&env, &loaded, &killed, chat_requests(&server).len(), &what);
        check_resume(&rt, &env, &sqlite, &reopen, id, &loaded, &what);
        tally.resumes += 1;
    }

    eprintln!(
        "loop torture: {n} jsonl iterations + {sqlite_n} sqlite in {:.1} s (full unkilled run {} ms, {} event lines); {tally:?}",
        started.elapsed().as_secs_f64(),
        full_run.as_millis(),
        total_lines
    );
}

/// kill -9 while `dsh sessions compact` waits for the summarisation answer: the session loads
/// and passes the checks above, every event stored before the compaction is still there, the
/// orphan `compaction/start` (stale once the session is resumed) does not block the next
/// `dsh sessions compact`, and the resumed session verifies clean.
#[test]
fn torture_kill9_during_the_summarisation_request() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    dsh_bin();
    let env = Env::new();
    let bash = |n: u32| {
        json!({"tool_calls": [["bash", {"command": format!("seq 1 400; echo step {n}"),
                                        "description": format!("Step {n}")}]]})
    };
    let summary = "## Primary Request and Intent\n- count\n## Current Work\n- counting";
    let server = start_replay(
        &rt,
        &json!([
            bash(1),
            bash(2),
            bash(3),
            {"text": FINAL_TEXT},
            // The summarisation request dsh is killed in: one frame every 2 s.
            {"text": summary, "delay_ms": 2000},
            {"text": summary},
        ]),
    );
    let url = server.base_url();
    let out = run(env.dsh(&url, &[], &["count three times"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let [id] = &env.jsonl_ids()[..] else {
        panic!("one session expected")
    };
    let before = env.jsonl_store().load(id).unwrap().events;
    env.jsonl_store().release(id);

    let mut compact = env.dsh_plain(&url);
    compact.args(["sessions", "compact", id]);
    let running = spawn(compact);
    let deadline = Instant::now() + HANG_LIMIT;
    while chat_requests(&server).len() < 5 {
        assert!(Instant::now() < deadline, "no summarisation request");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The request is in flight (its first frame is 2 s away); let the batched log write land.
    std::thread::sleep(Duration::from_millis(300));
    kill9(running.child.id());
    let (status, _, _) = running.finish();
    assert_eq!(status.code(), None, "dsh was not killed");

    let mut tally = Tally::default();
    let store = env.jsonl_store();
    let loaded = check_killed(
        &*store,
        &|| env.jsonl_store(),
        id,
        true,
        "killed during summarisation",
        &mut tally,
    );
    drop(store);
    // No event lost: the log before the compaction is a prefix of the loaded one.
    assert_eq!(&loaded.events[..before.len()], &before[..]);
    let kinds: Vec<&str> = loaded.events[before.len()..]
        .iter()
        .map(|e| e.kind.as_str())
        .collect();
    assert!(kinds.contains(&"compaction/start"), "{kinds:?}");
    assert!(!kinds.contains(&"compaction/end"), "{kinds:?}");

    let out = run({
        let mut c = env.dsh_plain(&url);
        c.args(["sessions", "compact", id]);
        c
    });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("compacted context: "), "{stdout}");
    assert_eq!(chat_requests(&server).len(), 6);
    let after = env.jsonl_store().load(id).unwrap().events;
    assert_eq!(invariant_violations(&after), Vec::<String>::new());
    assert_eq!(&after[..loaded.events.len()], &loaded.events[..]);
    let ends = after
        .iter()
        .filter(|e| e.kind.as_str() == "compaction/end")
        .count();
    assert_eq!(ends, 1);
    let verify = run({
        let mut c = env.dsh_plain(&url);
        c.args(["sessions", "verify", id]);
        c
    });
    assert_eq!(verify.status.code(), Some(0), "{verify:?}");
}
