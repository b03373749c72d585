//! Request mapping without HTTP: system and tools with their cache breakpoints, thinking and
//! `max_tokens`, consecutive tool results in one user message, same-route replay of thinking
//! and redacted thinking, foreign history (another format or route) degraded, orphan calls.

use std::sync::Arc;

use dsh_llm::{ContentBlock, GenerateOptions, LlmCallConfig, Message, ToolSchema};
use dsh_llm_anthropic::{AnthropicSettings, build_body};
use dsh_llm_http::ModelEntry;
use serde_json::json;

const MODEL: &str = "claude-sonnet-4-5";

fn route() -> dsh_llm_anthropic::AnthropicRoute {
    AnthropicSettings::single("anthropic", "http://127.0.0.1:9")
        .routes
        .remove(0)
}

fn opts(messages: Vec<Message>) -> GenerateOptions {
    GenerateOptions::new(
        &LlmCallConfig::new("anthropic", MODEL),
        messages.into_iter().map(Arc::new).collect(),
    )
}

fn ours(content: Vec<ContentBlock>, blocks: serde_json::Value) -> Message {
    Message::assistant(
        content,
        "anthropic",
        MODEL,
        Some(
            json!({"response": {"kind": "dsh-anthropic", "version": 1, "provider": "anthropic",
                                  "model": MODEL, "stopReason": "tool_use"},
                    "blocks": blocks}),
        ),
    )
}

#[test]
fn system_tools_thinking_and_cache_breakpoints() {
    let mut o = opts(vec![Message::user_text("hello")]);
    o.system = Some("You are dsh.".to_owned());
    o.temperature = Some(0.2);
    o.tools = vec![
        ToolSchema {
            name: "read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}},
                               "required": ["path"], "additionalProperties": false}),
        },
        ToolSchema {
            name: "bash".into(),
            description: "Run a command".into(),
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        },
    ];
    let built = build_body(&route(), &o).unwrap();
    assert!(built.thinking);
    // default effort of the catalog entry: medium (8192) on top of the default 32,000
    assert_eq!(
        built.body,
        json!({
            "model": MODEL,
            "stream": true,
            "system": [{"type": "text", "text": "You are dsh.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}],
            "tools": [
                {"name": "read", "description": "Read a file", "input_schema": {"type": "object",
                 "properties": {"path": {"type": "string"}}, "required": ["path"]}},
                {"name": "bash", "description": "Run a command", "input_schema": {"type": "object",
                 "properties": {"command": {"type": "string"}}}, "cache_control": {"type": "ephemeral"}}
            ],
            "thinking": {"type": "enabled", "budget_tokens": 8192},
            "max_tokens": 40192
        })
    );
    // off: thinking disabled, temperature sent
    o.reasoning_effort = Some("off".into());
    let built = build_body(&route(), &o).unwrap();
    assert!(!built.thinking);
    assert_eq!(built.body["thinking"], json!({"type": "disabled"}));
    assert_eq!(built.body["temperature"], json!(0.2));
    assert_eq!(built.body["max_tokens"], json!(32000));
}

#[test]
fn max_tokens_is_clamped_to_the_window() {
    let mut r = route();
    r.models = vec![ModelEntry {
        id: MODEL.into(),
        context_window: Some(8000),
        max_output_tokens: Some(64_000),
        default_max_tokens: None,
        reasoning_efforts: vec![],
    }];
    let o = opts(vec![Message::user_text("x".repeat(8000))]);
    let built = build_body(&r, &o).unwrap();
    let bytes = serde_json::to_vec(&{
        let mut b = built.body.clone();
        b.as_object_mut().unwrap().remove("max_tokens");
        b
    })
    .unwrap()
    .len() as u64;
    assert_eq!(
        built.body["max_tokens"],
        json!(8000 - bytes.div_ceil(4) - 4096)
    );
    let huge = opts(vec![Message::user_text("x".repeat(40_000))]);
    assert_eq!(build_body(&r, &huge).unwrap().body["max_tokens"], json!(1));
}

#[test]
fn same_route_history_replays_thinking_verbatim_and_groups_tool_results() {
    let assistant = ours(
        vec![
            ContentBlock::reasoning("plan"),
            ContentBlock::reasoning("[Reasoning redacted]"),
            ContentBlock::tool_call("toolu_1", "read", r#"{"path":"a"}"#),
            ContentBlock::tool_call("toolu_2", "read", "not json"),
        ],
        json!([{"type": "reasoning", "signature": "SIG+/=="},
               {"type": "reasoning", "redacted": true, "data": "REDACTED=="},
               {"type": "tool-call"}, {"type": "tool-call"}]),
    );
    let msgs = vec![
        Message::user_text("go"),
        assistant,
        Message::tool_result("toolu_1".into(), vec![ContentBlock::text("A")], false),
        Message::tool_result("toolu_2".into(), vec![], true),
        Message::user_text("  "),
    ];
    let body = build_body(&route(), &opts(msgs)).unwrap().body;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "plan", "signature": "SIG+/=="},
                {"type": "redacted_thinking", "data": "REDACTED=="},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "(no output)",
                 "is_error": true, "cache_control": {"type": "ephemeral"}}
            ]}
        ])
    );
}

