//! Issue 13 ("Faults and bad input", provider I/O): per-route timeouts and their settings keys,
//! invalid base URLs, `Retry-After` in both forms, redirects, invalid UTF-8, estimated usage,
//! unique tool-call ids and nameless calls that are not replayed.

use std::io::{Read, Write};
use std::time::{Duration, SystemTime};

use dsh_kernel::ErrorCode;
use dsh_llm::{ContentBlock, FinishReason, Message, StreamChunk, codes};
use dsh_llm_deepseek::{
    DeepSeekAdapter, DeepSeekSettings, ProviderTable, RouteTimeouts, StaticCredentials,
    StreamTranslator, Timeouts, build_body, retry_after_ms_at,
};
use dsh_test_support::{ReplayServer, ScriptResponse};
use serde_json::{Value, json};

use crate::common::*;

fn hi() -> dsh_llm::GenerateOptions {
    opts("deepseek-v4-flash", None, vec![Message::user_text("hi")])
}

#[test]
fn timeout_keys_tune_the_built_in_route_without_adding_one() {
    let table: ProviderTable = serde_json::from_value(json!({
        "deepseek": {"first_byte_timeout_ms": 500, "stream_idle_timeout_ms": 700},
        "local": {"base_url": "http://127.0.0.1:8080/v1", "connect_timeout_ms": 50},
    }))
    .unwrap();
    let s = table.to_settings(None);
    let routes = s.all_routes();
    let ids: Vec<&str> = routes.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["deepseek", "local"]);
    assert_eq!(routes[0].base_url, "https://api.deepseek.com");
    let a = DeepSeekAdapter::with_credentials(s, StaticCredentials::new([])).unwrap();
    assert_eq!(
        a.route_timeouts("deepseek"),
        Some(Timeouts {
            connect_ms: 10_000,
            first_byte_ms: 500,
            idle_ms: 700
        })
    );
    assert_eq!(
        a.route_timeouts("local"),
        Some(Timeouts {
            connect_ms: 50,
            first_byte_ms: 180_000,
            idle_ms: 300_000
        })
    );
    assert_eq!(
        a.timeouts(),
        Timeouts {
            connect_ms: 10_000,
            first_byte_ms: 180_000,
            idle_ms: 300_000
        }
    );
    assert_eq!(
        RouteTimeouts::default().resolve(Timeouts::default()),
        Timeouts::default()
    );
}

#[test]
fn an_invalid_base_url_is_refused_when_the_adapter_is_built() {
    for (url, reason) in [
        ("notaurl", "relative URL without a base"),
        (
            "ftp://h/v1",
            "the scheme is \"ftp\"; expected http or https",
        ),
        ("http://", "empty host"),
    ] {
        let e = DeepSeekAdapter::with_credentials(
            DeepSeekSettings::official_at(url),
            StaticCredentials::new([]),
        )
        .unwrap_err();
        assert_eq!(ErrorCode::code(&e), "INVALID_BASE_URL");
        assert_eq!(
            e.to_string(),
            format!(
                "provider route \"deepseek\" has an invalid base_url {url:?}: {reason} (set it \
                 with [providers.deepseek] base_url or DEEPSEEK_BASE_URL; it is the part before \
                 /chat/completions, e.g. https://api.deepseek.com or http://127.0.0.1:8080/v1)"
            )
        );
    }
}

#[test]
fn retry_after_takes_seconds_and_http_dates() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
    assert_eq!(retry_after_ms_at("2", now), Some(2_000));
    assert_eq!(retry_after_ms_at(" 1.5 ", now), Some(1_500));
    assert_eq!(
        retry_after_ms_at("Sun, 06 Nov 1994 08:50:07 GMT", now),
        Some(30_000)
    );
    // a date in the past, zero, garbage: no provider delay
    assert_eq!(
        retry_after_ms_at("Sun, 06 Nov 1994 08:49:00 GMT", now),
        None
    );
    assert_eq!(retry_after_ms_at("0", now), None);
    assert_eq!(retry_after_ms_at("soon", now), None);
}

#[tokio::test]
async fn a_same_origin_redirect_is_followed_and_another_origin_is_refused() {
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::status(307, json!("")).with_header("location", "/v1/chat/completions"),
        ScriptResponse::text("moved"),
    ])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let got = assemble(&collect(&a, hi()).await);
    assert_eq!(got.text.as_deref(), Some("moved"));
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/chat/completions", "/v1/chat/completions"]);

    let other = ReplayServer::with_responses(vec![ScriptResponse::text("leak")])
        .await
        .unwrap();
    let location = format!("{}/chat/completions", other.base_url());
    let first = ReplayServer::with_responses(vec![
        ScriptResponse::status(308, json!("")).with_header("location", &location),
    ])
    .await
    .unwrap();
    let a = adapter(&first.base_url());
    let got = assemble(&collect(&a, hi()).await);
    let f = got.failure().unwrap();
    assert_eq!(f.code, codes::REDIRECT_REFUSED);
    assert_eq!(f.status, Some(308));
    assert_eq!(
        f.message,
        format!(
            "deepseek: the provider redirected the request to another origin ({location}); dsh \
             does not follow it (HTTP 308)"
        )
    );
    assert!(other.requests().is_empty());
}

/// Serves one raw HTTP response (`head` then `body`, in reads of `split` bytes) on loopback.
fn raw_server(body: Vec<u8>, split: usize) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut req = Vec::new();
        // read the request head and its body (Content-Length)
        loop {
            let n = s.read(&mut buf).unwrap();
            req.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&req).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let len = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if req.len() >= end + 4 + len {
                    break;
                }
            }
        }
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        s.write_all(head.as_bytes()).unwrap();
        for part in body.chunks(split) {
            s.write_all(part).unwrap();
            s.flush().unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    url
}

