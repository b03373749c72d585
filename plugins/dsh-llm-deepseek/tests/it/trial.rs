//! Issue 13, provider defects a hostile trial found: calls sharing an id, a password in the base
//! URL, an unbounded SSE line, a same-origin redirect loop, an overflowing `Retry-After`, a base
//! URL with a query or fragment, and zero timeouts.

use std::io::{Read, Write};
use std::time::Duration;

use dsh_kernel::ErrorCode;
use dsh_llm::{FinishReason, Message, StreamChunk, codes};
use dsh_llm_deepseek::{
    DeepSeekAdapter, DeepSeekSettings, ProviderTable, SATURATED_WAIT_MS, StaticCredentials,
    StreamTranslator, retry_after_ms, retry_after_ms_at, translate_sse_bytes, try_again_hint_ms,
};
use dsh_test_support::{ReplayServer, ScriptResponse};
use serde_json::json;

use crate::common::*;

fn hi() -> dsh_llm::GenerateOptions {
    opts("deepseek-v4-flash", None, vec![Message::user_text("hi")])
}

/// The `(id, name, arguments)` of every finished call.
fn calls(chunks: &[StreamChunk]) -> Vec<(String, String, String)> {
    chunks
        .iter()
        .filter_map(|c| match c {
            StreamChunk::BlockEnd {
                block:
                    dsh_llm::ContentBlock::ToolCall {
                        id,
                        name,
                        arguments,
                    },
                ..
            } => Some((id.as_str().to_owned(), name.clone(), arguments.clone())),
            _ => None,
        })
        .collect()
}

fn assert_synthesized(id: &str) {
    let hex = id
        .strip_prefix("call_dsh_")
        .unwrap_or_else(|| panic!("{id}"));
    assert_eq!(hex.len(), 32, "{id}");
    assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
}

#[test]
fn two_calls_sharing_a_wire_id_in_one_delta_stay_two_calls() {
    let body = concat!(
        "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[",
        "{\"index\":0,\"id\":\"X\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"file_path\\\":\\\"a.txt\\\"}\"}},",
        "{\"index\":1,\"id\":\"X\",\"function\":{\"name\":\"glob\",\"arguments\":\"{\\\"pattern\\\":\\\"*.txt\\\"}\"}}",
        "]}}]}\n\n",
        "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    for read in [1, 7, 64 * 1024] {
        let out = translate_sse_bytes(body.as_bytes(), read);
        let got = calls(&out);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            (got[0].0.as_str(), got[0].1.as_str(), got[0].2.as_str()),
            ("X", "read", "{\"file_path\":\"a.txt\"}")
        );
        assert_synthesized(&got[1].0);
        assert_eq!(
            (got[1].1.as_str(), got[1].2.as_str()),
            ("glob", "{\"pattern\":\"*.txt\"}")
        );
        assert!(matches!(
            out.last(),
            Some(StreamChunk::Finish {
                reason: FinishReason::ToolCalls,
                ..
            })
        ));
    }
    // later fragments keyed by index still reach their own call
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"X\",\"function\":{\"name\":\"read\",\"arguments\":\"{\"}},{\"index\":1,\"id\":\"X\",\"function\":{\"name\":\"glob\",\"arguments\":\"[\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"X\",\"function\":{\"arguments\":\"]\"}},{\"index\":0,\"function\":{\"arguments\":\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    let got = calls(&translate_sse_bytes(body.as_bytes(), 64));
    let names: Vec<(&str, &str)> = got
        .iter()
        .map(|(_, n, a)| (n.as_str(), a.as_str()))
        .collect();
    assert_eq!(names, [("read", "{}"), ("glob", "[]")]);
    assert_eq!(got[0].0, "X");
    assert_synthesized(&got[1].0);
}

#[test]
fn a_non_streaming_body_with_a_repeated_call_id_keeps_both_calls() {
    let body = json!({"id":"r","choices":[{"index":0,"finish_reason":"tool_calls","message":{
    "role":"assistant","content":null,"tool_calls":[
        {"id":"X","type":"function","function":{"name":"read","arguments":"{\"file_path\":\"a.txt\"}"}},
        {"id":"X","type":"function","function":{"name":"glob","arguments":"{\"pattern\":\"*.txt\"}"}}
    ]}}]});
    let mut tr = StreamTranslator::new();
    let mut out = Vec::new();
    tr.push_completion(&body.to_string(), &mut out);
    let got = calls(&out);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0, "X");
    assert_eq!(got[0].2, "{\"file_path\":\"a.txt\"}");
    assert_synthesized(&got[1].0);
    assert_eq!(got[1].2, "{\"pattern\":\"*.txt\"}");
}

/// A loopback port nobody listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A loopback server that accepts connections, reads, and never answers.
fn silent_server() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s);
        }
    });
    port
}

