//! Anthropic's own stream shapes (as its Messages streaming documentation records them, ids and
//! texts replaced): text, thinking + signature + tool_use, parallel tool_use, redacted
//! thinking, a `max_tokens` stop, an `overloaded_error` event mid-stream; and the HTTP failures
//! 429 with `retry-after` and 400 prompt-too-long.

use dsh_llm::{ContentBlock, FinishReason, Message, StreamChunk, TokenUsage, codes};
use dsh_test_support::{ReplayServer, ScriptResponse};
use serde_json::{Value, json};

use crate::common::*;

const MODEL: &str = "claude-sonnet-4-5";

/// An SSE body from `(event, data)` pairs.
fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

fn start(input: u64, cache_read: u64, cache_write: u64) -> (&'static str, Value) {
    (
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message", "role": "assistant", "content": [], "model": MODEL,
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "cache_creation_input_tokens": cache_write,
                      "cache_read_input_tokens": cache_read, "output_tokens": 1}}}),
    )
}

fn block_start(index: u64, block: Value) -> (&'static str, Value) {
    (
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn delta(index: u64, d: Value) -> (&'static str, Value) {
    (
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": d}),
    )
}

fn stop(index: u64) -> (&'static str, Value) {
    (
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

fn message_delta(reason: &str, output: u64) -> (&'static str, Value) {
    (
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
               "usage": {"output_tokens": output}}),
    )
}

fn message_stop() -> (&'static str, Value) {
    ("message_stop", json!({"type": "message_stop"}))
}

fn ping() -> (&'static str, Value) {
    ("ping", json!({"type": "ping"}))
}

async fn run(body: String) -> Vec<StreamChunk> {
    let server = ReplayServer::with_responses(vec![ScriptResponse::sse(body)])
        .await
        .unwrap();
    let a = adapter(&server.base_url());
    let chunks = collect(&a, opts(MODEL, vec![Message::user_text("hi")])).await;
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[0].headers["x-api-key"], KEY);
    assert_eq!(reqs[0].headers["anthropic-version"], "2023-06-01");
    chunks
}

fn replay_blocks(chunks: &[StreamChunk]) -> Value {
    match chunks.last() {
        Some(StreamChunk::Finish {
            replay_state: Some(r),
            ..
        }) => json!(r.blocks),
        other => panic!("no replay state: {other:?}"),
    }
}

#[tokio::test]
async fn text_stream() {
    let chunks = run(sse(&[
        start(25, 0, 0),
        block_start(0, json!({"type": "text", "text": ""})),
        ping(),
        delta(0, json!({"type": "text_delta", "text": "Hello"})),
        delta(0, json!({"type": "text_delta", "text": "!"})),
        stop(0),
        message_delta("end_turn", 15),
        message_stop(),
    ]))
    .await;
    assert_eq!(
        chunks,
        vec![
            StreamChunk::BlockStart {
                index: 0,
                block_type: "text".into()
            },
            StreamChunk::TextDelta {
                index: 0,
                text: "Hello".into()
            },
            StreamChunk::TextDelta {
                index: 0,
                text: "!".into()
            },
            StreamChunk::BlockEnd {
                index: 0,
                block: ContentBlock::text("Hello!")
            },
            StreamChunk::Usage {
                usage: TokenUsage {
                    input_tokens: 25,
                    output_tokens: 15,
                    ..TokenUsage::default()
                }
            },
            chunks.last().cloned().unwrap(),
        ]
    );
    assert_eq!(finish(&chunks), FinishReason::Stop);
    let Some(StreamChunk::Finish {
        replay_state: Some(r),
        ..
    }) = chunks.last()
    else {
        panic!()
    };
    assert_eq!(
        r.response,
        json!({"kind": "dsh-anthropic", "version": 1, "provider": "anthropic", "model": MODEL,
               "stopReason": "end_turn", "responseId": "msg_01XFDUDYJgAACzvnptvVoYEL",
               "responseModel": MODEL})
    );
}

#[tokio::test]
async fn thinking_with_signature_then_tool_use_with_cache_usage() {
    let chunks = run(sse(&[
        start(472, 2048, 311),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "The user wants the weather"}),
        ),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": " in Paris."}),
        ),
        delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}),
        ),
        stop(0),
        block_start(
            1,
            json!({"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                   "name": "get_weather", "input": {}}),
        ),
        delta(1, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "{\"location\": \"Par"}),
        ),
        delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "is\"}"}),
        ),
        stop(1),
        message_delta("tool_use", 89),
        message_stop(),
    ]))
    .await;
    assert_eq!(finish(&chunks), FinishReason::ToolCalls);
    let m = message(&chunks, MODEL);
    assert_eq!(
        m.content,
        vec![
            ContentBlock::reasoning("The user wants the weather in Paris."),
            ContentBlock::tool_call(
                "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "get_weather",
                r#"{"location":"Paris"}"#
            ),
        ]
    );
    assert_eq!(
        replay_blocks(&chunks),
        json!([{"type": "reasoning", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
               {"type": "tool-call"}])
    );
    assert_eq!(
        usage(&chunks),
        Some(TokenUsage {
            input_tokens: 472,
            output_tokens: 89,
            cache_read_tokens: Some(2048),
            cache_write_tokens: Some(311),
            reasoning_tokens: None,
            estimated: false,
        })
    );
    // tool-call deltas carry the id, the name only on the first one, the raw pieces
    let deltas: Vec<(Option<String>, String)> = chunks
        .iter()
        .filter_map(|c| match c {
            StreamChunk::ToolCallDelta {
                name,
                arguments_delta,
                ..
            } => Some((name.clone(), arguments_delta.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas,
        vec![
            (Some("get_weather".into()), "{\"location\": \"Par".into()),
            (None, "is\"}".into())
        ]
    );
}

#[tokio::test]
async fn parallel_tool_use_blocks_keep_their_order() {
    let chunks = run(sse(&[
        start(600, 0, 0),
        block_start(0, json!({"type": "text", "text": ""})),
        delta(0, json!({"type": "text_delta", "text": "Checking both."})),
        stop(0),
        block_start(
            1,
            json!({"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {}}),
        ),
        delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "{\"location\":\"Paris\"}"}),
        ),
        stop(1),
        block_start(
            2,
            json!({"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {}}),
        ),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"location\":\"Tokyo\"}"}),
        ),
        stop(2),
        message_delta("tool_use", 120),
        message_stop(),
    ]))
    .await;
    assert_eq!(finish(&chunks), FinishReason::ToolCalls);
    assert_eq!(
        message(&chunks, MODEL).content,
        vec![
            ContentBlock::text("Checking both."),
            ContentBlock::tool_call("toolu_01A", "get_weather", r#"{"location":"Paris"}"#),
            ContentBlock::tool_call("toolu_01B", "get_weather", r#"{"location":"Tokyo"}"#),
        ]
    );
}

#[tokio::test]
async fn redacted_thinking_is_kept_for_replay() {
    let chunks = run(sse(&[
        start(90, 0, 0),
        block_start(
            0,
            json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}),
        ),
        stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        delta(1, json!({"type": "text_delta", "text": "Done."})),
        stop(1),
        message_delta("end_turn", 40),
        message_stop(),
    ]))
    .await;
    let m = message(&chunks, MODEL);
    assert_eq!(
        m.content,
        vec![
            ContentBlock::reasoning("[Reasoning redacted]"),
            ContentBlock::text("Done.")
        ]
    );
    assert_eq!(
        replay_blocks(&chunks),
        json!([{"type": "reasoning", "redacted": true,
                "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
               {"type": "text"}])
    );
}

#[tokio::test]
async fn max_tokens_stop_drops_the_unfinished_tool_call() {
    let chunks = run(sse(&[
        start(30, 0, 0),
        block_start(0, json!({"type": "text", "text": ""})),
        delta(0, json!({"type": "text_delta", "text": "Let me write"})),
        stop(0),
        block_start(
            1,
            json!({"type": "tool_use", "id": "toolu_01C", "name": "write", "input": {}}),
        ),
        delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "{\"path\":\"a.txt\",\"con"}),
        ),
        message_delta("max_tokens", 1024),
        message_stop(),
    ]))
    .await;
    assert_eq!(finish(&chunks), FinishReason::MaxTokens);
    assert_eq!(
        message(&chunks, MODEL).content,
        vec![ContentBlock::text("Let me write")]
    );
}

