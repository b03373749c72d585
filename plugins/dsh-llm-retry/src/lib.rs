//! dsh-llm-retry: agent-level model-request retry. It listens on the agent loop's
//! `agent/request-error` waterfall ([`dsh_agent::AgentRequestError`]), applies the provider
//! retry policy (normal: bounded retry of transient codes; always: retry everything) with
//! exponential backoff and jitter or the provider's `Retry-After`, and records each scheduled
//! retry durably in the session before waiting (`llm/retry`) and its start after waiting
//! (`llm/retry-started`). The loop then re-streams within the same turn and step.
//!
//! See docs/upstream/retry.md and docs/upstream/agent-loop.md (Step algorithm, 6). Settings: section `dsh-llm-retry` ([`RetrySettings`]).

mod error;
mod policy;
mod recover;

use std::sync::Arc;

use dsh_agent::AgentRequestError;
use dsh_kernel::{Context, Disposer, Registration};
use dsh_llm::LlmFailure;
use dsh_session::{EventTypeDecl, EventTypeRegistry};
use serde::{Deserialize, Serialize};

pub use error::RetryError;
pub use policy::{
    BackoffConfig, MAX_TIMER_DELAY_MS, ModeConfig, ResolvedSettings, RetryPolicyConfig,
    RetrySettings, js_number, local_delay_ms, policy_key, resolve_retry_policy,
};
pub use recover::{RandomFn, RetryExecutor, default_random};

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-llm-retry";
/// Log-only type written before a retry wait.
pub const LLM_RETRY: &str = "llm/retry";
/// Log-only type written after a retry wait, before the next attempt.
pub const LLM_RETRY_STARTED: &str = "llm/retry-started";

/// The `llm/retry` payload (JSON keys camelCase, in this order). `maxRetries` is present in
/// normal mode only; `delayMs` is fractional when jittered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmRetryData {
    /// Stable id of one step's retry sequence (a v4 UUID).
    pub retry_id: String,
    /// The failed request's turn.
    pub turn: u64,
    /// The failed request's step.
    pub step: u64,
    /// The provider route.
    pub provider: String,
    /// `normal` or `always`.
    pub mode: String,
    /// See [`policy_key`].
    pub policy_key: String,
    /// This retry's number (1-based).
    pub retry: u64,
    /// Normal mode's `max_retries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u64>,
    /// The scheduled wait (ms).
    pub delay_ms: f64,
    /// The failure being retried.
    pub failure: LlmFailure,
}

/// The `llm/retry-started` payload: `{retryId, turn, step, retry}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmRetryStartedData {
    /// The retry sequence id.
    pub retry_id: String,
    /// Turn.
    pub turn: u64,
    /// Step.
    pub step: u64,
    /// Retry number.
    pub retry: u64,
}

/// Declares `llm/retry` and `llm/retry-started` (inside turns only, payload-validated) in
/// `registry`, owned by this plugin.
///
/// # Errors
/// [`RetryError::Session`] when another plugin already declared one of the names.
pub fn register_event_types(registry: &EventTypeRegistry) -> Result<(), RetryError> {
    registry.register(
        EventTypeDecl::new(LLM_RETRY, PLUGIN_ID, false).with_validator(|v| {
            LlmRetryData::deserialize(v)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }),
    )?;
    registry.register(
        EventTypeDecl::new(LLM_RETRY_STARTED, PLUGIN_ID, false).with_validator(|v| {
            LlmRetryStartedData::deserialize(v)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }),
    )?;
    Ok(())
}

/// Installs the `agent/request-error` listener through `ctx` with resolved settings and a
/// jitter source (tests inject a constant). The listener is untagged (it serves every agent);
/// disposing `ctx` cancels pending waits, which then return no decision.
///
/// # Errors
/// [`RetryError::Kernel`] when `ctx` is inactive.
pub fn install(
    ctx: &Context,
    settings: ResolvedSettings,
    random: RandomFn,
) -> Result<Registration, RetryError> {
    let exec = Arc::new(RetryExecutor::new(settings, random, ctx.cancellation()));
    let reg = ctx.on_waterfall::<AgentRequestError, _, _>(move |p, next| {
        let exec = exec.clone();
        async move { exec.recover(p, next).await }
    })?;
    Ok(reg)
}

fn apply(ctx: &Context) -> Result<(), dsh_kernel::BoxError> {
    let settings: RetrySettings = ctx.settings_section(PLUGIN_ID)?;
    let resolved = settings.resolve()?;
    if let Some(registry) = ctx.get::<EventTypeRegistry>() {
        register_event_types(&registry)?;
        let r = registry.clone();
        ctx.effect(
            "dsh-llm-retry: event types",
            vec![Disposer::infallible(move || {
                r.unregister(LLM_RETRY, PLUGIN_ID);
                r.unregister(LLM_RETRY_STARTED, PLUGIN_ID);
            })],
        )?
        .detach();
    }
    install(ctx, resolved, Arc::new(default_random))?.detach();
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_session::PLUGIN, dsh_agent::PLUGIN],
    settings = RetrySettings,
    start = apply,
}
