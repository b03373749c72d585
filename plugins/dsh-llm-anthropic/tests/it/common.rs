//! Shared helpers: the fixture corpus, an adapter on a replay server, chunk collection with the
//! adapter-contract checks, assembly through the real `BlockAssembler`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use dsh_llm::{
    BlockAssembler, FinishReason, GenerateOptions, LlmAdapter, LlmCallConfig, Message, StreamChunk,
};
use dsh_llm_anthropic::{AnthropicAdapter, AnthropicSettings};
use dsh_llm_http::{StaticCredentials, Timeouts};
use futures::StreamExt;
use serde_json::Value;

pub const KEY: &str = "sk-ant-test-secret-key";
pub const ROUTE: &str = "anthropic";

/// `shared/fixtures/wire/<name>` (read at run time; the tests calling this are ignored at build
/// time when the corpus is absent and `CI` is unset, see `dsh-shared-corpus`).
pub fn wire_path(name: &str) -> PathBuf {
    dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "fixtures/wire").join(name)
}

pub fn wire(name: &str) -> String {
    std::fs::read_to_string(wire_path(name)).unwrap()
}

pub fn wire_json(name: &str) -> Value {
    serde_json::from_str(&wire(name)).unwrap()
}

/// The `anthropic` route at `base` with key env `ANTHROPIC_API_KEY`, short timeouts.
pub fn settings(base: &str) -> AnthropicSettings {
    let mut s = AnthropicSettings::single(ROUTE, base);
    s.routes[0].api_key_env = Some("ANTHROPIC_API_KEY".to_owned());
    s.timeouts = Timeouts {
        connect_ms: 5_000,
        first_byte_ms: 10_000,
        idle_ms: 10_000,
    };
    s
}

pub fn adapter_with(s: AnthropicSettings) -> AnthropicAdapter {
    AnthropicAdapter::with_credentials(s, StaticCredentials::new([("ANTHROPIC_API_KEY", KEY)]))
        .unwrap()
}

pub fn adapter(base: &str) -> AnthropicAdapter {
    adapter_with(settings(base))
}

pub fn opts(model: &str, messages: Vec<Message>) -> GenerateOptions {
    let c = LlmCallConfig::new(ROUTE, model);
    GenerateOptions::new(&c, messages.into_iter().map(Arc::new).collect())
}

/// Collects a call's chunks; an `Err` item becomes a terminal `finish{error}`. Asserts the
/// contract: exactly one finish, last; nothing after it; usage (if any) before it; no empty
/// deltas.
pub async fn collect(adapter: &AnthropicAdapter, o: GenerateOptions) -> Vec<StreamChunk> {
    let mut s = adapter.stream(o);
    let mut out = Vec::new();
    while let Some(item) = s.next().await {
        assert!(
            !matches!(out.last(), Some(StreamChunk::Finish { .. })),
            "chunk after finish: {item:?}"
        );
        match item {
            Ok(c) => out.push(c),
            Err(failure) => out.push(StreamChunk::Finish {
                reason: FinishReason::Error { failure },
                replay_state: None,
            }),
        }
    }
    let finishes = out
        .iter()
        .filter(|c| matches!(c, StreamChunk::Finish { .. }))
        .count();
    assert_eq!(finishes, 1, "exactly one finish: {out:?}");
    for c in &out {
        if let StreamChunk::TextDelta { text, .. } | StreamChunk::ReasoningDelta { text, .. } = c {
            assert!(!text.is_empty(), "empty delta emitted");
        }
    }
    out
}

/// The assistant message the real assembler builds from `chunks` of `model` on [`ROUTE`].
pub fn message(chunks: &[StreamChunk], model: &str) -> Message {
    let mut a = BlockAssembler::new();
    for c in chunks {
        a.push(c);
    }
    a.message(ROUTE, model).unwrap()
}

pub fn finish(chunks: &[StreamChunk]) -> FinishReason {
    match chunks.last() {
        Some(StreamChunk::Finish { reason, .. }) => reason.clone(),
        other => panic!("no finish: {other:?}"),
    }
}

pub fn usage(chunks: &[StreamChunk]) -> Option<dsh_llm::TokenUsage> {
    chunks.iter().rev().find_map(|c| match c {
        StreamChunk::Usage { usage } => Some(*usage),
        _ => None,
    })
}