fn failure_of(chunks: &[StreamChunk]) -> dsh_llm::LlmFailure {
    match chunks.last() {
        Some(StreamChunk::Finish {
            reason: FinishReason::Error { failure },
            ..
        }) => failure.clone(),
        other => panic!("no failure: {other:?}"),
    }
}

#[tokio::test]
async fn a_password_in_the_base_url_never_appears_in_a_message() {
    // transport failure
    let port = closed_port();
    let a = adapter(&format!("http://user:s3cret@127.0.0.1:{port}"));
    let f = failure_of(&collect(&a, hi()).await);
    assert_eq!(f.code, codes::TRANSPORT);
    assert!(
        f.message.starts_with(&format!(
            "deepseek: POST http://user:***@127.0.0.1:{port}/chat/completions failed: "
        )),
        "{}",
        f.message
    );
    assert!(!f.message.contains("s3cret"), "{}", f.message);

    // first-byte timeout
    let port = silent_server();
    let mut s = settings(&format!("http://user:s3cret@127.0.0.1:{port}/v1"));
    s.timeouts.first_byte_ms = 200;
    let a = adapter_with(s);
    let f = failure_of(&collect(&a, hi()).await);
    assert_eq!(f.code, codes::TIMEOUT);
    assert_eq!(
        f.message,
        format!(
            "deepseek: POST http://user:***@127.0.0.1:{port}/v1/chat/completions timed out \
             after 200 ms waiting for the response headers (first_byte_timeout_ms = 200)"
        )
    );

    // a user name alone (often a token) is hidden too
    let port = closed_port();
    let a = adapter(&format!("http://tok3n@127.0.0.1:{port}"));
    let f = failure_of(&collect(&a, hi()).await);
    assert!(!f.message.contains("tok3n"), "{}", f.message);
    assert!(
        f.message.contains(&format!(
            "POST http://***@127.0.0.1:{port}/chat/completions"
        )),
        "{}",
        f.message
    );

    // the configuration error
    let e = DeepSeekAdapter::with_credentials(
        DeepSeekSettings::official_at("ftp://user:s3cret@h/v1"),
        StaticCredentials::new([]),
    )
    .unwrap_err();
    assert_eq!(e.code(), "INVALID_BASE_URL");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    assert!(e.to_string().contains("\"ftp://user:***@h/v1\""), "{e}");
}

#[tokio::test]
async fn the_password_is_still_sent_to_the_server() {
    let server = ReplayServer::with_responses(vec![ScriptResponse::text("ok")])
        .await
        .unwrap();
    let base = server
        .base_url()
        .replacen("http://", "http://user:s3cret@", 1);
    // a keyless route: the URL's credentials authenticate
    let table: ProviderTable = serde_json::from_value(json!({
        "deepseek": {"enabled": false},
        "local": {"base_url": base, "models": ["m"]},
    }))
    .unwrap();
    let a = DeepSeekAdapter::with_credentials(table.to_settings(None), StaticCredentials::new([]))
        .unwrap();
    let c = dsh_llm::LlmCallConfig::new("local", "m");
    let o = dsh_llm::GenerateOptions::new(&c, vec![std::sync::Arc::new(Message::user_text("hi"))]);
    let got = assemble(&collect(&a, o).await);
    assert_eq!(got.text.as_deref(), Some("ok"));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    // base64("user:s3cret")
    assert_eq!(
        reqs[0].headers.get("authorization").map(String::as_str),
        Some("Basic dXNlcjpzM2NyZXQ=")
    );
}

/// Serves a 200 SSE head, then `data: ` and `fill` bytes of `a` without a newline, then keeps
/// the connection open for 30 s.
fn endless_line_server(fill: usize) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let mut buf = [0u8; 64 * 1024];
        let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
        let _ = s.read(&mut buf);
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: ";
        if s.write_all(head.as_bytes()).is_err() {
            return;
        }
        let block = vec![b'a'; 256 * 1024];
        let mut sent = 0;
        while sent < fill {
            if s.write_all(&block).is_err() {
                return;
            }
            sent += block.len();
        }
        std::thread::sleep(Duration::from_secs(30));
    });
    url
}

#[tokio::test]
async fn an_sse_line_longer_than_the_cap_fails_the_attempt() {
    let url = endless_line_server(17 * 1024 * 1024);
    let mut s = settings(&url);
    s.timeouts.idle_ms = 60_000;
    let a = adapter_with(s);
    let chunks = tokio::time::timeout(Duration::from_secs(60), collect(&a, hi()))
        .await
        .expect("the attempt ends before the idle timeout");
    let f = failure_of(&chunks);
    assert_eq!(f.code, "SSE_LINE_TOO_LONG");
    assert_eq!(
        f.message,
        format!(
            "deepseek: POST {url}/chat/completions: the provider sent an SSE line or event \
             longer than 16777216 bytes; dsh stops reading the response"
        )
    );
}

