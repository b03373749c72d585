//! Compaction through the built `dsh` binary (issue 14, user side), against a content-aware
//! loopback model: the replay script format serves responses in order, but where a
//! summarisation request lands depends on the meter, so this file's server answers by what a
//! request is (the fixed checkpoint instruction as the last message ⇒ a summary; otherwise the
//! next step of the scripted session) and synthesises the same DeepSeek-style streams as the
//! replay provider (`dsh_test_support::synthesize_sse`).
//!
//! What is proven:
//! - a 60-step session whose `bash` results are ~3.5 KB each, with `[models."deepseek-v4-flash"]
//!   context_window = 16000` in the project's `.dsh/settings.toml`: at least three automatic
//!   compactions, one stderr line each; every request under the window by the token meter's
//!   estimate; no request carries a tool call without its result; the stored log passes
//!   `check_invariants` and `dsh sessions verify`; `--resume` sends the summary and the tail,
//!   not the shadowed history; the `--json` result line carries `contextTokens`/`contextWindow`;
//! - the provider's context-length error (HTTP 400, DeepSeek's and OpenAI's wording): dsh
//!   compacts and retries exactly once; a second overflow ends the turn (exit 1), no loop;
//! - `dsh sessions compact ID` on an idle session (before → after), with nothing to compact,
//!   and `BUSY` while another process holds the session;
//! - a model whose window is unknown: automatic compaction is off, said once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Sandbox, code, json_lines, run, text};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_persistence::SessionPersistence;
use dsh_persistence_jsonl::{JsonlConfig, jsonl_persistence};
use dsh_test_support::{ScriptResponse, synthesize_sse};
use serde_json::{Value, json};

const API_KEY: &str = "sk-e2e-compaction";
const HANG_LIMIT: Duration = Duration::from_secs(120);
const WINDOW: u64 = 16_000;
/// The start of the fixed checkpoint instruction (the summarisation request's last message).
const INSTRUCTION: &str = "You are now acting as a context compaction engine.";
const SUMMARY: &str = "## Primary Request and Intent\n- print the big files one by one\n\
## Key Technical Concepts\n- (none)\n## Files and Code\n- big*.txt\n## Errors and Fixes\n- (none)\n\
## Pending Jobs\n- the remaining files\n## Current Work\n- printing files\n## Next Step\n- the next file\n\
## Critical Context\n- (none)";

/// What the model answers to one main (non-summary) request, by its index from 0.
type Step = dyn Fn(usize) -> ScriptResponse + Send + Sync;

/// The loopback model: answers summarisation requests with [`SUMMARY`] (or `summary`), other
/// chat requests with `step(n)`; records every chat request body.
struct Model {
    url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
    /// While set, a summarisation request is recorded and never answered.
    hang_summaries: Arc<std::sync::atomic::AtomicBool>,
}

impl Model {
    fn start(step: Box<Step>, summary: Option<String>) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
        let b = bodies.clone();
        let step: Arc<Step> = Arc::from(step);
        let main = Arc::new(Mutex::new(0usize));
        let hang_summaries = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hang = hang_summaries.clone();
        std::thread::spawn(move || {
            for (number, s) in l.incoming().enumerate() {
                let Ok(s) = s else { return };
                let (b, step, main, summary, hang) = (
                    b.clone(),
                    step.clone(),
                    main.clone(),
                    summary.clone(),
                    hang.clone(),
                );
                std::thread::spawn(move || serve(s, number, &b, &*step, &main, summary, &hang));
            }
        });
        Self {
            url,
            bodies,
            hang_summaries,
        }
    }

    fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }
}

fn is_summary_request(body: &Value) -> bool {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .is_some_and(|c| c.starts_with(INSTRUCTION))
}

