//! The `agent/*` events the agent loop dispatches (all scope-filtered by the agent's
//! [`ScopeKey`]: dispatch with `ctx.dispatch_to(Some(&agent_key))`), their payloads and outputs,
//! plus the provider retry policy carried by `agent/request-error`.
//!
//! See docs/upstream/agent-loop.md (Events; upstream's generated `agent/*` catalog) and
//! docs/upstream/retry.md (Policy).
//!
//! Upstream payloads carry the `Agent` handle; until the handle exists here they carry the
//! agent's session (`Arc<Session>`, whose id is the agent id) and its scope key instead. Abort
//! signals are [`CancellationToken`]s (the current turn's token).

use std::sync::Arc;

use dsh_kernel::{BoxError, CancellationToken, ScopeKey};
use dsh_llm::{LlmCallConfig, LlmFailure, Message, codes};
use dsh_session::Session;
use serde::{Deserialize, Serialize};

/// Default `maxRetries` of a normal-mode policy (retries after the first request).
pub const DEFAULT_MAX_RETRIES: u64 = 5;
/// Default initial local backoff delay, in milliseconds.
pub const DEFAULT_INITIAL_DELAY_MS: f64 = 500.0;
/// Default maximum local backoff delay (and largest accepted provider delay), in milliseconds.
pub const DEFAULT_MAX_DELAY_MS: f64 = 10_000.0;
/// Default symmetric jitter ratio (the delay is multiplied by a factor in `[1-j, 1+j]`).
pub const DEFAULT_JITTER_RATIO: f64 = 0.1;
/// Default retryable failure codes of a normal-mode policy, in upstream order.
pub const DEFAULT_RETRYABLE_CODES: [&str; 5] = [
    codes::EMPTY_RESPONSE,
    codes::RATE_LIMIT,
    codes::SERVER,
    codes::TIMEOUT,
    codes::TRANSPORT,
];

/// Which failures a [`ResolvedRetryPolicy`] retries, and how often.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryMode {
    /// `normal`: retry only `retryable_codes`, at most `max_retries` times per turn/step.
    Normal {
        /// Maximum retries after the first request (0 = never retry).
        max_retries: u64,
        /// Failure codes eligible for retry (non-empty, no duplicates, upstream order kept).
        retryable_codes: Vec<String>,
    },
    /// `always`: retry every failure until success, cancellation or plugin disposal.
    Always,
}

impl RetryMode {
    /// The wire name: `"normal"` or `"always"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Normal { .. } => "normal",
            Self::Always => "always",
        }
    }
}

/// A fully resolved, immutable provider retry policy (upstream `ResolvedRetryPolicy`).
///
/// Delays are milliseconds as `f64` because jittered delays are fractional. Validation (positive,
/// `initial ≤ max`, `0 ≤ jitter ≤ 1`) happens where a policy is resolved from configuration
/// (`dsh-llm-retry`). See docs/upstream/retry.md (Policy).
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedRetryPolicy {
    /// Mode and mode-specific limits.
    pub mode: RetryMode,
    /// Initial local exponential-backoff delay (ms).
    pub initial_delay_ms: f64,
    /// Maximum locally scheduled delay and largest accepted provider `Retry-After` (ms).
    pub max_delay_ms: f64,
    /// Symmetric jitter ratio in `[0, 1]`.
    pub jitter_ratio: f64,
}

impl Default for ResolvedRetryPolicy {
    /// The upstream default: normal mode, 5 retries, codes
    /// `[EMPTY_RESPONSE, RATE_LIMIT, SERVER, TIMEOUT, TRANSPORT]`, 500 ms initial, 10 000 ms
    /// max, jitter 0.1.
    fn default() -> Self {
        Self {
            mode: RetryMode::Normal {
                max_retries: DEFAULT_MAX_RETRIES,
                retryable_codes: DEFAULT_RETRYABLE_CODES
                    .iter()
                    .map(|c| (*c).to_owned())
                    .collect(),
            },
            initial_delay_ms: DEFAULT_INITIAL_DELAY_MS,
            max_delay_ms: DEFAULT_MAX_DELAY_MS,
            jitter_ratio: DEFAULT_JITTER_RATIO,
        }
    }
}

/// What a listener that owns recovery of a failed request returns (upstream
/// `RequestErrorAction = {kind:'retry'} | undefined`; `None` keeps the failure terminal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum RetryDecision {
    /// `{kind:'retry'}`: rebuild the request and re-stream within the same turn and step.
    Retry,
}

/// Payload of `agent/request-error`: one failed model-request attempt (finish `error|aborted`,
/// in-band or normalised adapter throw), before the loop retries or fails the turn.
#[derive(Debug, Clone)]
pub struct RequestErrorCtx {
    /// The agent's session (its id is the agent id); listeners append log-only events to it.
    pub session: Arc<Session>,
    /// The agent's scope key (the dispatch carrier).
    pub scope: Option<ScopeKey>,
    /// The turn containing the failed attempt (1-based).
    pub turn: u64,
    /// The step containing the failed attempt (1-based within the turn).
    pub step: u64,
    /// The provider route selected for the failed request.
    pub provider: String,
    /// Serializable failure facts normalised at the adapter boundary.
    pub failure: LlmFailure,
    /// The policy of the adapter registration that served the request, when known. `None`
    /// lets `dsh-llm-retry` fall back to its configured policy.
    pub retry_policy: Option<ResolvedRetryPolicy>,
    /// The current turn's cancellation token.
    pub cancellation: CancellationToken,
}

