//! Provider faults through the built `dsh` binary (issue 13, "Provider I/O"): a server that
//! accepts and never answers (first-byte timeout, two retries, exit 1), an unreachable URL (one
//! stderr line per retry, never on stdout with `--json`), an invalid base URL (exit 2 at once),
//! a `Retry-After` beyond the ceiling (the turn fails at once, saying so), a redirect to another
//! origin (never followed), and tool-call ids (unique across steps; an empty tool name is not
//! replayed as a call).
//!
//! The model is the replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1) or a raw
//! loopback socket; nothing touches the network. Locating the binary: see `common/mod.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, text};

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const API_KEY: &str = "sk-faults-provider";
/// "Did not hang" bound for one dsh run.
const HANG_LIMIT: Duration = Duration::from_secs(60);

/// A loopback listener that accepts connections, reads what they send and never answers.
/// Returns its URL and the number of connections accepted so far.
fn silent_server() -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let n = accepted.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            n.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf), Ok(k) if k > 0) {}
            });
        }
    });
    (url, accepted)
}

/// A URL on 127.0.0.1 nobody listens on.
fn dead_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

/// The shared sandbox plus this file's helpers.
struct Env(Sandbox);

impl std::ops::Deref for Env {
    type Target = Sandbox;

    fn deref(&self) -> &Sandbox {
        &self.0
    }
}

impl Env {
    fn new() -> Self {
        Self(Sandbox::new())
    }

    /// `dsh <args>` in the workspace with the hermetic environment and this file's key.
    fn dsh(&self, url: &str, args: &[&str]) -> Command {
        self.0.dsh(url, API_KEY, args)
    }

    /// The one stored session log, parsed.
    fn session_events(&self) -> Vec<Value> {
        let mut logs = Vec::new();
        let mut dirs = vec![self.home.join("sessions")];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.file_name().is_some_and(|n| n == "session.jsonl") {
                    logs.push(p);
                }
            }
        }
        assert_eq!(logs.len(), 1, "{logs:?}");
        std::fs::read_to_string(&logs[0])
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Runs `cmd` to completion, killing it and failing if it hangs; returns the output and the
/// wall time.
fn run(mut cmd: Command) -> (Output, Duration) {
    let started = Instant::now();
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(HANG_LIMIT) {
        Ok(out) => (out.unwrap(), started.elapsed()),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("dsh did not finish within {HANG_LIMIT:?}");
        }
    }
}

fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("dsh died from a signal: {}", out.status))
}

/// Stderr lines that start with the retry marker.
fn retry_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("  ↻ ")).collect()
}

/// Replaces the varying wait of a retry line (`in 123 ms`) by `in N ms`.
fn without_wait(line: &str) -> String {
    match line.rfind(" in ") {
        Some(i) if line.ends_with(" ms") => format!("{} in N ms", &line[..i]),
        _ => line.to_owned(),
    }
}

#[test]
fn a_silent_server_times_out_is_retried_twice_and_ends_with_exit_1() {
    let env = Env::new();
    let (url, accepted) = silent_server();
    let (out, took) = run(env.dsh(
        &url,
        &[
            "-c",
            "providers.deepseek.first_byte_timeout_ms=300",
            "-c",
            "plugins.dsh-llm-retry.backoff.initial_delay_ms=100",
            "exec",
            "--ephemeral",
            "hi",
        ],
    ));
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 1, "{stderr}");
    assert_eq!(text(&out.stdout), "");
    // One request and two retries (the default for timeouts), each a fresh connection.
    assert_eq!(accepted.load(Ordering::SeqCst), 3, "{stderr}");
    let cause = format!(
        "deepseek: POST {url}/chat/completions timed out after 300 ms waiting for the response \
         headers (first_byte_timeout_ms = 300)"
    );
    let lines: Vec<String> = retry_lines(&stderr).into_iter().map(without_wait).collect();
    assert_eq!(
        lines,
        [
            format!("  ↻ {cause} (TIMEOUT); retry 1/2 in N ms"),
            format!("  ↻ {cause} (TIMEOUT); retry 2/2 in N ms"),
        ],
        "{stderr}"
    );
    assert!(
        common::e2e::before_end_line(&stderr).ends_with(&format!("error: {cause} (TIMEOUT)\n")),
        "{stderr}"
    );
    // Three first-byte timeouts plus two waits of at most 110 and 220 ms, with slack for start-up.
    assert!(
        took < Duration::from_millis(3 * 300 + 330 + 5_000),
        "{took:?}"
    );
}

