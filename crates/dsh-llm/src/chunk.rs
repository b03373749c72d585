//! The streaming vocabulary an adapter yields: chunks, finish reasons, usage, failures.
//!
//! See docs/upstream/llm.md (Stream chunks; Usage and failures).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::content::ContentBlock;
use crate::ids::CallId;

/// Token counts of one provider call. The fields are **disjoint**: `input_tokens` counts only
/// uncached input, so billed input = input + cache read + cache write. `reasoning_tokens` is
/// already included in `output_tokens` (never add it again).
///
/// JSON: `{"inputTokens","outputTokens","cacheReadTokens"?,"cacheWriteTokens"?,"reasoningTokens"?,
/// "estimated"?}`. `estimated: true` marks counts the adapter estimated because the provider
/// reported none (a dsh addition; absent when false, so upstream logs round-trip unchanged; see
/// docs/upstream/llm.md, Usage and failures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens, reasoning included.
    pub output_tokens: u64,
    /// Input tokens served from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Reasoning tokens (a part of `output_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// The counts are an estimate (the provider sent no usage), not the provider's figures.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl TokenUsage {
    /// Total input tokens billed: input + cache read + cache write.
    pub fn total_input(&self) -> u64 {
        self.input_tokens
            + self.cache_read_tokens.unwrap_or(0)
            + self.cache_write_tokens.unwrap_or(0)
    }

    /// Adds `other` field by field (used to total a session's usage); the total is
    /// `estimated` when either part is.
    pub fn add(&mut self, other: &TokenUsage) {
        fn opt_add(a: &mut Option<u64>, b: Option<u64>) {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0) + b);
            }
        }
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        opt_add(&mut self.cache_read_tokens, other.cache_read_tokens);
        opt_add(&mut self.cache_write_tokens, other.cache_write_tokens);
        opt_add(&mut self.reasoning_tokens, other.reasoning_tokens);
        self.estimated |= other.estimated;
    }
}

/// Stable failure codes (`LlmFailure.code`). Provider-specific codes (e.g. `HTTP_418`,
/// `CONTENT_FILTER`, `INSUFFICIENT_SYSTEM_RESOURCE`) are plain strings too.
pub mod codes {
    /// 401/403.
    pub const AUTH: &str = "AUTH";
    /// 400/413 (other than context overflow).
    pub const INVALID_REQUEST: &str = "INVALID_REQUEST";
    /// 429.
    pub const RATE_LIMIT: &str = "RATE_LIMIT";
    /// Quota / balance wording (checked before 429).
    pub const QUOTA: &str = "QUOTA";
    /// ≥ 500, or an `error` object inside a 200 stream.
    pub const SERVER: &str = "SERVER";
    /// 400 whose wording says the context window was exceeded.
    pub const CONTEXT_WINDOW_EXCEEDED: &str = "CONTEXT_WINDOW_EXCEEDED";
    /// Connect, first-byte or idle timeout.
    pub const TIMEOUT: &str = "TIMEOUT";
    /// The caller cancelled.
    pub const ABORTED: &str = "ABORTED";
    /// Connection failure, or a body that ended without a terminal signal.
    pub const TRANSPORT: &str = "TRANSPORT";
    /// The provider answered a model request with a redirect dsh does not follow (to another
    /// origin: following would re-send the conversation there). Not retryable.
    pub const REDIRECT_REFUSED: &str = "REDIRECT_REFUSED";
    /// A `stop` finish with zero content blocks.
    pub const EMPTY_RESPONSE: &str = "EMPTY_RESPONSE";
    /// A credential reference resolved to an unusable value.
    pub const INVALID_CREDENTIAL: &str = "INVALID_CREDENTIAL";
    /// A credential reference resolved to nothing.
    pub const MISSING_CREDENTIAL: &str = "MISSING_CREDENTIAL";
    /// No adapter serves the requested provider.
    pub const NO_ADAPTER: &str = "NO_ADAPTER";
    /// An adapter registration claimed a provider already served.
    pub const DUPLICATE_ADAPTER: &str = "DUPLICATE_ADAPTER";
    /// `replace` on a disposed adapter registration.
    pub const REGISTRATION_DISPOSED: &str = "REGISTRATION_DISPOSED";
    /// A prepared call was reused or mismatched.
    pub const INVALID_PREPARED_CALL: &str = "INVALID_PREPARED_CALL";
    /// Content the adapter cannot send (e.g. an image to a text-only route).
    pub const UNSUPPORTED_CONTENT: &str = "UNSUPPORTED_CONTENT";
    /// The stream was closed by the consumer.
    pub const STREAM_CLOSED: &str = "STREAM_CLOSED";
    /// Replay state that the adapter cannot use.
    pub const INVALID_REPLAY_STATE: &str = "INVALID_REPLAY_STATE";
    /// The model is not in the route's catalog.
    pub const UNKNOWN_MODEL: &str = "UNKNOWN_MODEL";
    /// Anything else.
    pub const UNKNOWN: &str = "UNKNOWN";
    /// An adapter registration with no routes or an empty route name.
    pub const INVALID_ADAPTER: &str = "INVALID_ADAPTER";
    /// An explicit reasoning effort the exact model does not declare.
    pub const UNSUPPORTED_REASONING_EFFORT: &str = "UNSUPPORTED_REASONING_EFFORT";
    /// The assembler cannot build an unclosed block of an unknown type.
    pub const INCOMPLETE_BLOCK: &str = "INCOMPLETE_BLOCK";
}