fn serve(
    s: std::net::TcpStream,
    number: usize,
    bodies: &Mutex<Vec<Value>>,
    step: &Step,
    main: &Mutex<usize>,
    summary: Option<String>,
    hang: &std::sync::atomic::AtomicBool,
) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    loop {
        let mut request_line = String::new();
        if r.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        if !request_line.contains("/chat/completions") {
            let b = r#"{"object":"list","data":[{"id":"deepseek-v4-flash"}]}"#;
            let _ = write!(
                w,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{b}",
                b.len()
            );
            continue;
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        bodies.lock().unwrap().push(body.clone());
        if is_summary_request(&body) && hang.load(std::sync::atomic::Ordering::SeqCst) {
            // Never answered: the client is killed while it waits.
            std::thread::sleep(Duration::from_secs(600));
            return;
        }
        let resp = if is_summary_request(&body) {
            ScriptResponse::text(summary.clone().unwrap_or_else(|| SUMMARY.to_owned()))
        } else {
            let mut n = main.lock().unwrap();
            let resp = step(*n);
            *n += 1;
            resp
        };
        let (status, ctype, payload) = match &resp.body {
            Some(b) => (
                resp.status.unwrap_or(200),
                "application/json",
                b.to_string(),
            ),
            None => (200, "text/event-stream", synthesize_sse(&resp, number)),
        };
        let _ = write!(
            w,
            "HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n\r\n{payload}",
            payload.len()
        );
        let _ = w.flush();
    }
}

/// A `bash` call printing `bigN.txt`.
fn cat(n: usize) -> ScriptResponse {
    ScriptResponse {
        tool_calls: Some(vec![(
            "bash".to_owned(),
            json!({"command": format!("cat big{n}.txt"), "description": "print a file"}),
        )]),
        ..ScriptResponse::default()
    }
}

/// ~3.5 KB of distinct text for file `n`.
fn big_text(n: usize) -> String {
    (0..50)
        .map(|i| {
            format!(
                "file {n:02} line {i:02}: the quick brown fox jumps over the lazy dog {n}-{i}\n"
            )
        })
        .collect()
}

struct Env(Sandbox);

impl Env {
    fn new(settings: &str, files: usize) -> Self {
        let sb = Sandbox::new();
        std::fs::create_dir_all(sb.repo.join(".dsh")).unwrap();
        std::fs::write(sb.repo.join(".dsh/settings.toml"), settings).unwrap();
        for n in 0..files {
            std::fs::write(sb.repo.join(format!("big{n}.txt")), big_text(n)).unwrap();
        }
        Self(sb)
    }

    fn dsh(&self, url: &str, args: &[&str]) -> std::process::Output {
        run(self.0.dsh(url, API_KEY, args), HANG_LIMIT)
    }

    fn events(&self, id: &str) -> Vec<dsh_session::SessionEvent> {
        jsonl_persistence(JsonlConfig {
            root: self.0.home.join("sessions"),
            ..JsonlConfig::default()
        })
        .inspect(id)
        .unwrap()
        .events
    }
}

fn window_settings() -> String {
    format!("[models.\"deepseek-v4-flash\"]\ncontext_window = {WINDOW}\n")
}

/// The token meter's estimate of one wire request: system prompt, tool schemas, and every
/// message's text and tool-call arguments.
fn estimate(body: &Value) -> u64 {
    use dsh_token_meter::estimate_text;
    let mut t = dsh_token_meter::estimate_tools(body.get("tools"));
    for m in body["messages"].as_array().unwrap() {
        if let Some(c) = m["content"].as_str() {
            t += estimate_text(c);
        }
        if let Some(r) = m["reasoning_content"].as_str() {
            t += estimate_text(r);
        }
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            t += estimate_text(c["function"]["arguments"].as_str().unwrap_or_default());
            t += estimate_text(c["function"]["name"].as_str().unwrap_or_default());
        }
    }
    t
}

/// Every assistant tool call of `body` has a later `tool` message with its id, and every
/// `tool` message answers an earlier call.
fn assert_paired(body: &Value, what: &str) {
    let mut open: Vec<String> = Vec::new();
    for m in body["messages"].as_array().unwrap() {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            open.push(c["id"].as_str().unwrap().to_owned());
        }
        if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().unwrap();
            let at = open.iter().position(|o| o == id);
            assert!(at.is_some(), "{what}: tool result {id} without its call");
            open.remove(at.unwrap());
        }
    }
    assert!(
        open.is_empty(),
        "{what}: tool calls without results: {open:?}"
    );
}

