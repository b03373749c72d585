//! In-process parser cases (`translate_sse_bytes`, no HTTP) and a few over HTTP: leading BOM,
//! CR-only and CRLF line endings, frames after `[DONE]`, 1-byte reads, and the streaming bug
//! cases BC-01, BC-02, BC-05, BC-07.

use dsh_llm::{FinishReason, Message, StreamChunk, codes};
use dsh_llm_deepseek::{translate_sse_bytes, try_again_hint_ms};
use dsh_test_support::{ReplayServer, ScriptResponse};
use serde_json::{Value, json};

use crate::common::*;

fn chunk(delta: Value, finish: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id":"resp-1","choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
    )
}

fn tc(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut f = json!({"arguments": args});
    if let Some(n) = name {
        f["name"] = json!(n);
    }
    let mut t = json!({"index": index, "function": f});
    if let Some(i) = id {
        t["id"] = json!(i);
        t["type"] = json!("function");
    }
    json!({"tool_calls": [t]})
}

/// Synthesized call ids (`call_dsh_` + 32 hex digits, fresh per call) replaced by
/// `synth-<k>` in order of first appearance, so runs can be compared.
fn normalize_ids(chunks: Vec<StreamChunk>) -> Vec<StreamChunk> {
    let mut seen: Vec<String> = Vec::new();
    let mut rename = |id: &mut dsh_llm::CallId| {
        let s = id.as_str().to_owned();
        if let Some(hex) = s.strip_prefix("call_dsh_") {
            assert_eq!(hex.len(), 32, "{s}");
            assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{s}");
            let k = seen.iter().position(|x| *x == s).unwrap_or_else(|| {
                seen.push(s.clone());
                seen.len() - 1
            });
            *id = dsh_llm::CallId::new(format!("synth-{k}"));
        }
    };
    chunks
        .into_iter()
        .map(|mut c| {
            match &mut c {
                StreamChunk::ToolCallDelta { id, .. } => rename(id),
                StreamChunk::BlockEnd {
                    block: dsh_llm::ContentBlock::ToolCall { id, .. },
                    ..
                } => rename(id),
                _ => {}
            }
            c
        })
        .collect()
}

fn run_all_read_sizes(body: &str) -> Assembled {
    let reference = normalize_ids(translate_sse_bytes(body.as_bytes(), 64 * 1024));
    check_contract(&reference);
    for read in [1, 3, 7, 64] {
        let got = normalize_ids(translate_sse_bytes(body.as_bytes(), read));
        assert_eq!(got, reference, "read size {read} changes the result");
    }
    assemble(&reference)
}

#[test]
fn leading_bom_cr_only_and_crlf() {
    let lf = format!(
        "{}{}data: [DONE]\n\n",
        chunk(json!({"content":"hi"}), Value::Null),
        chunk(json!({"content":""}), json!("stop"))
    );
    let plain = run_all_read_sizes(&lf);
    assert_eq!(plain.text.as_deref(), Some("hi"));
    assert_eq!(plain.finish, Some(FinishReason::Stop));
    let bom = format!("\u{feff}{lf}");
    assert_eq!(run_all_read_sizes(&bom), plain);
    let cr = lf.replace('\n', "\r");
    assert_eq!(run_all_read_sizes(&cr), plain);
    let crlf = lf.replace('\n', "\r\n");
    assert_eq!(run_all_read_sizes(&crlf), plain);
}

#[test]
fn frames_after_done_are_ignored() {
    let body = format!(
        "{}{}data: [DONE]\n\n{}data: [DONE]\n\n",
        chunk(json!({"content":"a"}), Value::Null),
        chunk(json!({}), json!("stop")),
        chunk(json!({"content":"LATE"}), json!("length")),
    );
    let got = run_all_read_sizes(&body);
    assert_eq!(got.text.as_deref(), Some("a"));
    assert_eq!(got.finish, Some(FinishReason::Stop));
}

#[tokio::test]
async fn bom_cr_only_and_frames_after_done_over_http() {
    let body = format!(
        "\u{feff}{}{}data: [DONE]\n\n{}",
        chunk(json!({"content":"hi"}), Value::Null),
        chunk(json!({}), json!("stop")),
        chunk(json!({"content":"LATE"}), Value::Null),
    )
    .replace('\n', "\r");
    let server = ReplayServer::with_responses(vec![ScriptResponse::sse(body)])
        .await
        .unwrap();
    let a = adapter(&server.base_url());
    let got = assemble(
        &collect(
            &a,
            opts("deepseek-v4-flash", None, vec![Message::user_text("x")]),
        )
        .await,
    );
    assert_eq!(got.text.as_deref(), Some("hi"));
    assert_eq!(got.finish, Some(FinishReason::Stop));
}

