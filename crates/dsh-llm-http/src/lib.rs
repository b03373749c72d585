//! `dsh-llm-http`: the HTTP plumbing every dsh provider plugin shares, so the OpenAI-format
//! plugin (`dsh-llm-deepseek`) and the Anthropic-format plugin (`dsh-llm-anthropic`) behave the
//! same on the wire without depending on each other (plugins never depend on plugins):
//!
//! - [`build_client`]: reqwest with `User-Agent` [`USER_AGENT`], the route's connect timeout and
//!   the same-origin [`redirect_policy`] (at most [`MAX_REDIRECTS`]).
//! - [`send`]: one streaming POST attempt under the first-byte timeout and cancellation; a
//!   redirect or non-2xx answer becomes the terminal failure ([`http_failure`], with
//!   `Retry-After` parsed by [`retry_after_ms`] / [`retry_after_ms_header`]).
//! - [`SseBody`]: the SSE events of a body, each line/event capped at [`MAX_SSE_LINE_BYTES`]
//!   (else [`SSE_LINE_TOO_LONG`]), invalid UTF-8 repaired to U+FFFD, idle watchdog.
//! - [`redact_url`] / [`scrub_userinfo`] / [`base_url_problem`]: URLs in messages and at
//!   start-up.
//! - [`ProviderSettings`] (one `[providers.<id>]` table, with its [`ProviderFormat`]),
//!   [`ModelEntry`], [`Timeouts`], [`CredentialSource`].
//! - [`LlmProviderNotice`]: the `llm/provider-notice` event.
//!
//! See docs/upstream/deepseek.md ("dsh additions") and docs/upstream/anthropic.md.

mod client;
mod config;
mod failure;
mod notice;
mod sse;
mod url;
mod utf8;

pub use client::{
    MAX_REDIRECTS, SendRoute, Sent, USER_AGENT, aborted, build_client, error_chain, idle_failure,
    redirect_policy, send, send_failure, transport_failure,
};
pub use config::{
    CredentialSource, EnvCredentials, ModelEntry, ModelSpec, PROVIDERS_SECTION, ProviderFormat,
    ProviderSettings, ProviderTableMap, RouteTimeouts, StaticCredentials, Timeouts,
};
pub use failure::{
    SATURATED_WAIT_MS, http_failure, is_context_overflow, retry_after_ms, retry_after_ms_at,
    retry_after_ms_header, saturating_ms,
};
pub use notice::{LlmProviderNotice, NoticeFn, ProviderNotice, warn_invalid_utf8};
pub use sse::{
    BodyReadError, LineGuard, MAX_SSE_LINE_BYTES, SSE_LINE_TOO_LONG, SseBody, SseEvents,
    body_failure,
};
pub use url::{base_url_problem, redact_url, scrub_userinfo};
pub use utf8::Utf8Repair;
