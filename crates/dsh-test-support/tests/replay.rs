//! Replay server tests: the library API (sequential, stateless, `/v1` prefix, models, recording,
//! status responses) over raw HTTP/1.1, and the `dsh-replay-server` binary end to end.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (COMMON.md)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use dsh_test_support::{ReplayOptions, ReplayServer, Script, ScriptResponse};
use serde_json::{Value, json};

/// A blocking HTTP/1.1 request with `Connection: close`; returns (status, headers+body text).
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    (status, out)
}

fn addr(base: &str) -> String {
    base.trim_start_matches("http://").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_in_order_records_requests_and_answers_models() {
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::text("hello"),
        ScriptResponse::status(429, json!({"error": {"message": "slow down"}}))
            .with_header("retry-after", "3"),
    ])
    .await
    .unwrap();
    let a = addr(&server.base_url());
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let (st, text) = tokio::task::spawn_blocking({
        let (a, body) = (a.clone(), body.clone());
        move || http(&a, "POST", "/chat/completions", &body)
    })
    .await
    .unwrap();
    assert_eq!(st, 200);
    assert!(text.contains("text/event-stream"));
    assert!(text.contains("\"content\":\"hello\""));
    assert!(text.contains("data: [DONE]"));
    let (st, text) = tokio::task::spawn_blocking({
        let (a, body) = (a.clone(), body.clone());
        move || http(&a, "POST", "/v1/chat/completions", &body)
    })
    .await
    .unwrap();
    assert_eq!(st, 429);
    assert!(text.to_ascii_lowercase().contains("retry-after: 3"));
    let (st, text) = tokio::task::spawn_blocking({
        let a = a.clone();
        move || http(&a, "GET", "/models", "")
    })
    .await
    .unwrap();
    assert_eq!(st, 200);
    assert!(text.contains("\"id\":\"deepseek-v4-pro\""));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[1].path, "/v1/chat/completions");
    assert_eq!(reqs[0].body["messages"][0]["content"], json!("hi"));
    assert_eq!(server.chat_bodies().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_mode_picks_by_assistant_count() {
    let server = ReplayServer::start(
        Script::new(vec![
            ScriptResponse::text("zero"),
            ScriptResponse::text("one"),
        ]),
        ReplayOptions {
            stateless: true,
            ..ReplayOptions::default()
        },
    )
    .await
    .unwrap();
    let a = addr(&server.base_url());
    let body = json!({"messages": [{"role": "user", "content": "a"},
        {"role": "assistant", "content": "zero"}, {"role": "user", "content": "b"}]})
    .to_string();
    let (_, text) =
        tokio::task::spawn_blocking(move || http(&a, "POST", "/chat/completions", &body))
            .await
            .unwrap();
    assert!(text.contains("\"content\":\"one\""));
}

#[test]
fn binary_prints_its_address_and_serves_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    let log = dir.path().join("requests.jsonl");
    std::fs::write(
        &script,
        json!({"responses": [{"text": "from the binary"}], "models": ["local-model"]}).to_string(),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh-replay-server"))
        .arg(&script)
        .arg("--stateless")
        .arg("--log")
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line.trim().to_owned();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let a = addr(&base);
    let (st, text) = http(&a, "GET", "/v1/models", "");
    assert_eq!(st, 200);
    assert!(text.contains("local-model"));
    let (st, text) = http(&a, "POST", "/chat/completions", r#"{"messages":[]}"#);
    assert_eq!(st, 200);
    assert!(text.contains("\"content\":\"from the\""));
    child.kill().unwrap();
    child.wait().unwrap();
    let logged: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(logged.len(), 2);
    assert_eq!(logged[1]["body"], json!({"messages": []}));

    // a bad script exits 2
    std::fs::write(&script, "[{\"nope\":1}]").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-replay-server"))
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn binary_help_names_both_formats() {
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-replay-server"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("DEEPSEEK_BASE_URL=<that URL>"), "{help}");
    assert!(
        help.contains(
            "It also speaks the Anthropic Messages format: a POST to <URL>/v1/messages gets the \
             same script as Anthropic SSE"
        ),
        "{help}"
    );
    assert!(help.contains("ANTHROPIC_BASE_URL=<that URL>"), "{help}");
}