dsh_kernel::event! {
    /// `agent/request-error` (waterfall, scope-filtered): handle one failed model-request attempt.
    /// A listener that owns recovery returns `Some(RetryDecision::Retry)` without calling
    /// `next`; the terminal (no listener handled it) returns `None` ⇒ the turn fails with the
    /// failure. See docs/upstream/agent-loop.md (Step algorithm, 6).
    pub struct AgentRequestError: waterfall("agent/request-error") => RequestErrorCtx, Option<RetryDecision>;
}

/// Payload of `agent/pre-step`: a proposed step and the messages claimed for it.
#[derive(Debug, Clone)]
pub struct PreStepCtx {
    /// The agent's session.
    pub session: Arc<Session>,
    /// The agent's scope key.
    pub scope: Option<ScopeKey>,
    /// Messages removed from the inbox for this step (plus a runtime-context snapshot, if any).
    pub messages: Vec<Arc<Message>>,
    /// The turn that will own the step.
    pub turn: u64,
    /// The proposed step number.
    pub step: u64,
    /// The current turn's cancellation token.
    pub cancellation: CancellationToken,
}

/// Whether and with which messages the loop enters a proposed step (upstream
/// `{kind:'reject'} | {kind:'enter', messages}`).
#[derive(Debug, Clone, PartialEq)]
pub enum PreStepDecision {
    /// Do not open the step; the turn ends `blocked` (claimed messages stay consumed).
    Reject,
    /// Enter the step with exactly these messages (appended as `user/message` after
    /// `step/start`).
    Enter {
        /// The complete batch.
        messages: Vec<Arc<Message>>,
    },
}

dsh_kernel::event! {
    /// `agent/pre-step` (waterfall, scope-filtered): reject a proposed step or replace its
    /// messages; the terminal returns `Enter` with the payload's messages.
    pub struct AgentPreStep: waterfall("agent/pre-step") => PreStepCtx, PreStepDecision;
}

/// Payload of `agent/request`: the call configuration seam of one model request.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    /// The agent's session.
    pub session: Arc<Session>,
    /// The agent's scope key.
    pub scope: Option<ScopeKey>,
    /// The open turn.
    pub turn: u64,
    /// The step whose request this is.
    pub step: u64,
    /// The current turn's cancellation token.
    pub cancellation: CancellationToken,
}

dsh_kernel::event! {
    /// `agent/request` (waterfall, scope-filtered): `next` yields the config the loop would use
    /// (agent options on the first request, the logged header afterwards); return a replacement
    /// to switch. An `Err` is a middleware failure: it fails the turn without retry.
    pub struct AgentRequest: waterfall("agent/request") => RequestCtx, Result<LlmCallConfig, BoxError>;
}

/// Payload of `agent/turn-stopping`: the turn is about to close.
#[derive(Debug, Clone)]
pub struct TurnStoppingCtx {
    /// The agent's session.
    pub session: Arc<Session>,
    /// The agent's scope key.
    pub scope: Option<ScopeKey>,
    /// The closing turn.
    pub turn: u64,
    /// The current turn's cancellation token.
    pub cancellation: CancellationToken,
}

dsh_kernel::event! {
    /// `agent/turn-stopping` (serial, scope-filtered): listeners object by steering the agent;
    /// they return `Ok(None)` (the bail value is unused).
    pub struct AgentTurnStopping: serial("agent/turn-stopping") => TurnStoppingCtx, ();
}

/// An agent's driver status (`'idle' | 'running'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatusKind {
    /// No driver scheduled or active.
    Idle,
    /// A driver is draining turns.
    Running,
}

/// Payload of `agent/status`.
#[derive(Debug, Clone)]
pub struct AgentStatusPayload {
    /// The agent's session.
    pub session: Arc<Session>,
    /// The agent's scope key.
    pub scope: Option<ScopeKey>,
    /// The status just entered.
    pub status: StatusKind,
}

dsh_kernel::event! {
    /// `agent/status` (emit, scope-filtered): the agent's status changed.
    pub struct AgentStatus: emit("agent/status") => AgentStatusPayload;
}

/// Payload of `agent/error`.
#[derive(Debug, Clone)]
pub struct AgentErrorPayload {
    /// The agent's session.
    pub session: Arc<Session>,
    /// The agent's scope key.
    pub scope: Option<ScopeKey>,
    /// The failed turn.
    pub turn: u64,
    /// The failed step, if a step was open.
    pub step: Option<u64>,
    /// The failure: a provider failure unchanged, or a loop failure as `{message, code}` with the
    /// loop's own code (`dsh_agent_loop::LoopError`; upstream flattens those to `UNKNOWN`).
    pub error: LlmFailure,
}

dsh_kernel::event! {
    /// `agent/error` (emit, scope-filtered): a turn ended with an error (not on abort).
    pub struct AgentError: emit("agent/error") => AgentErrorPayload;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_is_upstream_default() {
        let p = ResolvedRetryPolicy::default();
        assert_eq!(
            p.mode,
            RetryMode::Normal {
                max_retries: 5,
                retryable_codes: vec![
                    "EMPTY_RESPONSE".to_owned(),
                    "RATE_LIMIT".to_owned(),
                    "SERVER".to_owned(),
                    "TIMEOUT".to_owned(),
                    "TRANSPORT".to_owned(),
                ],
            }
        );
        assert_eq!(p.initial_delay_ms, 500.0);
        assert_eq!(p.max_delay_ms, 10_000.0);
        assert_eq!(p.jitter_ratio, 0.1);
    }

    #[test]
    fn retry_decision_wire_form() {
        assert_eq!(
            serde_json::to_string(&RetryDecision::Retry).unwrap(),
            r#"{"kind":"retry"}"#
        );
    }
}
