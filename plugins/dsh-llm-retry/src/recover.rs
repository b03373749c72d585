//! The `agent/request-error` listener: decides whether a failed model request is retried,
//! records the decision durably (`llm/retry`) before the cancellable wait, and records
//! `llm/retry-started` after it.
//!
//! See docs/upstream/retry.md (The listener). Upstream's behaviour:
//! - normal mode: a code outside `retryable_codes` is delegated to `next` untouched;
//! - always mode: delegates to `next` FIRST; a downstream `Retry` wins, otherwise this plugin
//!   retries (and an abort during delegation ends recovery with `None`);
//! - numbering: the newest `llm/retry` of the same turn, step, provider and policy key gives
//!   the previous retry number and the `retryId` (which stays stable across one step's retries);
//!   normal mode delegates once `previous ≥ max_retries`;
//! - a valid provider delay no larger than the ceiling is used verbatim (no jitter); a larger one
//!   makes normal mode delegate and always mode fall back to the local backoff. dsh's ceiling is
//!   `max_retry_wait_ms` (default 120 s), not upstream's `max_delay_ms` (10 s): a provider that
//!   asks for 30 s gets its 30 s instead of failing the turn (see docs/upstream/retry.md);
//! - dsh addition: normal mode retries a `TIMEOUT` at most `max_timeout_retries` times per step
//!   (default 2), counted from the step's `llm/retry` records of that code.

use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{
    AgentRequestError, RequestErrorCtx, ResolvedRetryPolicy, RetryDecision, RetryMode,
};
use dsh_kernel::{CancellationToken, Context, Next};
use dsh_session::{EventData, Session};
use serde_json::{Map, Value};

use crate::events::{LlmRetryNotice, RetryNotice, RetryNoticeKind};
use crate::policy::{ResolvedSettings, js_number, local_delay_ms, policy_key};
use crate::{LLM_RETRY, LLM_RETRY_STARTED};

/// A source of uniformly distributed samples in `[0, 1]` (jitter). Tests inject a constant.
pub type RandomFn = Arc<dyn Fn() -> f64 + Send + Sync>;

/// A sample in `[0, 1)` from a fresh v4 UUID's 53 random bits (no extra RNG dependency).
pub fn default_random() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() >> 75;
    bits as f64 / (1u64 << 53) as f64
}

/// A scheduled wait (ms) and whether it is the provider's.
struct Wait {
    delay_ms: f64,
    from_provider: bool,
}

/// The recovery executor shared by the plugin's listener.
pub struct RetryExecutor {
    settings: ResolvedSettings,
    random: RandomFn,
    lifetime: CancellationToken,
    notices: Option<Context>,
}

impl std::fmt::Debug for RetryExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryExecutor")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The previous retry of this turn/step/provider/policy key, read from the log.
struct Prior {
    retry: u64,
    retry_id: String,
}

/// How many `llm/retry` records of this turn and step retried a failure with `code`.
fn count_retries_of(session: &Session, turn: u64, step: u64, code: &str) -> u64 {
    session
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == LLM_RETRY)
        .filter(|e| {
            let EventData::Opaque(d) = &e.data else {
                return false;
            };
            d.get("turn").and_then(Value::as_u64) == Some(turn)
                && d.get("step").and_then(Value::as_u64) == Some(step)
                && d.pointer("/failure/code").and_then(Value::as_str) == Some(code)
        })
        .count() as u64
}

fn find_prior(session: &Session, turn: u64, step: u64, provider: &str, key: &str) -> Option<Prior> {
    session.events().iter().rev().find_map(|e| {
        if e.kind.as_str() != LLM_RETRY {
            return None;
        }
        let EventData::Opaque(d) = &e.data else {
            return None;
        };
        let matches = d.get("turn").and_then(Value::as_u64) == Some(turn)
            && d.get("step").and_then(Value::as_u64) == Some(step)
            && d.get("provider").and_then(Value::as_str) == Some(provider)
            && d.get("policyKey").and_then(Value::as_str) == Some(key);
        if !matches {
            return None;
        }
        Some(Prior {
            retry: d.get("retry").and_then(Value::as_u64).unwrap_or(0),
            retry_id: d
                .get("retryId")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        })
    })
}

