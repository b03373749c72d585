//! `dsh-llm-anthropic`: the Anthropic Messages [`dsh_llm::LlmAdapter`] of dsh. It streams
//! `POST {base_url}/v1/messages` (headers `x-api-key`, `anthropic-version: 2023-06-01`) over
//! the shared HTTP plumbing of `dsh-llm-http` and translates the SSE events into
//! [`dsh_llm::StreamChunk`]s per the adapter contract.
//!
//! - Requests ([`build_body`]): the system prompt as one cached text block; user text, tool
//!   results (consecutive results in one user message) and assistant turns; thinking blocks
//!   with their signatures and redacted thinking replayed verbatim when the message came from
//!   the same route and model (foreign reasoning becomes text); `cache_control` breakpoints on
//!   the system block, the last tool and the last user block; `max_tokens` clamped to the
//!   window.
//! - Streams ([`StreamTranslator`]): `message_start`, `content_block_*` (`text_delta`,
//!   `thinking_delta`, `signature_delta`, `input_json_delta`), `message_delta`, `message_stop`,
//!   `ping`, `error`; stop reasons, usage (cache read / creation) and the signatures in the
//!   finish's replay state.
//! - Failures: HTTP status and in-stream `error` types map to the canonical codes
//!   (`overloaded_error` ⇒ `SERVER`, 429 ⇒ `RATE_LIMIT` with `retry-after`, prompt too long ⇒
//!   `CONTEXT_WINDOW_EXCEEDED`).
//!
//! Routes: `anthropic` (key `ANTHROPIC_API_KEY`, base `ANTHROPIC_BASE_URL` or
//! `https://api.anthropic.com`), `deepseek-anthropic` (`https://api.deepseek.com/anthropic`, key
//! `DEEPSEEK_API_KEY`), and every `[providers.<id>] format = "anthropic"` table.
//!
//! See docs/upstream/anthropic.md.

mod adapter;
mod config;
mod error;
mod parse;
mod plugin;
mod request;

pub use adapter::AnthropicAdapter;
pub use config::{
    ANTHROPIC_BASE_URL, ANTHROPIC_BASE_URL_ENV, ANTHROPIC_KEY_ENV, ANTHROPIC_ROUTE,
    ANTHROPIC_VERSION, AnthropicRoute, AnthropicSettings, CLAUDE_MODELS,
    DEEPSEEK_ANTHROPIC_BASE_URL, DEEPSEEK_ANTHROPIC_ROUTE, DEEPSEEK_KEY_ENV, claude_catalog,
    deepseek_anthropic_catalog,
};
pub use error::AnthropicError;
pub use parse::{StreamTranslator, error_type_code, stream_error_failure, translate_sse_text};
pub use plugin::{PLUGIN, PLUGIN_ID};
pub use request::{
    BuiltRequest, CLAMP_MARGIN_TOKENS, DEFAULT_MAX_TOKENS, INTERLEAVED_THINKING_BETA,
    REDACTED_TEXT, REPLAY_KIND, REPLAY_VERSION, build_body, thinking_budget, tool_id,
    wire_messages,
};