#[test]
fn an_unreachable_url_prints_one_line_per_retry_and_never_on_json_stdout() {
    let env = Env::new();
    let url = dead_url();
    let args = [
        "-c",
        "plugins.dsh-llm-retry.max_retries=2",
        "-c",
        "plugins.dsh-llm-retry.backoff.initial_delay_ms=20",
        "exec",
        "--ephemeral",
    ];
    for json in [false, true] {
        let mut a = args.to_vec();
        if json {
            a.push("--json");
        }
        a.push("hi");
        let (out, _) = run(env.dsh(&url, &a));
        let stderr = text(&out.stderr);
        assert_eq!(code(&out), 1, "{stderr}");
        let lines: Vec<String> = retry_lines(&stderr).into_iter().map(without_wait).collect();
        assert_eq!(lines.len(), 2, "{stderr}");
        for (i, l) in lines.iter().enumerate() {
            assert!(
                l.starts_with(&format!(
                    "  ↻ deepseek: POST {url}/chat/completions failed: "
                )),
                "{l}"
            );
            assert!(
                l.ends_with(&format!("(TRANSPORT); retry {}/2 in N ms", i + 1)),
                "{l}"
            );
        }
        if json {
            // stdout is JSON Lines only, ending with the result line
            let stdout = text(&out.stdout);
            let values: Vec<Value> = stdout
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect();
            assert_eq!(values.last().unwrap()["type"], "result");
            assert_eq!(values.last().unwrap()["error"]["code"], "TRANSPORT");
        } else {
            assert_eq!(text(&out.stdout), "");
        }
    }
}

#[test]
fn an_invalid_base_url_is_a_configuration_error_at_once() {
    let env = Env::new();
    for url in ["notaurl", "ftp://127.0.0.1/v1", "http://"] {
        let (out, took) = run(env.dsh(url, &["exec", "--ephemeral", "hi"]));
        let stderr = text(&out.stderr);
        assert_eq!(code(&out), 2, "{url}: {stderr}");
        assert!(took < Duration::from_secs(1), "{url}: {took:?}");
        assert!(retry_lines(&stderr).is_empty(), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "provider route \"deepseek\" has an invalid base_url {url:?}"
            )),
            "{stderr}"
        );
        assert!(!stderr.contains("builder error"), "{stderr}");
    }
    // The same from a settings key of a user route.
    let (out, _) = run(env.dsh(
        "http://127.0.0.1:9",
        &[
            "-c",
            "providers.local.base_url=\"not a url\"",
            "exec",
            "--ephemeral",
            "hi",
        ],
    ));
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 2, "{stderr}");
    assert!(
        stderr.contains("provider route \"local\" has an invalid base_url \"not a url\""),
        "{stderr}"
    );
}

#[test]
fn a_retry_after_beyond_the_ceiling_fails_at_once_and_a_short_one_is_honoured() {
    let env = Env::new();
    // 2 s asked (seconds form), ceiling 1 s: no retry, a line saying why.
    let replay = Replay::start(json!([
        {"status": 429, "body": {"error": {"message": "slow down"}}, "headers": {"retry-after": "2"}},
        {"text": "never"},
    ]));
    let (out, took) = run(env.dsh(
        &replay.url(),
        &[
            "-c",
            "agent.max_retry_wait_ms=1000",
            "exec",
            "--ephemeral",
            "hi",
        ],
    ));
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 1, "{stderr}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(replay.server.chat_bodies().len(), 1);
    assert_eq!(
        common::e2e::before_end_line(&stderr),
        "  ✗ not retrying: the provider asks to wait 2000 ms, more than [agent] \
         max_retry_wait_ms = 1000 ms\n\
         error: deepseek: slow down (HTTP 429) (RATE_LIMIT)\n"
    );

    // 1 s asked (seconds form), default ceiling 120 s: honoured, shown, then the answer.
    let replay = Replay::start(json!([
        {"status": 429, "body": {"error": {"message": "slow down"}}, "headers": {"retry-after": "1"}},
        {"text": "done"},
    ]));
    let (out, took) = run(env.dsh(&replay.url(), &["exec", "--ephemeral", "hi"]));
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 0, "{stderr}");
    assert_eq!(text(&out.stdout), "done\n");
    assert_eq!(
        common::e2e::before_end_line(&stderr),
        "  ↻ deepseek: slow down (HTTP 429) (RATE_LIMIT); retry 1/5 in 1000 ms (Retry-After)\n"
    );
    assert!(took >= Duration::from_secs(1), "{took:?}");
}

#[test]
fn a_redirect_to_another_origin_is_never_followed() {
    let env = Env::new();
    let other = Replay::start(json!([{"text": "the conversation leaked"}]));
    let location = format!("{}/chat/completions", other.url());
    let first = Replay::start(json!([
        {"status": 307, "body": "", "headers": {"location": location}},
    ]));
    let (out, _) = run(env.dsh(&first.url(), &["exec", "--ephemeral", "hi"]));
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 1, "{stderr}");
    assert!(
        other.server.requests().is_empty(),
        "the other origin was called"
    );
    assert_eq!(first.server.chat_bodies().len(), 1);
    assert!(
        common::e2e::before_end_line(&stderr).ends_with(&format!(
            "error: deepseek: the provider redirected the request to another origin ({location}); \
             dsh does not follow it (HTTP 307) (REDIRECT_REFUSED)\n"
        )),
        "{stderr}"
    );
}

