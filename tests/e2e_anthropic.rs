//! End-to-end through the built `dsh` binary on the Anthropic Messages route, against the replay
//! provider in Anthropic mode (`POST /v1/messages`, synthesized thinking blocks with
//! signatures):
//!
//! - a thinking + tool-use session of three steps: every later request replays each earlier
//!   thinking block with its signature byte-exact, and every tool result sits in a user turn
//!   right after the assistant turn that called it;
//! - a session begun on the OpenAI format (the DeepSeek route) resumed with `--provider
//!   anthropic`: the history it sends is valid Anthropic input (foreign reasoning as text, no
//!   thinking block without a signature, results paired with their calls).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

mod common;

use std::process::Command;
use std::time::Duration;

use common::e2e::{Replay, Sandbox, code, json_lines, run, text};
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