fn compaction_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("  ⇣ compacted context: "))
        .collect()
}

#[test]
fn a_sixty_step_session_outlives_a_16k_window() {
    const STEPS: usize = 60;
    let env = Env::new(&window_settings(), STEPS);
    let model = Model::start(
        Box::new(|n| {
            if n + 1 < STEPS {
                cat(n)
            } else {
                ScriptResponse::text("all files printed")
            }
        }),
        None,
    );
    let out = env.dsh(&model.url, &["exec", "--json", "print every big file"]);
    let stderr = text(&out.stderr);
    assert_eq!(code(out.status), 0, "{stderr}");
    let lines = json_lines(&out.stdout);
    let result = lines.last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["text"], "all files printed");
    assert_eq!(result["contextWindow"], WINDOW);
    let ctx_tokens = result["contextTokens"].as_u64().unwrap();
    assert!(ctx_tokens > 0 && ctx_tokens < WINDOW, "{result}");
    let id = result["sessionId"].as_str().unwrap().to_owned();

    let bodies = model.bodies();
    let summaries = bodies.iter().filter(|b| is_summary_request(b)).count();
    let main: Vec<&Value> = bodies.iter().filter(|b| !is_summary_request(b)).collect();
    assert_eq!(main.len(), STEPS, "one request per step");
    assert!(summaries >= 3, "only {summaries} compactions");
    assert_eq!(compaction_lines(&stderr).len(), summaries, "{stderr}");
    for (i, b) in bodies.iter().enumerate() {
        let tokens = estimate(b);
        assert!(tokens < WINDOW, "request {i}: {tokens} tokens");
        assert_paired(b, &format!("request {i}"));
    }

    // The log: invariants, and `dsh sessions verify`.
    let events = env.events(&id);
    let ends = events
        .iter()
        .filter(|e| e.kind.as_str() == "compaction/end")
        .count();
    assert_eq!(ends, summaries);
    // The loop records the overridden window.
    let windows: Vec<Value> = events
        .iter()
        .filter(|e| e.kind.as_str() == "request/context")
        .map(|e| e.data.to_value()["contextWindow"].clone())
        .collect();
    assert_eq!(windows, [json!(WINDOW)]);
    let arcs: Vec<_> = events.into_iter().map(Arc::new).collect();
    assert!(dsh_session::check_invariants(&arcs, None).is_empty());
    let verify = env.dsh(&model.url, &["sessions", "verify", &id]);
    assert_eq!(code(verify.status), 0, "{}", text(&verify.stdout));

    // --resume sends the summary and the tail, not the shadowed history.
    let out = env.dsh(&model.url, &["exec", "--resume", &id, "one more thing"]);
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    let bodies = model.bodies();
    let resumed = bodies.last().unwrap().to_string();
    assert!(
        resumed.contains("<compacted-summary>"),
        "no checkpoint sent"
    );
    assert!(
        !resumed.contains("file 00 line 00"),
        "shadowed history sent"
    );
    assert!(resumed.contains(&format!("file {:02} line 00", STEPS - 2)));
    assert!(resumed.contains("one more thing"));
}

/// The HTTP 400 a provider sends when the request is over its window.
fn overflow(openai: bool) -> ScriptResponse {
    let message = if openai {
        "This model's maximum context length is 16000 tokens. However, your messages resulted in 17000 tokens. Please reduce the length of the messages."
    } else {
        "This model's maximum context length is 16000 tokens. However, you requested 17000 tokens (17000 in the messages, 0 in the completion). Please reduce the length of the messages or completion."
    };
    ScriptResponse::status(
        400,
        json!({"error": {"message": message, "type": "invalid_request_error",
            "code": if openai { json!("context_length_exceeded") } else { Value::Null }}}),
    )
}

