//! Shared helpers: paths into the `shared/` fixture corpus, adapter construction against a replay server, chunk
//! collection with contract checks, and a tiny local block assembler.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use dsh_llm::{
    ContentBlock, FinishReason, GenerateOptions, LlmAdapter, LlmCallConfig, LlmFailure, Message,
    StreamChunk, TokenUsage,
};
use dsh_llm_deepseek::{DeepSeekAdapter, DeepSeekSettings, StaticCredentials, Timeouts};
use futures::StreamExt;
use serde_json::Value;

pub const KEY: &str = "sk-test-secret-key-abcd";

/// `shared/<rel>` (the wire fixtures are data read at run time; see `docs/upstream/deepseek.md`).
/// Panics when `shared/fixtures/wire` is missing: the tests calling this are `#[ignore]`d at build
/// time when it is absent and `CI` is unset (`dsh-shared-corpus`).
pub fn shared(rel: &str) -> PathBuf {
    let wire = dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "fixtures/wire");
    wire.parent()
        .and_then(|fixtures| fixtures.parent())
        .map(|dir| dir.join(rel))
        .unwrap()
}

pub fn read_shared(rel: &str) -> String {
    std::fs::read_to_string(shared(rel)).unwrap()
}

pub fn wire(name: &str) -> String {
    read_shared(&format!("fixtures/wire/{name}"))
}

pub fn wire_json(name: &str) -> Value {
    serde_json::from_str(&wire(name)).unwrap()
}

pub fn settings(base: &str) -> DeepSeekSettings {
    let mut s = DeepSeekSettings::official_at(base);
    s.timeouts = Timeouts {
        connect_ms: 5_000,
        first_byte_ms: 10_000,
        idle_ms: 10_000,
    };
    s
}

pub fn adapter_with(s: DeepSeekSettings) -> DeepSeekAdapter {
    DeepSeekAdapter::with_credentials(s, StaticCredentials::new([("DEEPSEEK_API_KEY", KEY)]))
        .unwrap()
}

pub fn adapter(base: &str) -> DeepSeekAdapter {
    adapter_with(settings(base))
}

pub fn opts(model: &str, effort: Option<&str>, messages: Vec<Message>) -> GenerateOptions {
    let mut c = LlmCallConfig::new("deepseek", model);
    c.reasoning_effort = effort.map(str::to_owned);
    GenerateOptions::new(&c, messages.into_iter().map(Arc::new).collect())
}

/// Collects a call's chunks; an `Err` item becomes a terminal `finish{error}` (the two error
/// paths carry one payload). Asserts the contract: nothing after finish, exactly one finish,
/// usage before finish.
pub async fn collect(adapter: &DeepSeekAdapter, o: GenerateOptions) -> Vec<StreamChunk> {
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
    check_contract(&out);
    out
}

pub fn check_contract(chunks: &[StreamChunk]) {
    let finishes = chunks
        .iter()
        .filter(|c| matches!(c, StreamChunk::Finish { .. }))
        .count();
    assert_eq!(finishes, 1, "exactly one finish: {chunks:?}");
    assert!(matches!(chunks.last(), Some(StreamChunk::Finish { .. })));
    for c in chunks {
        match c {
            StreamChunk::TextDelta { text, .. } | StreamChunk::ReasoningDelta { text, .. } => {
                assert!(!text.is_empty(), "empty delta emitted")
            }
            _ => {}
        }
    }
}

/// What a local assembler makes of a chunk list.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Assembled {
    pub text: Option<String>,
    pub reasoning: Option<String>,
    pub calls: Vec<(String, String, String)>,
    pub blocks: Vec<ContentBlock>,
    pub usage: Option<TokenUsage>,
    pub finish: Option<FinishReason>,
}

impl Assembled {
    pub fn failure(&self) -> Option<&LlmFailure> {
        self.finish.as_ref().and_then(FinishReason::failure)
    }
    pub fn code(&self) -> Option<&str> {
        self.failure().map(|f| f.code.as_str())
    }
}

