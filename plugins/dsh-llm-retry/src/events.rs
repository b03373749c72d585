//! The two log-only event types: the `llm/retry` and `llm/retry-started` payloads and their
//! declaration in an event-type registry; and the kernel emit event [`LlmRetryNotice`] that
//! tells a front end what the plugin decided (not logged).

use dsh_llm::LlmFailure;
use dsh_session::{EventTypeDecl, EventTypeRegistry};
use serde::{Deserialize, Serialize};

use crate::{LLM_RETRY, LLM_RETRY_STARTED, PLUGIN_ID, RetryError};

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
    /// See [`policy_key`](crate::policy_key).
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

/// What [`LlmRetryNotice`] announces.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryNoticeKind {
    /// A retry is scheduled (its `llm/retry` record is logged): retry number `retry` (1-based)
    /// of at most `of` (normal mode; `None` in always mode), after `delay_ms` milliseconds;
    /// `from_provider` when the wait is the provider's (`Retry-After`).
    Retrying {
        /// Retry number (1-based).
        retry: u64,
        /// The most retries this failure gets (normal mode).
        of: Option<u64>,
        /// The wait (ms).
        delay_ms: f64,
        /// The wait is the provider's.
        from_provider: bool,
    },
    /// Not retried: the provider asked to wait `asked_ms`, more than `ceiling_ms`
    /// (`max_retry_wait_ms`); the request's failure ends the turn.
    WaitTooLong {
        /// The provider's wait (ms).
        asked_ms: u64,
        /// The configured ceiling (ms).
        ceiling_ms: u64,
    },
}

/// Payload of [`LlmRetryNotice`].
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// The agent's session id.
    pub session_id: String,
    /// The provider route.
    pub provider: String,
    /// The failure the decision is about.
    pub failure: LlmFailure,
    /// The decision.
    pub kind: RetryNoticeKind,
}

dsh_kernel::event! {
    /// `llm/retry-notice` (emit, to the agent's scope key): the plugin scheduled a retry or
    /// refused a provider wait above the ceiling. Observers only; nothing is logged by it.
    pub struct LlmRetryNotice: emit("llm/retry-notice") => RetryNotice;
}
