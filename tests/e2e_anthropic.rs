//! End-to-end through the built `dsh` binary on the Anthropic Messages route, against the replay
//! provider in Anthropic mode (`POST /v1/messages`, synthesized thinking blocks with
//! signatures):
//!
//! - a thinking + tool-use session of three steps: every later request replays each earlier
//!   thinking block with its signature byte-exact, and every tool result sits in a user turn
//!   right after the assistant turn that called it;
//! - a session begun on the OpenAI format (the DeepSeek route) resumed with `--provider
//!   anthropic`: the history it sends is valid Anthropic input (foreign reasoning as text, no
//!   thinking block without a signature, results paired with their calls);
//! - usage and cost (exact, from the catalog's Claude prices) in the `--json` result line
//!   (`usage`, `sessionUsage`), on stderr after a text-mode `exec`, per turn in `dsh sessions
//!   show` and after each turn of the interactive shell; `costUsd: null` for a model without
//!   prices.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

mod common;

use std::process::Command;
use std::time::Duration;

use common::e2e::{Replay, Sandbox, Shell, code, json_lines, run, text};
use serde_json::{Value, json};

const KEY: &str = "sk-ant-e2e-key";
const LIMIT: Duration = Duration::from_secs(60);
const MODEL: &str = "claude-sonnet-4-5";

/// `dsh <args>` in the sandbox with the `anthropic` route pointed at `url` (the DeepSeek route
/// at `url` too).
fn dsh(env: &Sandbox, url: &str, args: &[&str]) -> Command {
    let mut cmd = env.dsh(url, "sk-deepseek-e2e", args);
    cmd.env("ANTHROPIC_BASE_URL", url)
        .env("ANTHROPIC_API_KEY", KEY);
    cmd
}

fn messages_requests(replay: &Replay) -> Vec<Value> {
    replay
        .server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/messages")
        .map(|r| {
            assert_eq!(r.headers["x-api-key"], KEY);
            assert_eq!(r.headers["anthropic-version"], "2023-06-01");
            r.body
        })
        .collect()
}

/// Checks the shape Anthropic requires of `messages`: starts with a user turn, roles alternate,
/// every `tool_use` is answered by a `tool_result` at the head of the next (user) turn, every
/// `tool_result` answers a `tool_use` of the turn before, and every `thinking` block has a
/// non-empty signature. Returns the `(tool_use id, tool_result content)` pairs in order.
fn check_valid(messages: &[Value]) -> Vec<(String, String)> {
    assert_eq!(messages[0]["role"], "user", "{messages:#?}");
    let mut pairs = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            assert_ne!(
                m["role"],
                messages[i - 1]["role"],
                "roles alternate: {messages:#?}"
            );
        }
        let content = m["content"].as_array().unwrap();
        for b in content {
            if b["type"] == "thinking" {
                assert!(
                    !b["signature"].as_str().unwrap_or("").is_empty(),
                    "thinking without a signature: {b}"
                );
            }
        }
        if m["role"] != "assistant" {
            continue;
        }
        let calls: Vec<&str> = content
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| b["id"].as_str().unwrap())
            .collect();
        if calls.is_empty() {
            continue;
        }
        let next = messages[i + 1]["content"].as_array().unwrap();
        let results: Vec<&Value> = next.iter().take(calls.len()).collect();
        for (id, r) in calls.iter().zip(&results) {
            assert_eq!(r["type"], "tool_result", "{next:#?}");
            assert_eq!(r["tool_use_id"], *id);
            pairs.push(((*id).to_owned(), r["content"].as_str().unwrap().to_owned()));
        }
    }
    pairs
}