#[tokio::test]
async fn overloaded_error_mid_stream_is_a_retryable_server_failure() {
    let chunks = run(sse(&[
        start(30, 0, 0),
        block_start(0, json!({"type": "text", "text": ""})),
        delta(0, json!({"type": "text_delta", "text": "Part"})),
        (
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]))
    .await;
    let failure = finish(&chunks).failure().cloned().unwrap();
    assert_eq!(failure.code, codes::SERVER);
    assert_eq!(failure.message, "anthropic: Overloaded (overloaded_error)");
    assert_eq!(
        usage(&chunks).map(|u| u.input_tokens),
        Some(30),
        "usage before the finish"
    );
}

#[tokio::test]
async fn http_429_carries_retry_after() {
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::status(
            429,
            json!({"type": "error", "error": {"type": "rate_limit_error",
                   "message": "Number of request tokens has exceeded your per-minute rate limit"}}),
        )
        .with_header("retry-after", "7")
        .with_header("request-id", "req_011CSHoEeqs5C35K2UUqR7Fy"),
    ])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let chunks = collect(&a, opts(MODEL, vec![Message::user_text("hi")])).await;
    let failure = finish(&chunks).failure().cloned().unwrap();
    assert_eq!(failure.code, codes::RATE_LIMIT);
    assert_eq!(failure.status, Some(429));
    assert_eq!(failure.provider_retry_after_ms, Some(7000));
    assert_eq!(
        failure.request_id.as_deref(),
        Some("req_011CSHoEeqs5C35K2UUqR7Fy")
    );
    assert_eq!(
        failure.message,
        "anthropic: Number of request tokens has exceeded your per-minute rate limit (HTTP 429)"
    );
}