#[tokio::test]
async fn a_same_origin_redirect_loop_is_too_many_redirects() {
    let hops: Vec<ScriptResponse> = (0..8)
        .map(|_| {
            ScriptResponse::status(307, json!("")).with_header("location", "/chat/completions")
        })
        .collect();
    let server = ReplayServer::with_responses(hops).await.unwrap();
    let a = adapter(&server.base_url());
    let f = failure_of(&collect(&a, hi()).await);
    assert_eq!(f.code, codes::REDIRECT_REFUSED);
    assert_eq!(f.status, Some(307));
    assert_eq!(
        f.message,
        format!(
            "deepseek: POST {}/chat/completions: too many redirects (5); dsh stops following \
             them (HTTP 307)",
            server.base_url()
        )
    );
    assert_eq!(server.requests().len(), 6);
}

#[tokio::test]
async fn an_overflowing_retry_after_is_a_wait_too_long() {
    let now = std::time::SystemTime::now();
    assert_eq!(
        retry_after_ms_at("99999999999999999999999", now),
        Some(SATURATED_WAIT_MS)
    );
    assert_eq!(retry_after_ms_at("1e400", now), Some(SATURATED_WAIT_MS));
    // Fits a u64 in ms but not the log's lossless integers (the second trial's case).
    assert_eq!(
        retry_after_ms_at("9007199254741", now),
        Some(SATURATED_WAIT_MS)
    );
    assert_eq!(SATURATED_WAIT_MS, 9_007_199_254_740_991);
    assert_eq!(retry_after_ms_at("inf", now), None);
    assert_eq!(retry_after_ms("3"), Some(3_000));
    assert_eq!(
        try_again_hint_ms("try again in 99999999999999999999999 s"),
        Some(SATURATED_WAIT_MS)
    );
    for (header, value) in [
        ("retry-after", "99999999999999999999999"),
        ("retry-after-ms", "99999999999999999999999"),
    ] {
        let server = ReplayServer::with_responses(vec![
            ScriptResponse::status(429, json!({"error":{"message":"slow down"}}))
                .with_header(header, value),
        ])
        .await
        .unwrap();
        let a = adapter(&server.base_url());
        let f = failure_of(&collect(&a, hi()).await);
        assert_eq!(f.code, codes::RATE_LIMIT);
        assert_eq!(
            f.provider_retry_after_ms,
            Some(SATURATED_WAIT_MS),
            "{header}"
        );
    }
}

#[test]
fn a_base_url_with_a_query_or_fragment_is_refused() {
    for url in [
        "http://127.0.0.1:18801/v1?x=1#frag",
        "http://127.0.0.1:18801/v1?x=1",
        "http://127.0.0.1:18801/v1#frag",
        "http://127.0.0.1:18801/v1?",
    ] {
        let e = DeepSeekAdapter::with_credentials(
            DeepSeekSettings::official_at(url),
            StaticCredentials::new([]),
        )
        .unwrap_err();
        assert_eq!(e.code(), "INVALID_BASE_URL");
        assert_eq!(
            e.to_string(),
            format!(
                "provider route \"deepseek\" has an invalid base_url {url:?}: it has a query \
                 or a fragment (dsh appends /chat/completions to the base URL, so it must end \
                 with its path) (set it with [providers.deepseek] base_url or \
                 DEEPSEEK_BASE_URL; it is the part before /chat/completions, e.g. \
                 https://api.deepseek.com or http://127.0.0.1:8080/v1)"
            )
        );
    }
}

#[test]
fn a_zero_timeout_is_a_settings_error_naming_the_key() {
    for (route, key) in [
        ("deepseek", "connect_timeout_ms"),
        ("deepseek", "first_byte_timeout_ms"),
        ("local", "stream_idle_timeout_ms"),
    ] {
        let mut t = json!({ key: 0 });
        if route == "local" {
            t["base_url"] = json!("http://127.0.0.1:8080/v1");
        }
        let table: ProviderTable = serde_json::from_value(json!({ route: t })).unwrap();
        let e =
            DeepSeekAdapter::with_credentials(table.to_settings(None), StaticCredentials::new([]))
                .unwrap_err();
        assert_eq!(e.code(), "INVALID_SETTINGS");
        assert_eq!(
            e.to_string(),
            format!(
                "invalid dsh-llm-deepseek settings: [providers.{route}] {key} must be at least \
                 1 (milliseconds); 0 would time out every request at once"
            )
        );
    }
    let mut s = DeepSeekSettings::default();
    s.timeouts.idle_ms = 0;
    let e = DeepSeekAdapter::with_credentials(s, StaticCredentials::new([])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid dsh-llm-deepseek settings: timeouts.idle_ms must be at least 1 (milliseconds); \
         0 would time out every request at once"
    );
}