async fn delegate(
    next: Option<Next<AgentRequestError>>,
    p: RequestErrorCtx,
) -> Option<RetryDecision> {
    match next {
        Some(n) => n.run(p).await,
        None => None,
    }
}

impl RetryExecutor {
    /// An executor with resolved settings, a jitter source and a lifetime token (cancelled when
    /// the plugin scope is disposed: pending waits end without a decision).
    pub fn new(settings: ResolvedSettings, random: RandomFn, lifetime: CancellationToken) -> Self {
        Self {
            settings,
            random,
            lifetime,
            notices: None,
        }
    }

    /// Announces every decision as [`LlmRetryNotice`] through `ctx` (dispatched to the failed
    /// request's scope key).
    pub fn with_notices(mut self, ctx: Context) -> Self {
        self.notices = Some(ctx);
        self
    }

    fn notify(&self, p: &RequestErrorCtx, kind: RetryNoticeKind) {
        if let Some(ctx) = &self.notices {
            ctx.dispatch_to(p.scope.as_ref())
                .emit::<LlmRetryNotice>(&RetryNotice {
                    session_id: p.session.id().to_owned(),
                    provider: p.provider.clone(),
                    failure: p.failure.clone(),
                    kind,
                });
        }
    }

    /// The most retries normal mode gives `code` per step (`max_retries`, and
    /// `max_timeout_retries` for `TIMEOUT`).
    fn max_retries_for(&self, max_retries: u64, code: &str) -> u64 {
        if code == dsh_llm::codes::TIMEOUT {
            max_retries.min(self.settings.max_timeout_retries)
        } else {
            max_retries
        }
    }

    /// The effective policy for one failure: the payload's (adapter-owned) policy, else the
    /// configured per-provider policy, else the configured default.
    pub fn policy_for(&self, p: &RequestErrorCtx) -> ResolvedRetryPolicy {
        p.retry_policy
            .clone()
            .unwrap_or_else(|| self.settings.policy_for(&p.provider).clone())
    }

    fn aborted(&self, p: &RequestErrorCtx) -> bool {
        p.cancellation.is_cancelled() || self.lifetime.is_cancelled()
    }

    /// Handles one `agent/request-error` dispatch (see the module docs for the rules).
    pub async fn recover(
        &self,
        p: RequestErrorCtx,
        next: Next<AgentRequestError>,
    ) -> Option<RetryDecision> {
        if self.lifetime.is_cancelled() {
            return None;
        }
        let policy = self.policy_for(&p);
        let mut next = Some(next);
        match &policy.mode {
            RetryMode::Always => {
                if self.aborted(&p) {
                    return None;
                }
                let downstream = delegate(next.take(), p.clone()).await;
                if self.aborted(&p) {
                    return None;
                }
                if downstream == Some(RetryDecision::Retry) {
                    return downstream;
                }
            }
            RetryMode::Normal {
                retryable_codes, ..
            } => {
                if !retryable_codes.contains(&p.failure.code) {
                    return delegate(next, p).await;
                }
                if p.failure.code == dsh_llm::codes::TIMEOUT
                    && count_retries_of(&p.session, p.turn, p.step, &p.failure.code)
                        >= self.settings.max_timeout_retries
                {
                    return delegate(next, p).await;
                }
            }
        }

        let key = policy_key(&policy);
        let prior = find_prior(&p.session, p.turn, p.step, &p.provider, &key);
        let previous = prior.as_ref().map_or(0, |x| x.retry);
        if let RetryMode::Normal { max_retries, .. } = &policy.mode
            && previous >= *max_retries
        {
            return delegate(next, p).await;
        }
        let retry = previous + 1;
        let retry_id = prior
            .map(|x| x.retry_id)
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let ceiling = self.settings.max_retry_wait_ms;
        let (delay_ms, from_provider) = match p.failure.provider_retry_after_ms.filter(|ms| *ms > 0)
        {
            Some(ms) if ms <= ceiling => (ms as f64, true),
            Some(ms) if matches!(policy.mode, RetryMode::Normal { .. }) => {
                self.notify(
                    &p,
                    RetryNoticeKind::WaitTooLong {
                        asked_ms: ms,
                        ceiling_ms: ceiling,
                    },
                );
                return delegate(next, p).await;
            }
            _ => (local_delay_ms(&policy, retry, (self.random)()), false),
        };
        let wait = Wait {
            delay_ms,
            from_provider,
        };
        self.backoff(&p, &policy, key, retry, retry_id, wait).await
    }

