//! The two shared `ds_anthropic_*` wire fixtures (DeepSeek's Anthropic endpoint), served
//! byte-exact by the replay server and consumed by the real HTTP adapter.

use dsh_llm::{ContentBlock, FinishReason, Message, TokenUsage, codes};
use dsh_test_support::{ReplayServer, ScriptResponse};
use serde_json::json;

use crate::common::*;

const MODEL: &str = "deepseek-v4-flash";

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn thinking_tool_use_fixture_assembles_and_replays_its_signature_verbatim() {
    let name = "ds_anthropic_stream_thinking_tool_use.sse";
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::sse(wire(name)),
        ScriptResponse::text("main.rs and lib.rs"),
    ])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let user = Message::user_text("list src");
    let chunks = collect(&a, opts(MODEL, vec![user.clone()])).await;
    let expected = &wire_json("expected.json")[name];
    assert_eq!(finish(&chunks), FinishReason::ToolCalls);
    assert_eq!(expected["stop_reason"], "tool_use");
    assert_eq!(
        usage(&chunks),
        Some(TokenUsage {
            input_tokens: 412,
            output_tokens: 37,
            cache_read_tokens: Some(384),
            cache_write_tokens: None,
            reasoning_tokens: None,
            estimated: false,
        })
    );
    let assistant = message(&chunks, MODEL);
    assert_eq!(
        assistant.content,
        vec![
            ContentBlock::reasoning("Need the file list first."),
            ContentBlock::tool_call(
                "call_00_lpVmgVR2kA1yShZfxqF1PJWA",
                "list_dir",
                r#"{"path":"src"}"#
            ),
        ]
    );
    // the next request: the assistant turn exactly as the provider sent it (the fixture's
    // assembled content, signature included), the result in a user turn
    let call = dsh_llm::CallId::from("call_00_lpVmgVR2kA1yShZfxqF1PJWA");
    let result = Message::tool_result(call, vec![ContentBlock::text("main.rs\nlib.rs")], false);
    let chunks = collect(&a, opts(MODEL, vec![user, assistant, result])).await;
    assert_eq!(finish(&chunks), FinishReason::Stop);
    let bodies = server.messages_bodies();
    assert_eq!(bodies.len(), 2);
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"], expected["content"]);
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [{
            "type": "tool_result",
            "tool_use_id": "call_00_lpVmgVR2kA1yShZfxqF1PJWA",
            "content": "main.rs\nlib.rs",
            "cache_control": {"type": "ephemeral"}
        }]})
    );
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn thinking_missing_400_fixture_is_an_invalid_request_and_never_our_shape() {
    let fx = wire_json("ds_anthropic_error_400_thinking_missing.json");
    let status = u16::try_from(fx["response_status"].as_u64().unwrap()).unwrap();
    let server = ReplayServer::with_responses(vec![ScriptResponse::status(
        status,
        fx["response_body"].clone(),
    )])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let chunks = collect(&a, opts(MODEL, vec![Message::user_text("hi")])).await;
    let failure = finish(&chunks).failure().cloned().unwrap();
    assert_eq!(failure.code, codes::INVALID_REQUEST);
    assert_eq!(failure.status, Some(400));
    assert_eq!(
        failure.message,
        "anthropic: The `content[].thinking` in the thinking mode must be passed back to the \
         API. (HTTP 400)"
    );
    // the rejected request replayed the tool_use turn without its thinking block; the fixture's
    // tail is what a foreign (signature-less) history looks like, not what this adapter sends
    // for its own turns (previous test)
    let tail = fx["request_messages_tail"].as_array().unwrap();
    assert_eq!(tail[0]["content"][0]["type"], "tool_use");
}