/// Step `n` of the overflow scenarios: three file prints, then `answer(n)`.
fn overflow_env(answer: fn(usize) -> ScriptResponse) -> (Env, Model) {
    // No window override: only the provider's error triggers compaction.
    let env = Env::new("", 3);
    let model = Model::start(
        Box::new(move |n| if n < 3 { cat(n) } else { answer(n) }),
        None,
    );
    (env, model)
}

#[test]
fn a_context_length_error_compacts_and_retries_exactly_once() {
    for openai in [false, true] {
        let (env, model) = overflow_env(if openai {
            |n| {
                if n == 3 {
                    overflow(true)
                } else {
                    ScriptResponse::text("done after compacting")
                }
            }
        } else {
            |n| {
                if n == 3 {
                    overflow(false)
                } else {
                    ScriptResponse::text("done after compacting")
                }
            }
        });
        let out = env.dsh(&model.url, &["exec", "print the files"]);
        let stderr = text(&out.stderr);
        assert_eq!(code(out.status), 0, "openai={openai}: {stderr}");
        assert_eq!(text(&out.stdout), "done after compacting\n");
        let bodies = model.bodies();
        let kinds: Vec<bool> = bodies.iter().map(is_summary_request).collect();
        // 3 steps, the refused request, one summary, one retry.
        assert_eq!(
            kinds,
            [false, false, false, false, true, false],
            "openai={openai}"
        );
        assert_eq!(compaction_lines(&stderr).len(), 1, "{stderr}");
        let retried = bodies[5].to_string();
        assert!(retried.contains("<compacted-summary>"));
    }
}

#[test]
fn a_second_context_length_error_ends_the_turn() {
    let (env, model) = overflow_env(|_| overflow(false));
    let out = env.dsh(&model.url, &["exec", "print the files"]);
    let stderr = text(&out.stderr);
    assert_eq!(code(out.status), 1, "{stderr}");
    let rest = common::e2e::before_end_line(&stderr);
    let last = rest.lines().last().unwrap();
    assert!(
        last.starts_with("error: ") && last.contains("maximum context length"),
        "{stderr}"
    );
    let kinds: Vec<bool> = model.bodies().iter().map(is_summary_request).collect();
    // 3 steps, refused, summary, retry refused again: the turn ends (no second compaction).
    assert_eq!(kinds, [false, false, false, false, true, false]);
}

#[test]
fn sessions_compact_an_idle_session_and_report_nothing_to_compact() {
    let env = Env::new("", 4);
    let model = Model::start(
        Box::new(|n| {
            if n < 4 {
                cat(n)
            } else {
                ScriptResponse::text("printed")
            }
        }),
        None,
    );
    let out = env.dsh(&model.url, &["exec", "--json", "print the files"]);
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    let result = json_lines(&out.stdout).pop().unwrap();
    // deepseek-v4-flash: the built-in window.
    assert_eq!(result["contextWindow"], 1_048_576);
    let id = result["sessionId"].as_str().unwrap().to_owned();

    let out = env.dsh(&model.url, &["sessions", "compact", &id]);
    let stdout = text(&out.stdout);
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    let line = stdout.trim_end();
    assert!(
        line.starts_with("compacted context: ") && line.ends_with(" history items)"),
        "{stdout}"
    );
    assert_eq!(
        model
            .bodies()
            .iter()
            .filter(|b| is_summary_request(b))
            .count(),
        1
    );
    let verify = env.dsh(&model.url, &["sessions", "verify", &id]);
    assert_eq!(code(verify.status), 0, "{}", text(&verify.stdout));

    // Right after, only the checkpoint and the newest unit are left: nothing to compact.
    let out = env.dsh(&model.url, &["sessions", "compact", &id]);
    assert_eq!(code(out.status), 1);
    assert_eq!(text(&out.stderr), "No compactable history yet.\n");
    assert_eq!(text(&out.stdout), "");

    let out = env.dsh(&model.url, &["sessions", "compact", "no-such-session"]);
    assert_eq!(code(out.status), 2, "{}", text(&out.stderr));
}

