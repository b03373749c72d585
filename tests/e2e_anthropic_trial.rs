//! End-to-end through the built `dsh` binary: the defects a fresh-user trial of the Anthropic
//! route found (issue 16), each reproduced against the replay provider in Anthropic mode:
//!
//! - a session begun on an Anthropic route resumes on it without `DEEPSEEK_API_KEY`;
//! - a thinking block that never got its signature (cut by `max_tokens`) is not replayed as a
//!   `thinking` block with an empty signature;
//! - an Anthropic stream with no usage gets the byte estimate (`"estimated": true`);
//! - the text-mode end line's token figures are the same dsh-usage figures as its cost (failed
//!   attempts included).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

mod common;

use std::process::Command;
use std::time::Duration;

use common::e2e::{Replay, Sandbox, code, json_lines, run, text};
use serde_json::{Value, json};

const KEY: &str = "sk-ant-e2e-key";
const LIMIT: Duration = Duration::from_secs(60);
const MODEL: &str = "claude-sonnet-4-5";

/// `dsh <args>` in the sandbox with the `anthropic` route pointed at `url` and NO DeepSeek key.
fn dsh(env: &Sandbox, url: &str, args: &[&str]) -> Command {
    let mut cmd = env.dsh(url, "", args);
    cmd.env_remove("DEEPSEEK_API_KEY")
        .env("ANTHROPIC_BASE_URL", url)
        .env("ANTHROPIC_API_KEY", KEY);
    cmd
}

fn session_id(stdout: &[u8]) -> String {
    json_lines(stdout).last().unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn an_anthropic_session_resumes_without_a_deepseek_key() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "one"}, {"text": "two"}, {"text": "three"}]));
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &[
                "exec",
                "--json",
                "--provider",
                "anthropic",
                "-m",
                MODEL,
                "t1",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let id = session_id(&out.stdout);
    let out = run(
        dsh(&env, &replay.url(), &["exec", "--resume", &id, "t2"]),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), "two\n");
    let out = run(
        dsh(&env, &replay.url(), &["exec", "--continue", "t3"]),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), "three\n");
    let reqs = replay.server.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| r.path == "/v1/messages"), "{reqs:?}");
    assert!(reqs.iter().all(|r| r.body["model"] == MODEL), "{reqs:?}");
}

#[test]
fn a_fresh_session_on_the_deepseek_route_still_needs_its_key() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "never"}]));
    let out = run(dsh(&env, &replay.url(), &["exec", "t1"]), LIMIT);
    assert_eq!(code(out.status), 2, "{out:?}");
    assert!(
        text(&out.stderr).starts_with("error: No API key for provider route \"deepseek\""),
        "{out:?}"
    );
    assert!(replay.server.requests().is_empty());
}

/// A response whose thinking block is cut by `max_tokens`: no signature, no block stop.
fn cut_thinking() -> String {
    [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
               "role": "assistant", "model": MODEL, "content": [],
               "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "thinking_delta", "thinking": "long thought cut"}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"},
               "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ]
    .iter()
    .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
    .collect()
}

#[test]
fn a_thinking_block_without_a_signature_is_not_replayed_as_thinking() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"sse": cut_thinking()}, {"text": "done"}]));
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &[
                "exec",
                "--json",
                "--provider",
                "anthropic",
                "-m",
                MODEL,
                "t1",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 3, "{out:?}");
    let id = session_id(&out.stdout);
    let out = run(
        dsh(&env, &replay.url(), &["exec", "--resume", &id, "t2"]),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let bodies = replay.server.messages_bodies();
    assert_eq!(bodies.len(), 2);
    let blocks: Vec<&Value> = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .collect();
    assert!(
        blocks.iter().all(|b| b["type"] != "thinking"),
        "{blocks:#?}"
    );
    assert!(
        blocks
            .iter()
            .any(|b| b["type"] == "text" && b["text"] == "long thought cut"),
        "{blocks:#?}"
    );
}

/// A stream of one text block and no usage at all.
fn no_usage(text: &str) -> String {
    [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
               "role": "assistant", "model": MODEL, "content": []}}),
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        json!({"type": "message_stop"}),
    ]
    .iter()
    .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
    .collect()
}

