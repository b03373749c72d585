//! Fault tests over real HTTP: 429 + Retry-After, disconnect mid-stream, idle stall, cancel,
//! first-byte timeout, connection refused, in-band rate limit.

use std::time::{Duration, Instant};

use dsh_llm::{FinishReason, LlmAdapter, Message, StreamChunk, codes};
use dsh_llm_deepseek::Timeouts;
use dsh_test_support::{ReplayServer, ScriptResponse};
use futures::StreamExt;
use serde_json::json;

use crate::common::*;

fn hi() -> dsh_llm::GenerateOptions {
    opts(
        "deepseek-v4-flash",
        Some("high"),
        vec![Message::user_text("hi")],
    )
}

fn short(base: &str, idle_ms: u64) -> dsh_llm_deepseek::DeepSeekAdapter {
    let mut s = settings(base);
    s.timeouts = Timeouts {
        connect_ms: 5_000,
        first_byte_ms: 10_000,
        idle_ms,
    };
    adapter_with(s)
}

#[tokio::test]
async fn rate_limit_with_retry_after_surfaces_provider_retry_after_ms() {
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::status(
            429,
            json!({"error":{"message":"Rate Limit Reached","type":"rate_limit_error","param":null,"code":"rate_limit_reached"}}),
        )
        .with_header("retry-after", "2")
        .with_header("x-request-id", "rid-429"),
        ScriptResponse::status(429, json!({"error":{"message":"You exceeded your current quota","type":"insufficient_quota"}})),
    ])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let got = assemble(&collect(&a, hi()).await);
    let f = got.failure().unwrap();
    assert_eq!(f.code, codes::RATE_LIMIT);
    assert_eq!(f.status, Some(429));
    assert_eq!(f.provider_retry_after_ms, Some(2000));
    assert_eq!(f.request_id.as_deref(), Some("rid-429"));
    // quota wording is checked before 429
    let got = assemble(&collect(&a, hi()).await);
    assert_eq!(got.code(), Some(codes::QUOTA));
}

fn long_text_sse(frames: usize) -> String {
    let mut s = String::new();
    for i in 0..frames {
        s.push_str(&format!(
            "data: {}\n\n",
            json!({"id":"r","choices":[{"index":0,"delta":{"content":format!("w{i} ")},"finish_reason":null}]})
        ));
    }
    s.push_str(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"id":"r","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]})
    ));
    s
}

#[tokio::test]
async fn disconnect_mid_stream_is_transport() {
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::sse(long_text_sse(10))
            .with_delay_ms(20)
            .with_disconnect_after(3),
    ])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let chunks = collect(&a, hi()).await;
    let got = assemble(&chunks);
    assert_eq!(got.code(), Some(codes::TRANSPORT));
    // the partial text was streamed but never closed as a finished block
    assert_eq!(got.text.as_deref(), Some("w0 w1 w2 "));
    assert!(
        !chunks
            .iter()
            .any(|c| matches!(c, StreamChunk::BlockEnd { .. }))
    );
}

#[tokio::test]
async fn stall_past_idle_timeout_is_timeout() {
    // frames every 3 s, idle watchdog 200 ms
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::sse(long_text_sse(3)).with_delay_ms(3_000),
    ])
    .await
    .unwrap();
    let a = short(&server.base_url(), 200);
    let got = assemble(&collect(&a, hi()).await);
    assert_eq!(got.code(), Some(codes::TIMEOUT));
}

#[tokio::test]
async fn keepalives_count_as_activity_for_the_idle_watchdog() {
    // comments only, 100 ms apart, for ~1.2 s, then the answer; idle watchdog 600 ms
    let mut body = String::new();
    for _ in 0..12 {
        body.push_str(": keep-alive\n\n");
    }
    body.push_str(&long_text_sse(1));
    let server = ReplayServer::with_responses(vec![ScriptResponse::sse(body).with_delay_ms(100)])
        .await
        .unwrap();
    let a = short(&server.base_url(), 600);
    let got = assemble(&collect(&a, hi()).await);
    assert_eq!(got.finish, Some(FinishReason::Stop));
    assert_eq!(got.text.as_deref(), Some("w0 "));
}