#[tokio::test]
async fn invalid_utf8_from_the_provider_becomes_replacement_characters() {
    let chunk = |content: &[u8]| {
        let mut v =
            b"data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec();
        v.extend_from_slice(content);
        v.extend_from_slice(b"\"},\"finish_reason\":null}]}\n\n");
        v
    };
    let mut body = chunk(b"caf\xc3\xa9 ");
    body.extend(chunk(b"bad \xff byte"));
    body.extend_from_slice(b"data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    // one-byte reads split "é" across reads
    let a = adapter(&raw_server(body, 1));
    let got = assemble(&collect(&a, hi()).await);
    assert_eq!(got.finish, Some(FinishReason::Stop));
    assert_eq!(got.text.as_deref(), Some("café bad \u{FFFD} byte"));
}

#[tokio::test]
async fn a_stream_without_usage_reports_an_estimate_marked_estimated() {
    let body = concat!(
        "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n",
        "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello world\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let server = ReplayServer::with_responses(vec![ScriptResponse::sse(body)])
        .await
        .unwrap();
    let a = adapter(&server.base_url());
    let chunks = collect(&a, hi()).await;
    let sent = server.chat_bodies()[0].to_string().len() as u64;
    let usage: Vec<Value> = chunks
        .iter()
        .filter(|c| matches!(c, StreamChunk::Usage { .. }))
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    // prompt: ceil(request bytes / 4); completion: ceil(("think" + "hello world") bytes / 4) = 4
    assert_eq!(
        usage,
        [json!({"type": "usage", "usage": {
            "inputTokens": sent.div_ceil(4), "outputTokens": 4, "estimated": true}})]
    );
    // with a wire usage nothing is estimated
    let server = ReplayServer::with_responses(vec![ScriptResponse::text("x")])
        .await
        .unwrap();
    let got = assemble(&collect(&adapter(&server.base_url()), hi()).await);
    assert!(!got.usage.unwrap().estimated);
}

fn call_chunk(id: Option<&str>, name: &str) -> String {
    let mut call = json!({"index": 0, "function": {"name": name, "arguments": "{}"}});
    if let Some(id) = id {
        call["id"] = json!(id);
    }
    format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        json!({"id": "cmpl-same", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}),
        json!({"id": "cmpl-same", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    )
}

fn call_ids(tr: &mut StreamTranslator, body: &str) -> Vec<String> {
    let mut out = Vec::new();
    for frame in body.split("\n\n").filter(|f| !f.is_empty()) {
        tr.push_data(frame.trim_start_matches("data: "), &mut out);
    }
    out.iter()
        .filter_map(|c| match c {
            StreamChunk::BlockEnd {
                block: ContentBlock::ToolCall { id, .. },
                ..
            } => Some(id.as_str().to_owned()),
            _ => None,
        })
        .collect()
}

#[test]
fn call_ids_are_unique_across_responses_that_repeat_their_ids() {
    // the same completion id and no call id, twice: two different synthesized ids
    let a = call_ids(&mut StreamTranslator::new(), &call_chunk(None, "read"));
    let b = call_ids(&mut StreamTranslator::new(), &call_chunk(None, "read"));
    assert_eq!((a.len(), b.len()), (1, 1));
    assert_ne!(a, b);
    assert!(a[0].starts_with("call_dsh_"), "{a:?}");
    // a wire id the history already used is replaced; a new one is kept
    let mut tr = StreamTranslator::new();
    tr.reserve_call_ids(["call_0".to_owned()]);
    let c = call_ids(&mut tr, &call_chunk(Some("call_0"), "read"));
    assert!(c[0].starts_with("call_dsh_"), "{c:?}");
    let mut tr = StreamTranslator::new();
    tr.reserve_call_ids(["call_0".to_owned()]);
    assert_eq!(
        call_ids(&mut tr, &call_chunk(Some("call_1"), "read")),
        ["call_1"]
    );
}

#[test]
fn a_nameless_call_and_its_result_are_not_replayed() {
    let route = DeepSeekSettings::default().official.to_route();
    let history = vec![
        Message::user_text("go"),
        Message::assistant(
            vec![ContentBlock::tool_call("c1", "", "{}")],
            "deepseek",
            "deepseek-v4-flash",
            None,
        ),
        Message::tool_result("c1".into(), vec![ContentBlock::text("no such tool")], true),
        Message::assistant(
            vec![
                ContentBlock::tool_call("c2", " ", "{}"),
                ContentBlock::tool_call("c3", "read", "{}"),
            ],
            "deepseek",
            "deepseek-v4-flash",
            None,
        ),
        Message::user(
            vec![
                ContentBlock::ToolResult {
                    tool_call_id: "c2".into(),
                    content: vec![ContentBlock::text("no name")],
                    is_error: Some(true),
                },
                ContentBlock::ToolResult {
                    tool_call_id: "c3".into(),
                    content: vec![ContentBlock::text("ok")],
                    is_error: None,
                },
            ],
            dsh_llm::MessageSource::User,
        ),
    ];
    let b = build_body(&route, &opts("deepseek-v4-flash", Some("off"), history)).unwrap();
    let shape: Vec<Value> = b["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            json!([
                m["role"],
                m.get("tool_calls").map(|c| c
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["id"].clone())
                    .collect::<Vec<_>>()),
                m.get("tool_call_id")
            ])
        })
        .collect();
    assert_eq!(
        shape,
        [
            json!(["user", null, null]),
            json!(["assistant", ["c3"], null]),
            json!(["tool", null, "c3"]),
        ]
    );
}
