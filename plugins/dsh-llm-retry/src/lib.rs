//! dsh-llm-retry: agent-level model-request retry.
//!
//! It listens on the agent loop's `agent/request-error` waterfall
//! ([`dsh_agent::AgentRequestError`]), applies the provider retry policy (normal: bounded retry
//! of transient codes; always: retry everything) with exponential backoff and jitter or the
//! provider's `Retry-After`, and records each scheduled retry durably in the session before
//! waiting (`llm/retry`) and its start after waiting (`llm/retry-started`). The loop then
//! re-streams within the same turn and step.
//!
//! See docs/upstream/retry.md and docs/upstream/agent-loop.md (Step algorithm, 6). Settings:
//! section `dsh-llm-retry` ([`RetrySettings`], alias `[agent]`). Every decision to retry, and
//! every provider wait refused for exceeding `max_retry_wait_ms`, is also announced with the
//! kernel emit event [`LlmRetryNotice`] (not logged), which `dsh` prints as one stderr line.

mod error;
mod events;
mod plugin;
mod policy;
mod recover;

pub use error::RetryError;
pub use events::{LlmRetryData, LlmRetryStartedData, register_event_types};
pub use events::{LlmRetryNotice, RetryNotice, RetryNoticeKind};
pub use plugin::install;
pub use policy::{
    BackoffConfig, DEFAULT_MAX_RETRY_WAIT_MS, DEFAULT_MAX_TIMEOUT_RETRIES, MAX_TIMER_DELAY_MS,
    ModeConfig, ResolvedSettings, RetryPolicyConfig, RetrySettings, js_number, local_delay_ms,
    policy_key, resolve_retry_policy,
};
pub use recover::{RandomFn, RetryExecutor, default_random};

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-llm-retry";
/// Log-only type written before a retry wait.
pub const LLM_RETRY: &str = "llm/retry";
/// Log-only type written after a retry wait, before the next attempt.
pub const LLM_RETRY_STARTED: &str = "llm/retry-started";

dsh_kernel::plugin! {
    after = [dsh_session::PLUGIN, dsh_agent::PLUGIN],
    settings = RetrySettings,
    // `[agent] max_retry_wait_ms` (and the other keys of this section) are agent-level limits.
    aliases = ["agent"],
    start = plugin::apply,
}
