//! One test per `.sse` wire fixture (served byte-exact by the replay server, consumed by the real
//! HTTP adapter), compared with `expected.json` and the README's "Client must" line; plus the
//! `.json` fixtures (HTTP error table, request shapes, model list).
//!
//! Non-streaming bodies (fixtures 9, 10, 18) are served as `application/json` answers to a
//! streaming request (a server that ignored `stream:true`).
//!
//! Not here: `ds_anthropic_stream_thinking_tool_use.sse` / `ds_anthropic_error_400_*.json` are
//! the Anthropic format, tested by `dsh-llm-anthropic` (its `wire` tests).

use dsh_llm::{FinishReason, Message, StreamChunk, codes};
use dsh_llm_deepseek::{DeepSeekSettings, parse_model_list};
use dsh_test_support::{ReplayServer, ScriptResponse};
use serde_json::{Value, json};

use crate::common::*;

/// Serves fixture `name` and returns the assembled result and the raw chunks.
async fn run(name: &str) -> (Assembled, Vec<StreamChunk>) {
    let server = ReplayServer::with_responses(vec![ScriptResponse::sse(wire(name))])
        .await
        .unwrap();
    let a = adapter(&server.base_url());
    let chunks = collect(
        &a,
        opts("deepseek-v4-flash", None, vec![Message::user_text("hi")]),
    )
    .await;
    assert_eq!(server.chat_bodies().len(), 1);
    (assemble(&chunks), chunks)
}