#[tokio::test]
async fn http_400_prompt_too_long_is_a_context_overflow() {
    let server = ReplayServer::with_responses(vec![ScriptResponse::status(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error",
               "message": "prompt is too long: 208310 tokens > 200000 maximum"}}),
    )])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let chunks = collect(&a, opts(MODEL, vec![Message::user_text("hi")])).await;
    let failure = finish(&chunks).failure().cloned().unwrap();
    assert_eq!(failure.code, codes::CONTEXT_WINDOW_EXCEEDED);
    assert_eq!(failure.status, Some(400));
    assert_eq!(
        failure.message,
        "anthropic: prompt is too long: 208310 tokens > 200000 maximum (HTTP 400)"
    );
}

#[tokio::test]
async fn a_stream_cut_before_message_stop_is_a_transport_failure() {
    let chunks = run(sse(&[
        start(30, 0, 0),
        block_start(0, json!({"type": "text", "text": ""})),
        delta(0, json!({"type": "text_delta", "text": "Part"})),
    ]))
    .await;
    let failure = finish(&chunks).failure().cloned().unwrap();
    assert_eq!(failure.code, codes::TRANSPORT);
    assert_eq!(
        failure.message,
        "anthropic: the stream ended before message_stop"
    );
}

#[tokio::test]
async fn end_turn_without_blocks_is_an_empty_response() {
    let chunks = run(sse(&[
        start(30, 0, 0),
        message_delta("end_turn", 0),
        message_stop(),
    ]))
    .await;
    assert_eq!(
        finish(&chunks).failure().map(|f| f.code.clone()),
        Some(codes::EMPTY_RESPONSE.to_owned())
    );
}