#[test]
fn bc01_interleaved_parallel_fragments_route_by_index() {
    let body = [
        chunk(tc(0, Some("call_A"), Some("read"), ""), Value::Null),
        chunk(tc(1, Some("call_B"), Some("grep"), ""), Value::Null),
        chunk(tc(0, None, None, "{\"path\":"), Value::Null),
        chunk(tc(1, None, None, "{\"pattern\":"), Value::Null),
        chunk(tc(0, None, None, "\"a.txt\"}"), Value::Null),
        chunk(tc(1, None, None, "\"TODO\"}"), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let got = run_all_read_sizes(&body);
    assert_eq!(
        got.calls,
        vec![
            (
                "call_A".into(),
                "read".into(),
                "{\"path\":\"a.txt\"}".into()
            ),
            (
                "call_B".into(),
                "grep".into(),
                "{\"pattern\":\"TODO\"}".into()
            ),
        ]
    );
    assert_eq!(got.finish, Some(FinishReason::ToolCalls));
}

#[test]
fn bc01_variant_reused_index_with_fresh_ids_starts_new_calls() {
    let body = [
        chunk(
            tc(0, Some("call_A"), Some("read"), "{\"path\":"),
            Value::Null,
        ),
        chunk(tc(0, None, None, "\"a\"}"), Value::Null),
        chunk(
            tc(0, Some("call_B"), Some("grep"), "{\"pattern\":"),
            Value::Null,
        ),
        chunk(tc(0, None, None, "\"b\"}"), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let got = run_all_read_sizes(&body);
    assert_eq!(
        got.calls,
        vec![
            ("call_A".into(), "read".into(), "{\"path\":\"a\"}".into()),
            ("call_B".into(), "grep".into(), "{\"pattern\":\"b\"}".into()),
        ]
    );
}

#[test]
fn bc02_empty_ids_and_names_count_as_absent() {
    // (a) continuation repeats "" id and name
    let body = [
        chunk(tc(0, Some("call_1"), Some("bash"), "{\"comm"), Value::Null),
        chunk(tc(0, Some(""), Some(""), "and\":\"ls\"}"), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let got = run_all_read_sizes(&body);
    assert_eq!(
        got.calls,
        vec![(
            "call_1".into(),
            "bash".into(),
            "{\"command\":\"ls\"}".into()
        )]
    );
    // (b) no id ever: a fresh synthesized id per call, stable within the response (the
    // response id is not used: gateways repeat it across responses); (b2) no name
    let body = [
        chunk(
            tc(0, Some(""), Some("bash"), "{\"command\":\"pwd\"}"),
            Value::Null,
        ),
        chunk(tc(1, Some(""), Some(""), "{}"), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let got = run_all_read_sizes(&body);
    assert_eq!(
        got.calls,
        vec![
            (
                "synth-0".into(),
                "bash".into(),
                "{\"command\":\"pwd\"}".into()
            ),
            ("synth-1".into(), "".into(), "{}".into()),
        ]
    );
    // a late real id is adopted by the call that only had a synthesized one
    let body = [
        chunk(tc(0, None, Some("bash"), "{"), Value::Null),
        chunk(tc(0, Some("call_late"), None, "}"), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let got = run_all_read_sizes(&body);
    assert_eq!(
        got.calls,
        vec![("call_late".into(), "bash".into(), "{}".into())]
    );
}

#[test]
fn bc05_comments_blank_lines_data_without_space_and_events() {
    let body = concat!(
        ": OPENROUTER PROCESSING\n\n:\n\n",
        "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        ": keepalive\n",
        "data:{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
        "event: ping\ndata: {\"type\":\"ping\"}\n\n",
        "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let got = run_all_read_sizes(body);
    assert_eq!(got.text.as_deref(), Some("hi"));
    assert_eq!(got.finish, Some(FinishReason::Stop));
    let got = run_all_read_sizes(&body.replace('\n', "\r\n"));
    assert_eq!(got.text.as_deref(), Some("hi"));
}

#[test]
fn bc07_arguments_stay_raw_and_truncation_is_surfaced() {
    // (a) truncated arguments + length: raw text kept, finish max-tokens (the assembler drops
    // tool calls on max-tokens, so nothing executes)
    let body = [
        chunk(
            tc(
                0,
                Some("call_w"),
                Some("write"),
                "{\"path\":\"notes.md\",\"content\":\"line1\\nline2",
            ),
            Value::Null,
        ),
        chunk(json!({}), json!("length")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let got = run_all_read_sizes(&body);
    assert_eq!(got.finish, Some(FinishReason::MaxTokens));
    assert_eq!(
        got.calls[0].2,
        "{\"path\":\"notes.md\",\"content\":\"line1\\nline2"
    );
    // (b) non-object arguments are passed through raw (the tool layer rejects them)
    // (d) raw control characters inside the argument text are kept byte-exact
    let raw = "{\"c\":\"a\u{1}b\"}";
    let body = [
        chunk(tc(0, Some("call_b"), Some("bash"), "[\"ls\"]"), Value::Null),
        chunk(tc(1, Some("call_c"), Some("bash"), raw), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let got = run_all_read_sizes(&body);
    assert_eq!(got.calls[0].2, "[\"ls\"]");
    assert_eq!(got.calls[1].2, raw);
    // (c) 64 KB in 500 fragments, byte-identical
    let content = "x".repeat(64 * 1024);
    let args = json!({"path": "big", "content": content}).to_string();
    let mut parts = vec![chunk(
        tc(0, Some("call_big"), Some("write"), ""),
        Value::Null,
    )];
    let step = args.len().div_ceil(500);
    for piece in args.as_bytes().chunks(step) {
        parts.push(chunk(
            tc(0, None, None, std::str::from_utf8(piece).unwrap()),
            Value::Null,
        ));
    }
    parts.push(chunk(json!({}), json!("tool_calls")));
    parts.push("data: [DONE]\n\n".to_owned());
    let out = translate_sse_bytes(parts.concat().as_bytes(), 4096);
    let got = assemble(&out);
    assert_eq!(got.calls[0].2, args);
}

#[test]
fn parsed_object_arguments_are_restringified() {
    let body = [
        "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]}}]}\n\n",
        "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n",
    ]
    .concat();
    let got = run_all_read_sizes(&body);
    assert_eq!(got.calls[0].2, "{\"a\":1}");
}

#[test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
fn malformed_json_and_done_without_finish_reason() {
    let got = run_all_read_sizes("data: {not json\n\n");
    assert_eq!(got.code(), Some(codes::TRANSPORT));
    // [DONE] without any finish_reason: a completed stop
    let got = run_all_read_sizes(&format!(
        "{}data: [DONE]\n\n",
        chunk(json!({"content":"ok"}), Value::Null)
    ));
    assert_eq!(got.finish, Some(FinishReason::Stop));
    // EOF after a finish_reason but without [DONE]: complete
    let got = run_all_read_sizes(&chunk(json!({"content":"ok"}), json!("stop")));
    assert_eq!(got.finish, Some(FinishReason::Stop));
    // content_filter ⇒ error with the uppercased code
    let got = run_all_read_sizes(&chunk(json!({"content":"x"}), json!("content_filter")));
    assert_eq!(got.code(), Some("CONTENT_FILTER"));
    // stop with nothing at all ⇒ EMPTY_RESPONSE
    let got = run_all_read_sizes(&format!(
        "{}data: [DONE]\n\n",
        chunk(json!({"content":""}), json!("stop"))
    ));
    assert_eq!(got.code(), Some(codes::EMPTY_RESPONSE));
    // block order: usage right before finish
    let out = translate_sse_bytes(wire("ds_v4_stream_thinking_tool_call.sse").as_bytes(), 1024);
    let n = out.len();
    assert!(matches!(out[n - 2], StreamChunk::Usage { .. }));
    assert!(matches!(out[n - 1], StreamChunk::Finish { .. }));
}

#[test]
fn retry_hints() {
    assert_eq!(
        try_again_hint_ms("please try again in 2 seconds"),
        Some(2000)
    );
    assert_eq!(try_again_hint_ms("Try again in 1.5s."), Some(1500));
    assert_eq!(try_again_hint_ms("try again in 250ms"), Some(250));
    assert_eq!(try_again_hint_ms("try again later"), None);
    assert_eq!(dsh_llm_deepseek::retry_after_ms("3"), Some(3000));
    assert_eq!(dsh_llm_deepseek::retry_after_ms("0"), None);
    assert_eq!(
        dsh_llm_deepseek::retry_after_ms("Wed, 21 Oct 2015 07:28:00 GMT"),
        None
    );
}

#[test]
fn http_failure_mapping_edges() {
    use dsh_llm_deepseek::http_failure;
    let f = |status: u16, body: &str| {
        http_failure("deepseek", status, body, None, None, None, Some(KEY))
    };
    assert_eq!(f(403, "{}").code, codes::AUTH);
    assert_eq!(f(404, "not here").code, "HTTP_404");
    assert_eq!(f(404, "not here").message, "deepseek: not here (HTTP 404)");
    assert_eq!(
        f(413, r#"{"error":{"message":"prompt is too long"}}"#).code,
        codes::CONTEXT_WINDOW_EXCEEDED
    );
    assert_eq!(
        f(413, r#"{"error":{"message":"payload"}}"#).code,
        codes::INVALID_REQUEST
    );
    assert_eq!(
        f(429, r#"{"error":{"type":"insufficient_quota"}}"#).code,
        codes::QUOTA
    );
    assert_eq!(f(502, "").message, "deepseek: HTTP 502 (HTTP 502)");
    assert_eq!(f(502, "").code, codes::SERVER);
    // the key is redacted if a provider echoes it
    let e = f(
        401,
        &format!(r#"{{"error":{{"message":"bad key {KEY}"}}}}"#),
    );
    assert!(!e.message.contains(KEY));
    assert!(e.message.contains("bad key ***"));
}