/// Compares with the `expected.json` entry: content, reasoning, tool calls, usage, finish.
fn compare(name: &str, got: &Assembled) {
    let expected = wire_json("expected.json");
    let e = &expected[name];
    let msg = &e["message"];
    let text = msg["content"].as_str().unwrap_or("");
    assert_eq!(got.text.as_deref().unwrap_or(""), text, "{name}: content");
    let reasoning = msg["reasoning_content"].as_str().unwrap_or("");
    assert_eq!(
        got.reasoning.as_deref().unwrap_or(""),
        reasoning,
        "{name}: reasoning"
    );
    let calls: Vec<(String, String, String)> = msg["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_owned(),
                c["name"].as_str().unwrap().to_owned(),
                c["arguments"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(got.calls, calls, "{name}: tool calls");
    for (_, _, args) in &got.calls {
        let v: Value = serde_json::from_str(args).unwrap();
        assert!(v.is_object());
    }
    match expected_usage(&e["usage"]) {
        Some(u) => assert_eq!(got.usage, Some(u), "{name}: usage"),
        // no wire usage: the adapter estimates it (and marks it) or reports none on failure
        None => assert!(got.usage.is_none_or(|u| u.estimated), "{name}: usage"),
    }
    let finish = got.finish.clone().unwrap();
    let has_answer = !text.trim().is_empty() || !calls.is_empty();
    match (e["finish_reason"].as_str(), e.get("stream_errors")) {
        (Some("stop"), _) if has_answer => assert_eq!(finish, FinishReason::Stop, "{name}"),
        (Some("stop"), _) => assert_eq!(got.code(), Some(codes::EMPTY_RESPONSE), "{name}"),
        (Some("tool_calls"), _) => assert_eq!(finish, FinishReason::ToolCalls, "{name}"),
        (Some("length"), _) => assert_eq!(finish, FinishReason::MaxTokens, "{name}"),
        (Some(other), _) => {
            assert_eq!(finish.kind(), "error");
            assert_eq!(got.code(), Some(other.to_ascii_uppercase().as_str()));
        }
        (None, Some(_)) => {
            assert_eq!(finish.kind(), "error");
            assert_eq!(got.code(), Some(codes::SERVER), "{name}");
        }
        (None, None) => {
            assert_eq!(e["saw_done"], json!(false));
            assert_eq!(finish.kind(), "error");
            assert_eq!(got.code(), Some(codes::TRANSPORT), "{name}");
        }
    }
}

async fn check(name: &str) -> (Assembled, Vec<StreamChunk>) {
    let (a, chunks) = run(name).await;
    compare(name, &a);
    (a, chunks)
}

fn text_deltas(chunks: &[StreamChunk]) -> Vec<&str> {
    chunks
        .iter()
        .filter_map(|c| match c {
            StreamChunk::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_v4_stream_text() {
    let (a, chunks) = check("ds_v4_stream_text.sse").await;
    assert_eq!(a.text.as_deref(), Some("Hello! How can I help you today?"));
    let u = a.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.cache_read_tokens),
        (12, 10, Some(0))
    );
    assert!(text_deltas(&chunks).iter().all(|t| !t.is_empty()));
    assert_eq!(a.finish, Some(FinishReason::Stop));
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_v4_stream_text_include_usage() {
    let (a, _) = check("ds_v4_stream_text_include_usage.sse").await;
    let u = a.usage.unwrap();
    assert_eq!((u.cache_read_tokens, u.input_tokens), (Some(1024), 9));
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_v4_stream_thinking_text() {
    let (a, chunks) = check("ds_v4_stream_thinking_text.sse").await;
    assert_eq!(a.text.as_deref(), Some("9.8 is larger than 9.11."));
    assert!(
        a.reasoning
            .as_deref()
            .unwrap()
            .ends_with("so 9.8 is larger.")
    );
    let u = a.usage.unwrap();
    assert_eq!((u.output_tokens, u.reasoning_tokens), (58, Some(49)));
    // reasoning block first, text second
    assert!(
        matches!(&chunks[0], StreamChunk::BlockStart { index: 0, block_type } if block_type == "reasoning")
    );
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_v4_stream_tool_call() {
    let (a, chunks) = check("ds_v4_stream_tool_call.sse").await;
    assert_eq!(
        a.text.as_deref(),
        Some("I'll check the current weather in Tokyo for you.")
    );
    assert_eq!(a.calls[0].1, "get_weather");
    assert_eq!(a.calls[0].2, "{\"location\": \"Tokyo\"}");
    // the name is sent once, on the first tool-call delta
    let named = chunks
        .iter()
        .filter(|c| matches!(c, StreamChunk::ToolCallDelta { name: Some(_), .. }))
        .count();
    assert_eq!(named, 1);
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_v4_stream_tool_calls_parallel() {
    let (a, _) = check("ds_v4_stream_tool_calls_parallel.sse").await;
    assert_eq!(a.calls.len(), 2);
    assert!(a.calls[0].2.contains("Beijing") && a.calls[1].2.contains("Luoyang"));
    assert_eq!(a.text, None, "no text block for empty content");
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_v4_stream_thinking_tool_call() {
    let (a, _) = check("ds_v4_stream_thinking_tool_call.sse").await;
    assert_eq!(a.calls[0].1, "get_user_balance");
    let u = a.usage.unwrap();
    assert_eq!(
        (u.cache_read_tokens, u.reasoning_tokens),
        (Some(256), Some(31))
    );
    // the reasoning is stored with the message (a reasoning block), ready for replay
    let m = assistant_message(&a, "deepseek-v4-flash");
    assert_eq!(m.content[0].type_tag(), "reasoning");
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_stream_keepalive() {
    let (a, _) = check("ds_stream_keepalive.sse").await;
    assert_eq!(a.text.as_deref(), Some("pong"));
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_v4_stream_length_in_reasoning() {
    let (a, _) = check("ds_v4_stream_length_in_reasoning.sse").await;
    assert_eq!(a.finish, Some(FinishReason::MaxTokens));
    assert_eq!(a.text, None);
    let u = a.usage.unwrap();
    assert_eq!((u.output_tokens, u.reasoning_tokens), (5, Some(5)));
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_stream_insufficient_system_resource() {
    let (a, _) = check("ds_stream_insufficient_system_resource.sse").await;
    assert_eq!(a.code(), Some("INSUFFICIENT_SYSTEM_RESOURCE"));
    // usage is still recorded for billing
    assert_eq!(a.usage.unwrap().cache_read_tokens, Some(1920));
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_v4_stream_truncated_no_done() {
    let (a, chunks) = check("ds_v4_stream_truncated_no_done.sse").await;
    assert_eq!(a.code(), Some(codes::TRANSPORT));
    assert_eq!(a.usage, None);
    // never handed over as finished blocks
    assert!(
        !chunks
            .iter()
            .any(|c| matches!(c, StreamChunk::BlockEnd { .. }))
    );
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_v4_stream_reasoning_only_stop() {
    let (a, _) = check("ds_v4_stream_reasoning_only_stop.sse").await;
    assert_eq!(a.code(), Some(codes::EMPTY_RESPONSE));
    assert_eq!(a.usage.unwrap().reasoning_tokens, Some(24));
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn openai_stream_include_usage() {
    let (a, _) = check("openai_stream_include_usage.sse").await;
    assert_eq!(a.text.as_deref(), Some("Hello! How can I help?"));
    assert_eq!(a.usage.unwrap().input_tokens, 10);
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn openai_stream_parallel_tool_calls() {
    let (a, _) = check("openai_stream_parallel_tool_calls.sse").await;
    assert_eq!(a.calls.len(), 2);
    // no wire usage: estimated, ceil(bytes / 4) of the request body and of the answer
    let u = a.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.estimated),
        (46, 16, true)
    );
    assert_eq!(a.finish, Some(FinishReason::ToolCalls));
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn llamacpp_stream_tool_call() {
    let (a, _) = check("llamacpp_stream_tool_call.sse").await;
    assert_eq!(a.calls[0].0, "vQugkfabc1whNPGiS0rtPGw6wIzGkiCf");
    assert_eq!(a.calls[0].2, "{\"location\": \"Tokyo\"}");
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn llamacpp_stream_tool_result_answer() {
    let (a, _) = check("llamacpp_stream_tool_result_answer.sse").await;
    let u = a.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.cache_read_tokens),
        (234 - 185, Some(185))
    );
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn llamacpp_stream_error_midstream() {
    let (a, _) = check("llamacpp_stream_error_midstream.sse").await;
    let f = a.failure().unwrap();
    assert_eq!(f.code, codes::SERVER);
    assert!(f.message.contains("peg-native format"));
    assert_eq!(a.text, None);
}

#[test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
fn every_sse_fixture_is_covered_or_skipped() {
    let covered = [
        "ds_v4_stream_text.sse",
        "ds_v4_stream_text_include_usage.sse",
        "ds_v4_stream_thinking_text.sse",
        "ds_v4_stream_tool_call.sse",
        "ds_v4_stream_tool_calls_parallel.sse",
        "ds_v4_stream_thinking_tool_call.sse",
        "ds_stream_keepalive.sse",
        "ds_v4_stream_length_in_reasoning.sse",
        "ds_stream_insufficient_system_resource.sse",
        "ds_v4_stream_truncated_no_done.sse",
        "ds_v4_stream_reasoning_only_stop.sse",
        "openai_stream_include_usage.sse",
        "openai_stream_parallel_tool_calls.sse",
        "llamacpp_stream_tool_call.sse",
        "llamacpp_stream_tool_result_answer.sse",
        "llamacpp_stream_error_midstream.sse",
    ];
    // the Anthropic format: covered by dsh-llm-anthropic's wire tests
    let other_format = ["ds_anthropic_stream_thinking_tool_use.sse"];
    let mut found: Vec<String> = std::fs::read_dir(shared("fixtures/wire"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sse"))
        .collect();
    found.sort();
    let mut listed: Vec<String> = covered
        .iter()
        .chain(other_format.iter())
        .map(|s| (*s).to_owned())
        .collect();
    listed.sort();
    assert_eq!(found, listed);
}

// ---- .json fixtures ----

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_errors_http_table() {
    let table = wire_json("ds_errors_http.json");
    let expected = [
        (401, codes::AUTH),
        (402, codes::QUOTA),
        (400, codes::INVALID_REQUEST),
        (400, codes::CONTEXT_WINDOW_EXCEEDED),
        (400, codes::INVALID_REQUEST),
        (422, codes::INVALID_REQUEST),
        (429, codes::RATE_LIMIT),
        (500, codes::SERVER),
        (503, codes::SERVER),
    ];
    let cases = table.as_array().unwrap();
    assert_eq!(cases.len(), expected.len());
    let responses = cases
        .iter()
        .map(|c| {
            ScriptResponse::status(c["status"].as_u64().unwrap() as u16, c["body"].clone())
                .with_header("x-request-id", "req-123")
        })
        .collect();
    let server = ReplayServer::with_responses(responses).await.unwrap();
    let a = adapter(&server.base_url());
    for (case, (status, code)) in cases.iter().zip(expected) {
        let chunks = collect(
            &a,
            opts("deepseek-v4-flash", None, vec![Message::user_text("hi")]),
        )
        .await;
        assert_eq!(chunks.len(), 1, "{}", case["case"]);
        let got = assemble(&chunks);
        let f = got.failure().unwrap();
        assert_eq!(case["status"].as_u64(), Some(u64::from(status)));
        assert_eq!(
            (f.status, f.code.as_str()),
            (Some(status), code),
            "{}",
            case["case"]
        );
        assert_eq!(f.request_id.as_deref(), Some("req-123"));
        assert!(!f.message.contains(KEY), "the key never appears");
        if code == codes::AUTH {
            assert!(f.message.contains("DEEPSEEK_API_KEY"));
        }
    }
    // the Authorization header carried the key; no recorded failure did
    assert_eq!(
        server.requests()[0]
            .headers
            .get("authorization")
            .map(String::as_str),
        Some(format!("Bearer {KEY}").as_str())
    );
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_error_400_reasoning_content_missing_is_a_request_error_and_never_produced() {
    let fx = wire_json("ds_error_400_reasoning_content_missing.json");
    // classification: fatal request error
    let server = ReplayServer::with_responses(vec![ScriptResponse::status(
        400,
        fx["response_body"].clone(),
    )])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let history = vec![
        Message::user_text("Read ./notes.md"),
        Message::assistant(
            vec![dsh_llm::ContentBlock::tool_call(
                "call_00_BbLkU8Y0xX7GSLtKMh3CMpTB",
                "read_file",
                "{\"path\":\"./notes.md\"}",
            )],
            "deepseek",
            "deepseek-v4-flash",
            None,
        ),
        Message::tool_result(
            "call_00_BbLkU8Y0xX7GSLtKMh3CMpTB".into(),
            vec![dsh_llm::ContentBlock::text("# Notes\n- item")],
            false,
        ),
    ];
    let got = assemble(&collect(&a, opts("deepseek-v4-flash", Some("high"), history)).await);
    assert_eq!(got.code(), Some(codes::INVALID_REQUEST));
    // the serializer did not produce the offending tail: reasoning_content is present ("")
    let body = &server.chat_bodies()[0];
    let msgs = body["messages"].as_array().unwrap();
    let tail = &msgs[msgs.len() - 3..];
    assert_ne!(
        tail,
        fx["request_messages_tail"].as_array().unwrap().as_slice()
    );
    assert_eq!(tail[1]["reasoning_content"], json!(""));
    let mut fixed = fx["request_messages_tail"].clone();
    fixed[1]
        .as_object_mut()
        .unwrap()
        .shift_insert(2, "reasoning_content".into(), json!(""));
    assert_eq!(tail, fixed.as_array().unwrap().as_slice());
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn ds_models_list() {
    let body = wire("ds_models_list.json");
    let route = DeepSeekSettings::default().official.to_route();
    let models = parse_model_list(&route, &body).unwrap();
    let ids: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["deepseek-v4-flash", "deepseek-v4-pro"]);
    assert_eq!(models[1].context_window, Some(1_048_576));
    assert_eq!(models[1].max_output_tokens, Some(393_216));
    assert_eq!(models[1].reasoning_efforts, ["high", "max", "off"]);
    // live discovery over HTTP
    let server = ReplayServer::with_responses(vec![]).await.unwrap();
    let a = adapter(&server.base_url());
    use dsh_llm::LlmAdapter;
    let live = a.discover_models("deepseek-official").await.unwrap();
    assert_eq!(live, models);
    let r = &server.requests()[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/models"));
    assert!(r.headers["user-agent"].starts_with("dsh/"));
    // a body with entries lacking ids is a typed failure, not a panic
    let e = parse_model_list(&route, r#"{"data":[{"object":"model"}]}"#).unwrap_err();
    assert_eq!(e.code, codes::TRANSPORT);
}

/// Non-streaming bodies (a server that ignored `stream:true`): fixtures 9 and 10.
#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn nonstream_bodies_are_parsed_whole() {
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::status(
            200,
            Value::String(wire("ds_v4_nonstream_thinking_tool_call.json")),
        ),
        ScriptResponse::status(
            200,
            Value::String(wire("ds_nonstream_keepalive_prefix.json")),
        ),
        ScriptResponse::status(
            200,
            wire_json("ds_v4_json_mode_empty_content.json")["response"].clone(),
        ),
    ])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let call = || opts("deepseek-v4-pro", None, vec![Message::user_text("x")]);
    let got = assemble(&collect(&a, call()).await);
    assert_eq!(got.finish, Some(FinishReason::ToolCalls));
    assert!(
        got.reasoning
            .as_deref()
            .unwrap()
            .starts_with("The user asks for the weather")
    );
    assert_eq!(
        got.calls,
        vec![(
            "call_00_bkAckVSyfjgUFe0W6hJWxMdm".to_owned(),
            "get_weather".to_owned(),
            "{\"location\": \"Hangzhou\", \"date\": \"2026-08-01\"}".to_owned()
        )]
    );
    assert_eq!(got.text, None);
    let u = got.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.cache_read_tokens, u.reasoning_tokens),
        (18, Some(384), Some(38))
    );
    // leading blank lines: the whole body is parsed
    let got = assemble(&collect(&a, call()).await);
    assert_eq!(got.text.as_deref(), Some("pong"));
    assert_eq!(got.finish, Some(FinishReason::Stop));
    // JSON mode's empty content: flagged, never a successful empty reply
    let got = assemble(&collect(&a, call()).await);
    assert_eq!(got.code(), Some(codes::EMPTY_RESPONSE));
}