/// A provider failure, carried by `finish {error|aborted}` and by turn-end `error` reasons.
///
/// JSON: `{"message","code","status"?,"providerRetryAfterMs"?,"requestId"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmFailure {
    /// Human-readable message (never contains credentials).
    pub message: String,
    /// Stable code, see [`codes`].
    pub code: String,
    /// HTTP status (100..=599) when the failure came from an HTTP response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Provider-requested delay before retrying, in milliseconds (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_retry_after_ms: Option<u64>,
    /// The provider's request id, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl LlmFailure {
    /// A failure with `message` and `code` (an empty message becomes `LLM adapter failed`).
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.is_empty() {
            message = "LLM adapter failed".to_owned();
        }
        Self {
            message,
            code: code.into(),
            status: None,
            provider_retry_after_ms: None,
            request_id: None,
        }
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }
}

impl std::fmt::Display for LlmFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for LlmFailure {}

/// Why a stream ended. JSON: an object tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum FinishReason {
    /// `{"kind":"stop"}`: the model finished its answer.
    #[serde(rename = "stop")]
    Stop,
    /// `{"kind":"tool-calls"}`: the model wants tools run.
    #[serde(rename = "tool-calls")]
    ToolCalls,
    /// `{"kind":"max-tokens"}`: the output-token limit cut the answer (tool calls are dropped).
    #[serde(rename = "max-tokens")]
    MaxTokens,
    /// `{"kind":"aborted","failure":{…}}`: the caller cancelled.
    #[serde(rename = "aborted")]
    Aborted {
        /// Code `ABORTED` (or `TIMEOUT` for a watchdog abort).
        failure: LlmFailure,
    },
    /// `{"kind":"error","failure":{…}}`: the provider or transport failed.
    #[serde(rename = "error")]
    Error {
        /// The failure.
        failure: LlmFailure,
    },
    /// A finish kind dsh does not model, kept verbatim.
    #[serde(untagged)]
    Other(Value),
}

impl FinishReason {
    /// The failure of an `error` or `aborted` finish.
    pub fn failure(&self) -> Option<&LlmFailure> {
        match self {
            Self::Aborted { failure } | Self::Error { failure } => Some(failure),
            _ => None,
        }
    }

    /// The `kind` tag.
    pub fn kind(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::ToolCalls => "tool-calls",
            Self::MaxTokens => "max-tokens",
            Self::Aborted { .. } => "aborted",
            Self::Error { .. } => "error",
            Self::Other(v) => v.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }
}

/// Opaque adapter state returned with a finish, handed back to the same adapter on replay.
/// `blocks`, when present, is aligned 1:1 with the emitted blocks in first-seen order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayEnvelope {
    /// Adapter-private response state.
    pub response: Value,
    /// Per-block state, aligned with the emitted blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<Value>>,
}

/// The kind of block a `block-start` opens (`blockType`). Unknown kinds are kept as strings.
pub type BlockType = String;

/// One streamed chunk (adapter → consumer). JSON: an object tagged by `type`.
///
/// Contract (every adapter): `usage` comes before `finish`; nothing follows `finish`; tool-call
/// arguments stay raw JSON text end to end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum StreamChunk {
    /// `{"type":"block-start","index","blockType"}`.
    #[serde(rename = "block-start")]
    BlockStart {
        /// Block index within the message.
        index: u32,
        /// `text`, `reasoning`, `tool-call`, …
        #[serde(rename = "blockType")]
        block_type: BlockType,
    },
    /// `{"type":"text-delta","index","text"}`.
    #[serde(rename = "text-delta")]
    TextDelta {
        /// Block index.
        index: u32,
        /// Appended text.
        text: String,
    },
    /// `{"type":"reasoning-delta","index","text"}`.
    #[serde(rename = "reasoning-delta")]
    ReasoningDelta {
        /// Block index.
        index: u32,
        /// Appended reasoning text.
        text: String,
    },
    /// `{"type":"tool-call-delta","index","id","name"?,"argumentsDelta"}`.
    #[serde(rename = "tool-call-delta")]
    ToolCallDelta {
        /// Block index.
        index: u32,
        /// The call id.
        id: CallId,
        /// The tool name (usually only on the first delta).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Appended raw argument text.
        #[serde(rename = "argumentsDelta")]
        arguments_delta: String,
    },
    /// `{"type":"block-end","index","block"}`: the fully assembled block.
    #[serde(rename = "block-end")]
    BlockEnd {
        /// Block index.
        index: u32,
        /// The complete block.
        block: ContentBlock,
    },
    /// `{"type":"usage","usage":{…}}`.
    #[serde(rename = "usage")]
    Usage {
        /// The call's token usage (last one wins).
        usage: TokenUsage,
    },
    /// `{"type":"finish","reason":{…},"replayState"?:{…}}`: always the last chunk.
    #[serde(rename = "finish")]
    Finish {
        /// Why the stream ended.
        reason: FinishReason,
        /// Adapter replay state.
        #[serde(
            rename = "replayState",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        replay_state: Option<ReplayEnvelope>,
    },
    /// A chunk type dsh does not model, kept verbatim.
    #[serde(untagged)]
    Other(Value),
}