/// The id of the first stored session under `dir` (the header line of a `session.jsonl`).
fn session_id_in(dir: &std::path::Path) -> Option<String> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(id) = session_id_in(&p) {
                return Some(id);
            }
        } else if p.file_name().is_some_and(|n| n == "session.jsonl") {
            let first = std::fs::read_to_string(&p).ok()?;
            let header: Value = serde_json::from_str(first.lines().next()?).ok()?;
            return header["id"].as_str().map(str::to_owned);
        }
    }
    None
}

#[test]
fn sessions_compact_is_busy_while_another_process_holds_the_session() {
    let env = Env::new("", 1);
    // The first step's bash sleeps, so the session is held while `sessions compact` runs.
    let model = Model::start(
        Box::new(|n| match n {
            0 => ScriptResponse {
                tool_calls: Some(vec![(
                    "bash".to_owned(),
                    json!({"command": "sleep 3", "description": "wait"}),
                )]),
                ..ScriptResponse::default()
            },
            _ => ScriptResponse::text("slept"),
        }),
        None,
    );
    let mut cmd = env.0.dsh(&model.url, API_KEY, &["exec", "--json", "wait"]);
    let child = cmd.spawn().unwrap();
    // Wait for the session to exist.
    let sessions = env.0.home.join("sessions");
    let mut id = None;
    for _ in 0..400 {
        id = session_id_in(&sessions);
        if id.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let id = id.expect("no session was created");
    let out = env.dsh(&model.url, &["sessions", "compact", &id]);
    let stderr = text(&out.stderr);
    assert_eq!(code(out.status), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: compaction is busy: another process holds session ")
            && stderr.trim_end().ends_with("(BUSY)"),
        "{stderr}"
    );
    let done = child.wait_with_output().unwrap();
    assert_eq!(code(done.status), 0);
}

#[test]
fn an_unknown_window_turns_automatic_compaction_off_and_says_so_once() {
    let env = Env::new("", 0);
    let model = Model::start(Box::new(|_| ScriptResponse::text("hi")), None);
    // A route whose model no catalog knows (base_url may not come from a project file).
    let base = format!("providers.local.base_url=\"{}\"", model.url);
    let out = env.dsh(
        &model.url,
        &[
            "-c",
            &base,
            "-c",
            "providers.local.models=[\"tiny-local\"]",
            "exec",
            "--json",
            "--provider",
            "local",
            "-m",
            "tiny-local",
            "hello",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(code(out.status), 0, "{stderr}");
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("note: automatic compaction is off"))
        .collect();
    assert_eq!(
        notes,
        [
            "note: automatic compaction is off: the context window of local/tiny-local is unknown (set [models.\"tiny-local\"] context_window in settings)"
        ]
    );
    let result = json_lines(&out.stdout).pop().unwrap();
    assert_eq!(result["contextWindow"], Value::Null);
}

#[test]
fn a_summary_larger_than_its_source_is_rejected_and_the_turn_goes_on() {
    const STEPS: usize = 14;
    let env = Env::new(&window_settings(), STEPS);
    // Every summary the model writes is ~40 KB: never smaller than what it would replace.
    let model = Model::start(
        Box::new(|n| {
            if n + 1 < STEPS {
                cat(n)
            } else {
                ScriptResponse::text("printed anyway")
            }
        }),
        Some("## Primary Request and Intent\n".to_owned() + &"- a very long bullet\n".repeat(2000)),
    );
    let out = env.dsh(&model.url, &["exec", "--json", "print every big file"]);
    let stderr = text(&out.stderr);
    assert_eq!(code(out.status), 0, "{stderr}");
    let result = json_lines(&out.stdout).pop().unwrap();
    assert_eq!(result["text"], "printed anyway");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.starts_with("  ! ")).collect();
    assert!(!warnings.is_empty(), "{stderr}");
    for w in &warnings {
        assert!(
            w.starts_with("  ! automatic compaction failed: ")
                && w.contains("SUMMARY_NOT_SMALLER")
                && w.ends_with("; the turn goes on uncompacted"),
            "{w}"
        );
    }
    assert_eq!(compaction_lines(&stderr), Vec::<&str>::new());
    let bodies = model.bodies();
    let summaries = bodies.iter().filter(|b| is_summary_request(b)).count();
    assert_eq!(
        warnings.len(),
        summaries,
        "one warning per rejected summary"
    );
    // Uncompacted: the last request still carries the first file.
    let last = bodies.last().unwrap().to_string();
    assert!(last.contains("file 00 line 00"));
    assert!(!last.contains("<compacted-summary>"));
    let id = result["sessionId"].as_str().unwrap();
    let verify = env.dsh(&model.url, &["sessions", "verify", id]);
    assert_eq!(code(verify.status), 0, "{}", text(&verify.stdout));
}

/// The interactive shell with stdout and stderr read on threads.
struct Interactive {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Interactive {
    fn spawn(mut cmd: std::process::Command) -> Self {
        cmd.stdin(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let pump = |mut r: Box<dyn Read + Send>| {
            let buf: Arc<Mutex<String>> = Arc::default();
            let b = buf.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(k) = r.read(&mut chunk) {
                    if k == 0 {
                        break;
                    }
                    b.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&chunk[..k]));
                }
            });
            buf
        };
        let stdout = pump(Box::new(child.stdout.take().unwrap()));
        let stderr = pump(Box::new(child.stderr.take().unwrap()));
        Self {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin.as_mut().unwrap(), "{line}").unwrap();
    }

    /// Waits until `buf` holds `n` occurrences of `needle`.
    fn wait(buf: &Mutex<String>, needle: &str, n: usize) -> String {
        for _ in 0..2400 {
            let s = buf.lock().unwrap().clone();
            if s.matches(needle).count() >= n {
                return s;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("no {n}× {needle:?} in: {}", buf.lock().unwrap());
    }

    fn finish(mut self) -> (i32, String, String) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let out = self.stdout.lock().unwrap().clone();
        let err = self.stderr.lock().unwrap().clone();
        (code(status), out, err)
    }
}