#[test]
fn our_thinking_without_a_signature_is_sent_as_text_never_with_an_empty_signature() {
    // a block cut by `max_tokens` (no signature recorded), one recorded with "", one signed
    let assistant = ours(
        vec![
            ContentBlock::reasoning("long thought cut"),
            ContentBlock::reasoning("empty sig"),
            ContentBlock::reasoning("signed"),
        ],
        json!([{"type": "reasoning"}, {"type": "reasoning", "signature": ""},
               {"type": "reasoning", "signature": "SIG"}]),
    );
    let msgs = vec![
        Message::user_text("go"),
        assistant,
        Message::user_text("t2"),
    ];
    let body = build_body(&route(), &opts(msgs)).unwrap().body;
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "long thought cut"},
            {"type": "text", "text": "empty sig"},
            {"type": "thinking", "thinking": "signed", "signature": "SIG"}
        ]})
    );
}

#[test]
fn foreign_history_drops_signatures_converts_thinking_and_closes_orphans() {
    // produced by the OpenAI-format DeepSeek route: no replay state of ours
    let foreign = Message::assistant(
        vec![
            ContentBlock::reasoning("deepseek reasoning"),
            ContentBlock::text("Looking."),
            ContentBlock::tool_call("call_00_x.y", "read", r#"{"path":"b"}"#),
            ContentBlock::tool_call("call_01_z", "read", r#"{"path":"c"}"#),
        ],
        "deepseek",
        "deepseek-v4-flash",
        None,
    );
    // ours but for another model: its signature is not sent
    let other_model = Message::assistant(
        vec![ContentBlock::reasoning("old"), ContentBlock::text("Hi")],
        "anthropic",
        "claude-haiku-4-5",
        Some(json!({"response": {"kind": "dsh-anthropic", "version": 1},
                    "blocks": [{"type": "reasoning", "signature": "S"}, {"type": "text"}]})),
    );
    let msgs = vec![
        Message::user_text("go"),
        foreign,
        Message::tool_result("call_00_x.y".into(), vec![ContentBlock::text("B")], false),
        Message::user_text("and then?"),
        other_model,
    ];
    let body = build_body(&route(), &opts(msgs)).unwrap().body;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "deepseek reasoning"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "call_00_x_y", "name": "read", "input": {"path": "b"}},
                {"type": "tool_use", "id": "call_01_z", "name": "read", "input": {"path": "c"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_00_x_y", "content": "B"},
                {"type": "tool_result", "tool_use_id": "call_01_z", "content": "No result provided",
                 "is_error": true},
                {"type": "text", "text": "and then?", "cache_control": {"type": "ephemeral"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "old"},
                {"type": "text", "text": "Hi"}
            ]}
        ])
    );
}