#[test]
fn a_thinking_tool_session_replays_every_signature_and_puts_results_in_user_turns() {
    let env = Sandbox::new();
    std::fs::write(env.repo.join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    let notes = env.repo.join("notes.txt");
    let replay = Replay::start(json!([
        {"reasoning": "First read the file.",
         "tool_calls": [["read", {"file_path": notes.to_str().unwrap()}]]},
        {"reasoning": "Three lines; check with wc.",
         "tool_calls": [["bash", {"command": "wc -l < notes.txt", "description": "Count lines"}]]},
        {"reasoning": "Both agree.", "text": "notes.txt has 3 lines."}
    ]));
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &[
                "exec",
                "--provider",
                "anthropic",
                "-m",
                MODEL,
                "how many lines in notes.txt?",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), "notes.txt has 3 lines.\n");
    let reqs = messages_requests(&replay);
    assert_eq!(reqs.len(), 3);
    assert!(
        replay.server.chat_bodies().is_empty(),
        "no OpenAI-format request"
    );
    let thinking = |i: usize, text: &str| {
        json!({"type": "thinking", "thinking": text,
               "signature": format!("sig-replay{i}-{}", text.chars().count())})
    };
    let assistants = |req: &Value| -> Vec<Value> {
        req["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .cloned()
            .collect()
    };
    // request 2 replays step 1's turn exactly; request 3 replays steps 1 and 2
    assert_eq!(
        assistants(&reqs[1]),
        [json!({"role": "assistant", "content": [
            thinking(0, "First read the file."),
            {"type": "tool_use", "id": "toolu_00_replay0", "name": "read",
             "input": {"file_path": notes.to_str().unwrap()}}
        ]})]
    );
    let third = assistants(&reqs[2]);
    assert_eq!(third.len(), 2);
    assert_eq!(third[0], assistants(&reqs[1])[0]);
    assert_eq!(
        third[1],
        json!({"role": "assistant", "content": [
            thinking(1, "Three lines; check with wc."),
            {"type": "tool_use", "id": "toolu_00_replay1", "name": "bash",
             "input": {"command": "wc -l < notes.txt", "description": "Count lines"}}
        ]})
    );
    let pairs = check_valid(reqs[2]["messages"].as_array().unwrap());
    assert_eq!(pairs.len(), 2);
    assert_eq!(pairs[0].0, "toolu_00_replay0");
    assert!(pairs[0].1.contains("three"), "{}", pairs[0].1);
    assert_eq!(pairs[1].0, "toolu_00_replay1");
    assert!(pairs[1].1.contains('3'), "{}", pairs[1].1);
    // thinking is requested, with the beta header, and the system prompt is a cached block
    assert_eq!(reqs[0]["thinking"]["type"], "enabled");
    assert_eq!(
        reqs[0]["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    let beta: Vec<String> = replay
        .server
        .requests()
        .iter()
        .map(|r| r.headers.get("anthropic-beta").cloned().unwrap_or_default())
        .collect();
    assert_eq!(beta, vec!["interleaved-thinking-2025-05-14".to_owned(); 3]);
}

#[test]
fn a_session_begun_on_the_openai_format_resumes_on_anthropic_with_a_valid_history() {
    let env = Sandbox::new();
    std::fs::write(env.repo.join("a.txt"), "alpha\n").unwrap();
    let file = env.repo.join("a.txt");
    // OpenAI format (the DeepSeek route): reasoning_content + a tool call, then an answer
    let first = Replay::start(json!([
        {"reasoning": "Read a.txt first.",
         "tool_calls": [["read", {"file_path": file.to_str().unwrap()}]]},
        {"reasoning": "It says alpha.", "text": "a.txt says alpha."}
    ]));
    let out = run(
        dsh(&env, &first.url(), &["exec", "--json", "what is in a.txt?"]),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let lines = json_lines(&out.stdout);
    let id = lines.last().unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(first.server.chat_bodies().len(), 2);

    let second = Replay::start(json!([{"reasoning": "Recall.", "text": "Still alpha."}]));
    let out = run(
        dsh(
            &env,
            &second.url(),
            &[
                "exec",
                "--resume",
                &id,
                "--provider",
                "anthropic",
                "-m",
                MODEL,
                "and now?",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), "Still alpha.\n");
    let reqs = messages_requests(&second);
    assert_eq!(reqs.len(), 1);
    let messages = reqs[0]["messages"].as_array().unwrap();
    let pairs = check_valid(messages);
    assert_eq!(pairs.len(), 1);
    assert!(pairs[0].1.contains("alpha"), "{}", pairs[0].1);
    // the DeepSeek reasoning has no Anthropic signature: it is sent as text, never as thinking
    let blocks: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().unwrap())
        .collect();
    assert!(
        blocks.iter().all(|b| b["type"] != "thinking"),
        "{blocks:#?}"
    );
    assert!(
        blocks
            .iter()
            .any(|b| b["type"] == "text" && b["text"] == "Read a.txt first."),
        "{blocks:#?}"
    );
    let last = messages.last().unwrap()["content"].as_array().unwrap();
    assert!(last.iter().any(|b| b["text"] == "and now?"), "{last:#?}");
}

/// Each step: 1000 uncached + 10,000 cache-hit + 4000 cache-write input tokens, 200 output: on
/// claude-sonnet-4-5 ($3 / $0.30 / $3.75 / $15 per MTok) exactly $0.024.
fn step_usage() -> Value {
    json!({"input_tokens": 1000, "cache_read_input_tokens": 10_000,
           "cache_creation_input_tokens": 4000, "output_tokens": 200})
}

#[test]
fn exec_reports_usage_and_cost_per_run_session_and_turn() {
    let env = Sandbox::new();
    std::fs::write(env.repo.join("a.txt"), "alpha\n").unwrap();
    let file = env.repo.join("a.txt");
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": file.to_str().unwrap()}]], "usage": step_usage()},
        {"text": "alpha", "usage": step_usage()},
        {"text": "still alpha", "usage": step_usage()}
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
                "read a.txt",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let lines = json_lines(&out.stdout);
    let result = lines.last().unwrap();
    let two_steps = json!({"inputTokens": 2000, "cachedInputTokens": 20_000,
                           "cacheWriteTokens": 8000, "outputTokens": 400,
                           "reasoningTokens": 0, "costUsd": 0.048});
    assert_eq!(result["usage"], two_steps);
    assert_eq!(result["sessionUsage"], two_steps);
    let id = result["sessionId"].as_str().unwrap().to_owned();

    // a resumed run in text mode: one stderr line (the end line) with the run's and the session's cost
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &[
                "exec",
                "--resume",
                &id,
                "--provider",
                "anthropic",
                "-m",
                MODEL,
                "again?",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), "still alpha\n");
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let (_, tokens) = stderr.split_once(" s · ").unwrap();
    assert_eq!(
        tokens,
        "15000 in (cached 10000, written 4000) / 200 out tokens · $0.0240 (session: $0.0720)\n"
    );

    // per turn in the transcript
    let out = run(dsh(&env, &replay.url(), &["sessions", "show", &id]), LIMIT);
    assert_eq!(code(out.status), 0, "{out:?}");
    let shown = text(&out.stdout);
    assert!(
        shown.contains(
            "── turn 1 end: completed\n   usage: 30.0k in (20.0k cached, 8.0k written) · 400 out · \
             $0.0480\n"
        ),
        "{shown}"
    );
    assert!(
        shown.ends_with(
            "── turn 2 end: completed\n   usage: 15.0k in (10.0k cached, 4.0k written) · 200 out · \
             $0.0240\n"
        ),
        "{shown}"
    );
}

#[test]
fn a_model_without_prices_reports_a_null_cost() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "hi"}]));
    let out = run(
        dsh(
            &env,
            &replay.url(),
            &["exec", "--json", "-m", "local-unpriced-model", "hello"],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let lines = json_lines(&out.stdout);
    let result = lines.last().unwrap();
    // the replay's synthesized OpenAI usage: 100 prompt tokens, ⌈2 / 4⌉ → 1 completion token
    assert_eq!(
        result["usage"],
        json!({"inputTokens": 100, "cachedInputTokens": 0, "cacheWriteTokens": 0,
               "outputTokens": 1, "reasoningTokens": 0, "costUsd": null})
    );
    assert_eq!(result["sessionUsage"]["costUsd"], Value::Null);
}

#[test]
fn the_interactive_shell_shows_each_turns_usage_and_the_session_cost() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([
        {"text": "one", "usage": step_usage()},
        {"text": "two", "usage": step_usage()}
    ]));
    let mut sh = Shell::spawn(dsh(
        &env,
        &replay.url(),
        &["--provider", "anthropic", "-m", MODEL],
    ));
    sh.send("first");
    assert_eq!(
        sh.wait_for("  15.0k in", LIMIT),
        "  15.0k in (10.0k cached, 4.0k written) · 200 out · $0.0240 — session $0.0240"
    );
    sh.send("second");
    assert_eq!(
        sh.wait_for("  15.0k in", LIMIT),
        "  15.0k in (10.0k cached, 4.0k written) · 200 out · $0.0240 — session $0.0480"
    );
    let (status, _) = sh.finish(LIMIT);
    assert_eq!(code(status), 0);
}

#[test]
fn a_settings_route_with_format_anthropic_speaks_messages() {
    let env = Sandbox::new();
    let replay = Replay::start(json!([{"text": "from the gateway"}]));
    std::fs::write(
        env.home.join("settings.toml"),
        format!(
            "[providers.gw]\nformat = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \
             \"GW_KEY\"\nmodels = [{{ id = \"gw-model\", context_window = 100000 }}]\n",
            replay.url()
        ),
    )
    .unwrap();
    let mut cmd = dsh(
        &env,
        &replay.url(),
        &["exec", "--provider", "gw", "-m", "gw-model", "hi"],
    );
    cmd.env("GW_KEY", "gw-secret");
    let out = run(cmd, LIMIT);
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), "from the gateway\n");
    let reqs = replay.server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[0].headers["x-api-key"], "gw-secret");
    assert_eq!(reqs[0].body["model"], "gw-model");
    // dsh config shows the route's format as set
    let out = run(dsh(&env, &replay.url(), &["config", "--json"]), LIMIT);
    assert_eq!(code(out.status), 0, "{out:?}");
    let config: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        find(&config, "gw.format").map(|f| &f["value"]),
        Some(&json!("anthropic")),
        "{config:#}"
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
