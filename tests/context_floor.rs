//! Benchmark-style measurement (ignored in CI): the size in tokens, by the token meter's
//! estimate, of what no compaction can remove from a request of the default `dsh` binary —
//! the system prompt plus the tool schemas of its `request/header`.
//!
//! Runs `dsh exec --json` once against the replay provider in an empty, non-git workspace,
//! reads the logged `request/header` from the JSON lines, and prints the system prompt's and
//! each tool schema's estimate and the header's total (`dsh_token_meter::estimate_header`).
//! The figures are recorded in docs/benchmarks.md (Context floor). Run with
//! `cargo nextest run -p dsh-tests --test context_floor --run-ignored only --no-capture`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::time::Duration;

use common::e2e::{Replay, Sandbox, code, json_lines, run};
use dsh_session::RequestHeaderData;
use dsh_token_meter::{estimate_header, estimate_system, estimate_text, estimate_tools};
use serde_json::{Value, json};

#[test]
#[ignore = "a measurement for docs/benchmarks.md, not a check"]
fn context_floor_of_the_default_binary() {
    let replay = Replay::start(json!([{"text": "ok"}]));
    let sandbox = Sandbox::new();
    let out = run(
        sandbox.dsh(&replay.url(), "sk-floor", &["exec", "--json", "hi"]),
        Duration::from_secs(60),
    );
    assert_eq!(
        code(out.status),
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out.stdout);
    let header_line = lines
        .iter()
        .find(|l| l["type"] == "request/header")
        .expect("a request/header line");
    let data: RequestHeaderData = serde_json::from_value(header_line["data"].clone()).unwrap();
    let header = data.header;
    let tools = header.tools.clone().unwrap_or(Value::Null);
    let list = tools.as_array().cloned().unwrap_or_default();
    // The wire request carried the same tools the header logs.
    let sent = &replay.chat_requests()[0].body;
    assert_eq!(
        sent["tools"].as_array().map(Vec::len).unwrap_or(0),
        list.len()
    );
    let system = header.system.as_deref().unwrap_or("");
    eprintln!(
        "system prompt: {} UTF-16 units, {} tokens",
        system.encode_utf16().count(),
        estimate_system(header.system.as_deref())
    );
    let mut sum = 0;
    for t in &list {
        let name = t["name"].as_str().unwrap_or("?");
        let json = serde_json::to_string(t).unwrap();
        // One schema's share: ceil(len / 4) of its compact JSON (the list adds 4 once).
        let tokens = estimate_text(&json) - 4;
        sum += tokens;
        eprintln!("tool {name}: {} chars of JSON, {tokens} tokens", json.len());
    }
    eprintln!(
        "tools: {} schemas, {} tokens (per-tool sum {sum})",
        list.len(),
        estimate_tools(header.tools.as_ref())
    );
    eprintln!(
        "total (system + tools): {} tokens",
        estimate_header(&header)
    );
    assert!(estimate_header(&header) > 0);
}