/// One SSE response: completion id `cmpl-same`, one tool call without an id.
fn call_without_id(name: &str, args: &str) -> Value {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "cmpl-same", "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let body = [
        chunk(
            json!({"tool_calls": [{"index": 0, "type": "function",
                                   "function": {"name": name, "arguments": args}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    json!({"sse": body})
}

#[test]
fn synthesised_call_ids_are_unique_and_an_empty_name_is_not_replayed() {
    let env = Env::new();
    std::fs::write(env.repo.join("a.txt"), "alpha\n").unwrap();
    let replay = Replay::start(json!([
        call_without_id("read", "{\"file_path\":\"a.txt\"}"),
        call_without_id("read", "{\"file_path\":\"a.txt\"}"),
        call_without_id("", "{}"),
        {"text": "done"},
    ]));
    let (out, _) = run(env.dsh(&replay.url(), &["exec", "hi"]));
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 0, "{stderr}");
    let events = env.session_events();
    let ids: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| e["data"]["callId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 3, "{ids:?}");
    // The empty name got an error result.
    let empty_result = events
        .iter()
        .find(|e| {
            e["type"] == "tool/result"
                && e["data"]["message"]["content"][0]["toolCallId"] == ids[2].as_str()
        })
        .unwrap();
    assert_eq!(
        empty_result["data"]["message"]["content"][0]["isError"],
        true
    );
    // The last request replays the two reads (distinct ids, each with its result) and neither
    // the nameless call nor its result.
    let bodies = replay.server.chat_bodies();
    assert_eq!(bodies.len(), 4);
    let msgs = bodies[3]["messages"].as_array().unwrap();
    let calls: Vec<(String, String)> = msgs
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_owned(),
                c["function"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            (ids[0].clone(), "read".to_owned()),
            (ids[1].clone(), "read".to_owned())
        ]
    );
    let results: Vec<&str> = msgs
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(results, [ids[0].as_str(), ids[1].as_str()]);
}

/// A loopback server answering one chat request with `body` as an SSE stream (raw bytes, so it
/// may hold invalid UTF-8). Returns its URL.
fn raw_sse_server(body: Vec<u8>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                return;
            }
            req.extend_from_slice(&buf[..n]);
            let head = String::from_utf8_lossy(&req).into_owned();
            if let Some(end) = head.find("\r\n\r\n") {
                let len = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if req.len() >= end + 4 + len {
                    break;
                }
            }
        }
        use std::io::Write;
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        let _ = s.write_all(head.as_bytes());
        let _ = s.write_all(&body);
    });
    url
}

#[test]
fn invalid_utf8_and_missing_usage_do_not_fail_the_turn() {
    let env = Env::new();
    let mut body =
        b"data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok \xff!\"}}]}\n\n"
            .to_vec();
    body.extend_from_slice(
        b"data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    );
    let url = raw_sse_server(body);
    let (out, _) = run(env.dsh(&url, &["exec", "--ephemeral", "--json", "hi"]));
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 0, "{stderr}");
    assert_eq!(
        stderr,
        "  ! deepseek: the provider sent invalid UTF-8; each bad sequence is shown as U+FFFD\n"
    );
    let stdout = text(&out.stdout);
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["reason"], "completed");
    assert_eq!(result["text"], "ok \u{FFFD}!");
    // no usage on the wire: an estimate, marked (the answer "ok �!" is 7 bytes ⇒ 2 tokens)
    assert_eq!(result["usage"]["estimated"], true);
    assert_eq!(result["usage"]["outputTokens"], 2);
    assert!(result["usage"]["inputTokens"].as_u64().unwrap() > 0);
}

/// A loopback server that answers every request with SSE headers and one text delta
/// (`"Hel"`), then stalls. Returns its URL.
fn stalling_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let _ = s.read(&mut buf);
                let _ = std::io::Write::write_all(
                    &mut s,
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
                      data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
                );
                while matches!(s.read(&mut buf), Ok(k) if k > 0) {}
            });
        }
    });
    url
}

#[test]
fn a_failed_attempts_partial_answer_never_reaches_a_piped_stdout() {
    let env = Env::new();
    let url = stalling_server();
    let out = run(env.dsh(
        &url,
        &[
            "-c",
            "providers.deepseek.stream_idle_timeout_ms=300",
            "-c",
            "agent.max_timeout_retries=1",
            "-c",
            "plugins.dsh-llm-retry.backoff.initial_delay_ms=50",
            "exec",
            "--ephemeral",
            "hi",
        ],
    ))
    .0;
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 1, "{stderr}");
    // Before: "Hel\nHel\n" — each failed attempt's partial text was written to stdout.
    assert_eq!(text(&out.stdout), "", "{stderr}");
    let cause = format!(
        "deepseek: POST {url}/chat/completions timed out after 300 ms without data from the \
         provider (stream_idle_timeout_ms = 300) (TIMEOUT)"
    );
    let discarded: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("  ✗ a partial answer was discarded"))
        .collect();
    let line = format!("  ✗ a partial answer was discarded: {cause}");
    assert_eq!(discarded, [line.as_str(), line.as_str()], "{stderr}");
}