/// The `[N% ctx] > ` prompts in `stdout`, as N.
fn prompt_shares(stdout: &str) -> Vec<u64> {
    stdout
        .split("% ctx] > ")
        .filter_map(|part| part.rsplit('[').next()?.parse().ok())
        .collect()
}

#[test]
fn slash_compact_in_the_shell_and_the_context_use_in_its_prompt() {
    let env = Env::new(&window_settings(), 4);
    let model = Model::start(
        Box::new(|n| {
            if n < 4 {
                cat(n)
            } else {
                ScriptResponse::text("four files printed")
            }
        }),
        None,
    );
    let mut sh = Interactive::spawn(env.0.dsh(&model.url, API_KEY, &[]));
    // No session before the first input, so no context use in the first prompt.
    Interactive::wait(&sh.stdout, "> ", 1);
    sh.send("print the files");
    Interactive::wait(&sh.stdout, "ctx] > ", 1);
    sh.send("/compact");
    let err = Interactive::wait(&sh.stderr, "compacted context: ", 1);
    let line = err
        .lines()
        .find(|l| l.starts_with("compacted context: "))
        .unwrap()
        .to_owned();
    Interactive::wait(&sh.stdout, "ctx] > ", 2);
    // As upstream's command, /compact takes no arguments.
    sh.send("/compact extra");
    Interactive::wait(&sh.stderr, "Usage: /compact (no arguments)", 1);
    Interactive::wait(&sh.stdout, "ctx] > ", 3);
    sh.send("/compact");
    Interactive::wait(&sh.stderr, "No compactable history yet.", 1);
    let (status, stdout, stderr) = sh.finish();
    assert_eq!(status, 0, "{stderr}");
    // before → after, from the meter; the prompt follows it.
    let nums: Vec<u64> = line
        .trim_start_matches("compacted context: ")
        .split(" tokens")
        .next()
        .unwrap()
        .split(" → ")
        .map(|n| n.replace(',', "").parse().unwrap())
        .collect();
    assert!(nums[1] < nums[0], "{line}");
    let shares = prompt_shares(&stdout);
    assert_eq!(shares.len(), 4, "{stdout}");
    assert_eq!(shares[0], nums[0] * 100 / WINDOW, "{stdout}");
    assert_eq!(shares[1], nums[1] * 100 / WINDOW, "{stdout}");
    assert_eq!(shares[2], shares[1], "{stdout}");
    assert!(stdout.contains("four files printed"));
    assert_eq!(
        model
            .bodies()
            .iter()
            .filter(|b| is_summary_request(b))
            .count(),
        1
    );
}

