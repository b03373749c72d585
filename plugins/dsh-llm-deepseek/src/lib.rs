//! `dsh-llm-deepseek`: the DeepSeek / OpenAI-compatible chat-completions [`dsh_llm::LlmAdapter`]
//! of dsh, registered at link time. It streams `POST {base_url}/chat/completions` over reqwest,
//! decodes SSE with `sse-stream`, and translates the stream into [`dsh_llm::StreamChunk`]s per the
//! adapter contract; requests replay `reasoning_content` on tool-call turns; HTTP failures map to
//! canonical [`dsh_llm::LlmFailure`] codes.
//!
//! See docs/upstream/llm.md and docs/upstream/deepseek.md (with the streaming bug cases BC-01,
//! BC-02, BC-04, BC-05, BC-07, BC-09).
//!
//! The HTTP plumbing (client, redirects, timeouts, bounded SSE, UTF-8 repair, failure mapping)
//! lives in the seam crate `dsh-llm-http`, shared with `dsh-llm-anthropic`.
//!
//! Configuration: the settings section `dsh-llm-deepseek` deserializes into
//! [`DeepSeekSettings`] (every field defaulted). Routes: `deepseek` (alias `deepseek-official`,
//! base `https://api.deepseek.com`, key env `DEEPSEEK_API_KEY`) plus any user routes.
//!
//! Tests build the adapter directly: `DeepSeekAdapter::with_credentials(
//! DeepSeekSettings::official_at(server.base_url()), StaticCredentials::new([("DEEPSEEK_API_KEY",
//! "sk-test")]))`. The byte→chunk translation is callable without HTTP:
//! [`translate_sse_bytes`] / [`StreamTranslator`].

mod adapter;
mod config;
mod errors;
mod parse;
mod plugin;
mod request;

pub use adapter::{DeepSeekAdapter, parse_model_list};
pub use config::{
    ANTHROPIC_BUILTIN_ROUTES, DEEPSEEK_BASE_URL, DEEPSEEK_KEY_ENV, DEEPSEEK_OFFICIAL_ALIAS,
    DEEPSEEK_ROUTE, DeepSeekSettings, OfficialRoute, ProviderTable, Quirks, RouteConfig,
    deepseek_catalog,
};
/// The HTTP plumbing this adapter is built on, shared with the other provider plugins (see
/// `dsh-llm-http`); re-exported so this crate's API stays whole.
pub use dsh_llm_http::{
    CredentialSource, EnvCredentials, MAX_REDIRECTS, MAX_SSE_LINE_BYTES, ModelEntry, ModelSpec,
    NoticeFn, ProviderFormat, ProviderNotice, ProviderSettings, RouteTimeouts, SATURATED_WAIT_MS,
    SSE_LINE_TOO_LONG, StaticCredentials, Timeouts, USER_AGENT, http_failure, is_context_overflow,
    redact_url, retry_after_ms, retry_after_ms_at, retry_after_ms_header,
};
pub use errors::DeepSeekError;
pub use parse::{
    CompletionDetails, Progress, PromptDetails, StreamTranslator, WireUsage, estimate_tokens,
    translate_sse_bytes, try_again_hint_ms,
};
pub use plugin::{LlmProviderNotice, PLUGIN, PLUGIN_ID};
pub use request::{Thinking, build_body, thinking_for};