    async fn backoff(
        &self,
        p: &RequestErrorCtx,
        policy: &ResolvedRetryPolicy,
        key: String,
        retry: u64,
        retry_id: String,
        wait: Wait,
    ) -> Option<RetryDecision> {
        let Wait {
            delay_ms,
            from_provider,
        } = wait;
        if self.aborted(p) {
            return None;
        }
        let data = retry_event_data(p, policy, key, retry, &retry_id, delay_ms);
        if let Err(e) = p.session.append_value(LLM_RETRY, data, None, false) {
            tracing::warn!(target: "dsh_llm_retry", error = %e, "could not log llm/retry; the failure stays terminal");
            return None;
        }
        let of = match &policy.mode {
            RetryMode::Normal { max_retries, .. } => {
                Some(self.max_retries_for(*max_retries, &p.failure.code))
            }
            RetryMode::Always => None,
        };
        self.notify(
            p,
            RetryNoticeKind::Retrying {
                retry,
                of,
                delay_ms,
                from_provider,
            },
        );
        let wait = Duration::from_secs_f64(if delay_ms.is_finite() && delay_ms > 0.0 {
            delay_ms / 1000.0
        } else {
            0.0
        });
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = p.cancellation.cancelled() => return None,
            () = self.lifetime.cancelled() => return None,
        }
        let mut started = Map::new();
        started.insert("retryId".to_owned(), Value::from(retry_id));
        started.insert("turn".to_owned(), Value::from(p.turn));
        started.insert("step".to_owned(), Value::from(p.step));
        started.insert("retry".to_owned(), Value::from(retry));
        if let Err(e) =
            p.session
                .append_value(LLM_RETRY_STARTED, Value::Object(started), None, false)
        {
            tracing::warn!(target: "dsh_llm_retry", error = %e, "could not log llm/retry-started; the failure stays terminal");
            return None;
        }
        Some(RetryDecision::Retry)
    }
}

/// The `llm/retry` payload, keys in upstream order:
/// `{retryId, turn, step, provider, mode, policyKey, retry, maxRetries (normal only), delayMs,
/// failure}`.
fn retry_event_data(
    p: &RequestErrorCtx,
    policy: &ResolvedRetryPolicy,
    key: String,
    retry: u64,
    retry_id: &str,
    delay_ms: f64,
) -> Value {
    let mut m = Map::new();
    m.insert("retryId".to_owned(), Value::from(retry_id));
    m.insert("turn".to_owned(), Value::from(p.turn));
    m.insert("step".to_owned(), Value::from(p.step));
    m.insert("provider".to_owned(), Value::from(p.provider.clone()));
    m.insert("mode".to_owned(), Value::from(policy.mode.as_str()));
    m.insert("policyKey".to_owned(), Value::from(key));
    m.insert("retry".to_owned(), Value::from(retry));
    if let RetryMode::Normal { max_retries, .. } = &policy.mode {
        m.insert("maxRetries".to_owned(), Value::from(*max_retries));
    }
    m.insert("delayMs".to_owned(), js_number(delay_ms));
    m.insert(
        "failure".to_owned(),
        serde_json::to_value(&p.failure).unwrap_or(Value::Null),
    );
    Value::Object(m)
}