#[test]
fn an_anthropic_stream_without_usage_is_estimated() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"sse": no_usage("twelve bytes")}]));
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &[
                "exec",
                "--json",
                "--provider",
                "anthropic",
                "-m",
                MODEL,
                "hi",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let lines = json_lines(&out.stdout);
    let result = lines.last().unwrap();
    assert_eq!(result["usage"]["outputTokens"], 3, "{result:#}");
    assert!(
        result["usage"]["inputTokens"].as_u64().unwrap() > 0,
        "{result:#}"
    );
    assert!(
        result["usage"]["costUsd"].as_f64().unwrap() > 0.0,
        "{result:#}"
    );
    let ends: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "step/end" || l["type"] == "llm/usage")
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| find(l, "estimated") == Some(&json!(true))),
        "{ends:#?}"
    );
}

/// The first value under `key` anywhere in `v`.
fn find<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(m) => m.get(key).or_else(|| m.values().find_map(|x| find(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find(x, key)),
        _ => None,
    }
}

/// An attempt that starts (1000 input tokens reported) and then fails mid-stream with
/// `overloaded_error` (retryable).
fn overloaded_mid_stream() -> String {
    [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
               "role": "assistant", "model": MODEL, "content": [],
               "usage": {"input_tokens": 1000, "output_tokens": 1}}}),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ]
    .iter()
    .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
    .collect()
}

#[test]
fn the_end_line_counts_the_failed_attempts_its_cost_includes() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([
        {"sse": overloaded_mid_stream()},
        {"text": "ok", "usage": {"input_tokens": 1000, "output_tokens": 10}}
    ]));
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &["exec", "--provider", "anthropic", "-m", MODEL, "hi"],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), "ok\n");
    let stderr = text(&out.stderr);
    let last = stderr.lines().last().unwrap();
    let (_, tokens) = last.split_once(" s · ").unwrap();
    // $3 / $15 per MTok: 2000 × 3 + 11 × 15 = 6165 µ$
    assert_eq!(tokens, "2000 in / 11 out tokens · $0.006165", "{stderr}");
}

#[test]
fn a_claude_model_on_a_gateway_route_takes_the_catalog_thinking_defaults() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "from the gateway"}]));
    std::fs::write(
        env.home.join("settings.toml"),
        format!(
            "[providers.gw]\nformat = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \
             \"GW_KEY\"\nmodels = [{{ id = \"{MODEL}\", context_window = 200000, \
             max_output_tokens = 64000 }}]\n",
            replay.url()
        ),
    )
    .unwrap();
    let mut cmd = dsh(&env, &replay.url(), &["exec", "--provider", "gw", "hi"]);
    cmd.env("GW_KEY", "gw-secret");
    let out = run(cmd, LIMIT);
    assert_eq!(code(out.status), 0, "{out:?}");
    let bodies = replay.server.messages_bodies();
    assert_eq!(bodies.len(), 1);
    // as on the built-in anthropic route: effort medium ⇒ an 8192-token budget on 32,000
    assert_eq!(bodies[0]["model"], MODEL);
    assert_eq!(
        bodies[0]["thinking"],
        json!({"type": "enabled", "budget_tokens": 8192})
    );
    assert_eq!(bodies[0]["max_tokens"], 40_192);
}

#[test]
fn quoted_model_ids_in_dash_c_set_prices() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([
        {"text": "a", "usage": {"input_tokens": 1_000_000, "cache_read_input_tokens": 2_000_000,
                                "cache_creation_input_tokens": 1_000_000,
                                "output_tokens": 1_000_000}},
        {"text": "b"}
    ]));
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &[
                "exec",
                "--json",
                "--provider",
                "anthropic",
                "-m",
                MODEL,
                "-c",
                &format!("models.\"{MODEL}\".output_price=0"),
                "hi",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let lines = json_lines(&out.stdout);
    // $3 × 1 + $0.30 × 2 + $3.75 × 1 + $0 × 1
    assert_eq!(lines.last().unwrap()["usage"]["costUsd"], 7.35);
    // an id with a dot, priced from -c alone (the replay's OpenAI usage: 100 in, 1 out)
    let out = run(
        env.dsh(
            &replay.url(),
            "sk-deepseek-e2e",
            &[
                "exec",
                "--json",
                "-m",
                "qwen2.5-coder",
                "-c",
                "models.\"qwen2.5-coder\".input_price=1",
                "-c",
                "models.\"qwen2.5-coder\".output_price=10",
                "hi",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let lines = json_lines(&out.stdout);
    // 100 × $1 + 1 × $10 per MTok
    assert_eq!(lines.last().unwrap()["usage"]["costUsd"], 0.00011);
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &["config", "-c", "models.\"qwen2.5-coder\".input_price=1"],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(
        text(&out.stdout).contains("models.qwen2.5-coder.input_price"),
        "{}",
        text(&out.stdout)
    );
}