#[tokio::test]
async fn cancel_mid_stream_ends_promptly_with_aborted() {
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::sse(long_text_sse(100)).with_delay_ms(500),
    ])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let o = hi();
    let signal = o.signal.clone();
    let mut s = a.stream(o);
    // first delta arrives, then cancel
    let mut chunks = Vec::new();
    while let Some(c) = s.next().await {
        let c = c.unwrap();
        let is_delta = matches!(c, StreamChunk::TextDelta { .. });
        chunks.push(c);
        if is_delta {
            break;
        }
    }
    let t = Instant::now();
    signal.cancel();
    while let Some(c) = s.next().await {
        chunks.push(c.unwrap());
    }
    assert!(t.elapsed() < Duration::from_secs(5), "cancel did not hang");
    let got = assemble(&chunks);
    assert_eq!(got.finish.as_ref().map(FinishReason::kind), Some("aborted"));
    assert_eq!(got.code(), Some(codes::ABORTED));
}

#[tokio::test]
async fn cancel_before_start_and_while_waiting_for_headers() {
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::status(200, json!("unused")).with_delay_ms(30_000),
    ])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let o = hi();
    o.signal.cancel();
    let got = assemble(&collect(&a, o).await);
    assert_eq!(got.code(), Some(codes::ABORTED));
    assert!(server.requests().is_empty());

    let o = hi();
    let signal = o.signal.clone();
    let t = Instant::now();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        signal.cancel();
    });
    let got = assemble(&collect(&a, o).await);
    assert_eq!(got.code(), Some(codes::ABORTED));
    assert!(t.elapsed() < Duration::from_secs(5), "cancel did not hang");
}

#[tokio::test]
async fn first_byte_timeout_and_connection_refused() {
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::status(200, json!("late")).with_delay_ms(30_000),
    ])
    .await
    .unwrap();
    let mut s = settings(&server.base_url());
    s.timeouts.first_byte_ms = 200;
    let a = adapter_with(s);
    let got = assemble(&collect(&a, hi()).await);
    assert_eq!(got.code(), Some(codes::TIMEOUT));

    // a port nobody listens on
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let a = adapter(&format!("http://{dead}"));
    let got = assemble(&collect(&a, hi()).await);
    let f = got.failure().unwrap();
    assert_eq!(f.code, codes::TRANSPORT);
    assert!(!f.message.contains(KEY));
}

#[tokio::test]
async fn in_band_rate_limit_error_is_retryable_with_hint() {
    let body = format!(
        "data: {}\n\ndata: {}\n\n",
        json!({"id":"r","choices":[{"index":0,"delta":{"content":"Here is "},"finish_reason":null}]}),
        json!({"error":{"code":"rate_limit_exceeded","message":"Rate limit reached. Please try again in 2 seconds."}})
    );
    let server = ReplayServer::with_responses(vec![ScriptResponse::sse(body)])
        .await
        .unwrap();
    let a = adapter(&server.base_url());
    let got = assemble(&collect(&a, hi()).await);
    let f = got.failure().unwrap();
    assert_eq!(f.code, codes::RATE_LIMIT);
    assert_eq!(f.provider_retry_after_ms, Some(2000));
}

#[tokio::test]
async fn stateless_replay_serves_by_assistant_count() {
    let script = dsh_test_support::Script::new(vec![
        ScriptResponse::text("first"),
        ScriptResponse::text("second"),
    ]);
    let server = ReplayServer::start(
        script,
        dsh_test_support::ReplayOptions {
            stateless: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    for _ in 0..2 {
        let got = assemble(&collect(&a, hi()).await);
        assert_eq!(got.text.as_deref(), Some("first"));
    }
    let history = vec![
        Message::user_text("hi"),
        Message::assistant(
            vec![dsh_llm::ContentBlock::text("first")],
            "deepseek",
            "deepseek-v4-flash",
            None,
        ),
        Message::user_text("again"),
    ];
    let got = assemble(&collect(&a, opts("deepseek-v4-flash", None, history)).await);
    assert_eq!(got.text.as_deref(), Some("second"));
    // exhausted sequential scripts answer 500 → SERVER
    let server = ReplayServer::with_responses(vec![]).await.unwrap();
    let a = adapter(&server.base_url());
    let got = assemble(&collect(&a, hi()).await);
    assert_eq!(got.code(), Some(codes::SERVER));
}