/// Tiny local assembler (block-end blocks win; deltas are cross-checked against them).
pub fn assemble(chunks: &[StreamChunk]) -> Assembled {
    let mut a = Assembled::default();
    let mut started: Vec<u32> = Vec::new();
    let mut deltas: std::collections::BTreeMap<u32, String> = Default::default();
    let mut ended: std::collections::BTreeMap<u32, ContentBlock> = Default::default();
    let mut types: std::collections::BTreeMap<u32, String> = Default::default();
    let mut call_meta: std::collections::BTreeMap<u32, (String, String)> = Default::default();
    for c in chunks {
        match c {
            StreamChunk::BlockStart { index, block_type } => {
                assert!(!started.contains(index), "duplicate block-start");
                types.insert(*index, block_type.clone());
                assert_eq!(
                    *index as usize,
                    started.len(),
                    "indices in first-seen order"
                );
                started.push(*index);
            }
            StreamChunk::TextDelta { index, text }
            | StreamChunk::ReasoningDelta { index, text } => {
                assert!(started.contains(index));
                deltas.entry(*index).or_default().push_str(text);
            }
            StreamChunk::ToolCallDelta {
                index,
                arguments_delta,
                id,
                name,
            } => {
                assert!(started.contains(index));
                let meta = call_meta.entry(*index).or_default();
                meta.0 = id.to_string();
                if let Some(n) = name {
                    meta.1 = n.clone();
                }
                deltas.entry(*index).or_default().push_str(arguments_delta);
            }
            StreamChunk::BlockEnd { index, block } => {
                assert!(started.contains(index));
                ended.insert(*index, block.clone());
            }
            StreamChunk::Usage { usage } => {
                assert!(a.finish.is_none());
                a.usage = Some(*usage);
            }
            StreamChunk::Finish { reason, .. } => a.finish = Some(reason.clone()),
            StreamChunk::Other(v) => panic!("unexpected chunk {v}"),
        }
    }
    // open (never ended) blocks assemble from their deltas, as BlockAssembler does
    for i in &started {
        if ended.contains_key(i) {
            continue;
        }
        let text = deltas.get(i).cloned().unwrap_or_default();
        let block = match types.get(i).map(String::as_str) {
            Some("text") => ContentBlock::text(text),
            Some("reasoning") => ContentBlock::reasoning(text),
            _ => {
                let (id, name) = call_meta.get(i).cloned().unwrap_or_default();
                ContentBlock::tool_call(id, name, text)
            }
        };
        ended.insert(*i, block);
    }
    for (i, b) in &ended {
        let streamed = deltas.get(i).cloned().unwrap_or_default();
        match b {
            ContentBlock::Text { text } | ContentBlock::Reasoning { text } => {
                assert_eq!(&streamed, text)
            }
            ContentBlock::ToolCall { arguments, .. } => assert_eq!(&streamed, arguments),
            _ => {}
        }
        match b {
            ContentBlock::Text { text } => {
                a.text.get_or_insert_with(String::new).push_str(text);
            }
            ContentBlock::Reasoning { text } => {
                a.reasoning.get_or_insert_with(String::new).push_str(text);
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => a
                .calls
                .push((id.to_string(), name.clone(), arguments.clone())),
            _ => {}
        }
        a.blocks.push(b.clone());
    }
    a
}

/// The history message for an assembled response.
pub fn assistant_message(a: &Assembled, model: &str) -> Message {
    Message::assistant(a.blocks.clone(), "deepseek", model, None)
}

/// Expected disjoint usage from a wire usage object (independent formula).
pub fn expected_usage(u: &Value) -> Option<TokenUsage> {
    if u.is_null() {
        return None;
    }
    let n = |v: Option<&Value>| v.and_then(Value::as_u64);
    let prompt = n(u.get("prompt_tokens")).unwrap_or(0);
    let hit = n(u.get("prompt_cache_hit_tokens"))
        .or(n(u.pointer("/prompt_tokens_details/cached_tokens")));
    let miss = n(u.get("prompt_cache_miss_tokens")).unwrap_or(prompt - hit.unwrap_or(0));
    Some(TokenUsage {
        input_tokens: miss,
        output_tokens: n(u.get("completion_tokens")).unwrap_or(0),
        cache_read_tokens: hit,
        cache_write_tokens: None,
        reasoning_tokens: n(u.pointer("/completion_tokens_details/reasoning_tokens")),
        estimated: false,
    })
}

/// Builds a DeepSeek-style SSE body from an assembled wire message
/// (`{"reasoning_content","content","tool_calls":[{"id","function":{"name","arguments"}}]}`).
pub fn sse_from_assembled(m: &Value, finish: &str) -> String {
    let frame = |delta: Value, fin: Value| {
        format!(
            "data: {}\n\n",
            serde_json::json!({"id":"resp","object":"chat.completion.chunk","choices":[{"index":0,"delta":delta,"finish_reason":fin}]})
        )
    };
    let mut s = frame(
        serde_json::json!({"role":"assistant","content":null,"reasoning_content":""}),
        Value::Null,
    );
    if let Some(r) = m.get("reasoning_content").and_then(Value::as_str) {
        for part in r.split_inclusive(' ') {
            s.push_str(&frame(
                serde_json::json!({"content":null,"reasoning_content":part}),
                Value::Null,
            ));
        }
    }
    if let Some(t) = m.get("content").and_then(Value::as_str) {
        for part in t.split_inclusive(' ') {
            s.push_str(&frame(serde_json::json!({"content":part}), Value::Null));
        }
    }
    for (i, c) in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        s.push_str(&frame(
            serde_json::json!({"tool_calls":[{"index":i,"id":c["id"],"type":"function","function":{"name":c["function"]["name"],"arguments":""}}]}),
            Value::Null,
        ));
        let args = c["function"]["arguments"].as_str().unwrap();
        for part in args.split_inclusive(' ') {
            s.push_str(&frame(
                serde_json::json!({"tool_calls":[{"index":i,"function":{"arguments":part}}]}),
                Value::Null,
            ));
        }
    }
    s.push_str(&frame(
        serde_json::json!({"content":""}),
        Value::String(finish.into()),
    ));
    s.push_str("data: [DONE]\n\n");
    s
}