#[test]
fn an_invalid_models_table_is_a_settings_error() {
    let env = Env::new(
        "[models.\"deepseek-v4-flash\"]\ncontext_window = 16000\nmax_output_tokens = 20000\n",
        0,
    );
    let model = Model::start(Box::new(|_| ScriptResponse::text("unused")), None);
    let out = env.dsh(&model.url, &["exec", "hi"]);
    assert_eq!(code(out.status), 2);
    assert_eq!(
        text(&out.stderr),
        "error: plugin dsh-llm: models.\"deepseek-v4-flash\": max_output_tokens (20000) exceeds \
         context_window (16000)\n"
    );
    std::fs::write(
        env.0.repo.join(".dsh/settings.toml"),
        "[models.\"m\"]\ncontext_windows = 1\n",
    )
    .unwrap();
    let out = env.dsh(&model.url, &["config"]);
    assert_eq!(code(out.status), 2);
    assert!(
        text(&out.stderr).contains("unknown field `context_windows`"),
        "{}",
        text(&out.stderr)
    );
    assert!(model.bodies().is_empty());
}

#[test]
fn kill9_during_an_automatic_summary_then_resume_compacts() {
    const STEPS: usize = 30;
    let env = Env::new(&window_settings(), STEPS);
    let model = Model::start(
        Box::new(|n| {
            if n + 1 < STEPS {
                cat(n)
            } else {
                ScriptResponse::text("all printed")
            }
        }),
        None,
    );
    model
        .hang_summaries
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let mut child = env
        .0
        .dsh(&model.url, API_KEY, &["exec", "print every big file"])
        .spawn()
        .unwrap();
    let mut waited = 0;
    while !model.bodies().iter().any(is_summary_request) {
        assert!(waited < 2400, "no summarisation request");
        std::thread::sleep(Duration::from_millis(25));
        waited += 1;
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    let id = session_id_in(&env.0.home.join("sessions")).unwrap();
    let before = model.bodies().len();

    // The crashed log loads (repaired), holds the orphan start, and passes the checks.
    let loaded = jsonl_persistence(JsonlConfig {
        root: env.0.home.join("sessions"),
        ..JsonlConfig::default()
    })
    .load(&id)
    .unwrap();
    let kinds: Vec<&str> = loaded.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "compaction/start").count(),
        1
    );
    assert_eq!(kinds.iter().filter(|k| **k == "compaction/end").count(), 0);
    let arcs: Vec<_> = loaded.events.iter().cloned().map(Arc::new).collect();
    assert!(dsh_session::check_invariants(&arcs, None).is_empty());
    drop(loaded);

    // Resumed, the first step compacts again (the orphan start is stale) and the turn ends.
    model
        .hang_summaries
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let out = env.dsh(&model.url, &["exec", "--resume", &id, "go on"]);
    let stderr = text(&out.stderr);
    assert_eq!(code(out.status), 0, "{stderr}");
    assert!(!compaction_lines(&stderr).is_empty(), "{stderr}");
    assert!(!stderr.contains("BUSY"), "{stderr}");
    let resumed = &model.bodies()[before..];
    assert!(resumed.iter().any(is_summary_request));
    let verify = env.dsh(&model.url, &["sessions", "verify", &id]);
    assert_eq!(code(verify.status), 0, "{}", text(&verify.stdout));
}
