//! Retry policy configuration, resolution and the pure timing functions: the local backoff
//! delay and the policy key that scopes retry numbering.
//!
//! See docs/upstream/retry.md (Policy; Delay; the policy key under The listener).

use std::collections::BTreeMap;

use dsh_agent::events::{
    DEFAULT_INITIAL_DELAY_MS, DEFAULT_JITTER_RATIO, DEFAULT_MAX_DELAY_MS, DEFAULT_MAX_RETRIES,
    DEFAULT_RETRYABLE_CODES,
};
use dsh_agent::{ResolvedRetryPolicy, RetryMode};
use serde::Deserialize;
use serde_json::Value;

use crate::error::RetryError;

/// The largest delay a timer accepts (2^31 − 1 ms, the JavaScript timer limit upstream uses).
pub const MAX_TIMER_DELAY_MS: f64 = 2_147_483_647.0;

/// The largest integer JSON carries losslessly (2^53 − 1).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Policy mode in configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModeConfig {
    /// Bounded retry of transient codes (default).
    #[default]
    Normal,
    /// Retry every failure until success or cancellation.
    Always,
}

/// Backoff configuration; every field defaults (500 ms, 10 000 ms, 0.1).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BackoffConfig {
    /// Initial local delay (ms), `0 < x ≤ 2^31−1`, `≤ max_delay_ms`.
    pub initial_delay_ms: Option<f64>,
    /// Maximum local delay and largest accepted provider delay (ms), `0 < x ≤ 2^31−1`.
    pub max_delay_ms: Option<f64>,
    /// Jitter ratio in `[0, 1]`.
    pub jitter_ratio: Option<f64>,
}

/// One retry policy as configured (snake_case). Always mode ignores `max_retries` and
/// `retryable_codes` (upstream keeps them valid so layered config may switch modes).
///
/// JSON: `{"mode":"normal"|"always","max_retries":5,"retryable_codes":[…],
/// "backoff":{"initial_delay_ms":500,"max_delay_ms":10000,"jitter_ratio":0.1}}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicyConfig {
    /// The mode (default normal).
    pub mode: ModeConfig,
    /// Normal mode: maximum retries after the first request (default 5).
    pub max_retries: Option<u64>,
    /// Normal mode: retryable failure codes (default
    /// `[EMPTY_RESPONSE, RATE_LIMIT, SERVER, TIMEOUT, TRANSPORT]`).
    pub retryable_codes: Option<Vec<String>>,
    /// Backoff.
    pub backoff: BackoffConfig,
}

/// The default ceiling on a provider-requested wait (`Retry-After`), in milliseconds (2 min).
pub const DEFAULT_MAX_RETRY_WAIT_MS: u64 = 120_000;

/// The default number of retries of a timed-out request (`TIMEOUT`) per step.
pub const DEFAULT_MAX_TIMEOUT_RETRIES: u64 = 2;

/// The `dsh-llm-retry` settings section: the default policy's fields at top level plus
/// per-provider overrides, and two limits of this plugin (also settable under `[agent]`, an
/// alias of this section).
///
/// JSON: `{"mode"?,"max_retries"?,"retryable_codes"?,"backoff"?,"providers"?:{"<route>":{…}},
/// "max_retry_wait_ms"?,"max_timeout_retries"?}`.
///
/// Policy precedence for one failed request: the policy carried by the `agent/request-error`
/// payload (adapter-owned, as upstream) ▸ `providers[<route>]` ▸ the top-level default.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RetrySettings {
    /// Default policy mode.
    pub mode: ModeConfig,
    /// Default policy `max_retries` (default 5).
    #[schemars(extend("default" = DEFAULT_MAX_RETRIES))]
    pub max_retries: Option<u64>,
    /// Default policy `retryable_codes`.
    pub retryable_codes: Option<Vec<String>>,
    /// Default policy backoff.
    pub backoff: BackoffConfig,
    /// Per-provider-route policies.
    pub providers: BTreeMap<String, RetryPolicyConfig>,
    /// The longest wait a provider may ask for (`Retry-After`, `retry-after-ms`, a "try again
    /// in" hint) that is honoured, in milliseconds (default 120,000). A longer one fails the
    /// request at once in normal mode (always mode uses its local backoff instead).
    #[schemars(extend("default" = DEFAULT_MAX_RETRY_WAIT_MS))]
    pub max_retry_wait_ms: Option<u64>,
    /// Normal mode: retries of a timed-out request (`TIMEOUT`) per step (default 2; also
    /// bounded by `max_retries`).
    #[schemars(extend("default" = DEFAULT_MAX_TIMEOUT_RETRIES))]
    pub max_timeout_retries: Option<u64>,
}

/// The settings resolved once at plugin start.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedSettings {
    /// The default policy.
    pub default: ResolvedRetryPolicy,
    /// Per-provider policies.
    pub providers: BTreeMap<String, ResolvedRetryPolicy>,
    /// Ceiling on a provider-requested wait (ms).
    pub max_retry_wait_ms: u64,
    /// Normal mode: retries of `TIMEOUT` failures per step.
    pub max_timeout_retries: u64,
}

impl ResolvedSettings {
    /// The configured policy for `provider`.
    pub fn policy_for(&self, provider: &str) -> &ResolvedRetryPolicy {
        self.providers.get(provider).unwrap_or(&self.default)
    }
}

impl RetrySettings {
    /// Validates and resolves every policy.
    ///
    /// # Errors
    /// [`RetryError::InvalidPolicy`] naming the offending path (e.g.
    /// `dsh-llm-retry.providers.x.backoff.jitter_ratio`).
    pub fn resolve(&self) -> Result<ResolvedSettings, RetryError> {
        let default = resolve_retry_policy(
            &RetryPolicyConfig {
                mode: self.mode,
                max_retries: self.max_retries,
                retryable_codes: self.retryable_codes.clone(),
                backoff: self.backoff.clone(),
            },
            "dsh-llm-retry",
        )?;
        let mut providers = BTreeMap::new();
        for (name, cfg) in &self.providers {
            providers.insert(
                name.clone(),
                resolve_retry_policy(cfg, &format!("dsh-llm-retry.providers.{name}"))?,
            );
        }
        let max_retry_wait_ms = self.max_retry_wait_ms.unwrap_or(DEFAULT_MAX_RETRY_WAIT_MS);
        if max_retry_wait_ms as f64 > MAX_TIMER_DELAY_MS {
            return Err(RetryError::InvalidPolicy {
                path: "dsh-llm-retry.max_retry_wait_ms".to_owned(),
                reason: "must be no greater than 2147483647".to_owned(),
            });
        }
        Ok(ResolvedSettings {
            default,
            providers,
            max_retry_wait_ms,
            max_timeout_retries: self
                .max_timeout_retries
                .unwrap_or(DEFAULT_MAX_TIMEOUT_RETRIES),
        })
    }
}

/// Validates and defaults one policy (upstream `resolveRetryPolicy`).
///
/// # Errors
/// [`RetryError::InvalidPolicy`] when `max_retries` exceeds 2^53−1, `retryable_codes` is empty,
/// has an empty or duplicate code, a delay is not positive, finite and ≤ 2^31−1, the initial
/// delay exceeds the maximum, or the jitter ratio is outside `[0, 1]`.
pub fn resolve_retry_policy(
    config: &RetryPolicyConfig,
    path: &str,
) -> Result<ResolvedRetryPolicy, RetryError> {
    let invalid = |field: &str, reason: &str| RetryError::InvalidPolicy {
        path: format!("{path}.{field}"),
        reason: reason.to_owned(),
    };
    let initial = config
        .backoff
        .initial_delay_ms
        .unwrap_or(DEFAULT_INITIAL_DELAY_MS);
    let max = config.backoff.max_delay_ms.unwrap_or(DEFAULT_MAX_DELAY_MS);
    let jitter = config.backoff.jitter_ratio.unwrap_or(DEFAULT_JITTER_RATIO);
    let delay_ok = |x: f64| x.is_finite() && x > 0.0 && x <= MAX_TIMER_DELAY_MS;
    if !delay_ok(initial) {
        return Err(invalid(
            "backoff.initial_delay_ms",
            "must be a positive finite number no greater than 2147483647",
        ));
    }
    if !delay_ok(max) {
        return Err(invalid(
            "backoff.max_delay_ms",
            "must be a positive finite number no greater than 2147483647",
        ));
    }
    if initial > max {
        return Err(invalid(
            "backoff.initial_delay_ms",
            "must be less than or equal to max_delay_ms",
        ));
    }
    if !(jitter.is_finite() && (0.0..=1.0).contains(&jitter)) {
        return Err(invalid("backoff.jitter_ratio", "must be between 0 and 1"));
    }
    let mode = match config.mode {
        ModeConfig::Always => RetryMode::Always,
        ModeConfig::Normal => {
            let max_retries = config.max_retries.unwrap_or(DEFAULT_MAX_RETRIES);
            if max_retries > MAX_SAFE_INTEGER {
                return Err(invalid(
                    "max_retries",
                    "must be a non-negative safe integer",
                ));
            }
            let codes: Vec<String> = match &config.retryable_codes {
                Some(c) => c.clone(),
                None => DEFAULT_RETRYABLE_CODES
                    .iter()
                    .map(|c| (*c).to_owned())
                    .collect(),
            };
            if codes.is_empty() {
                return Err(invalid("retryable_codes", "must not be empty"));
            }
            if codes.iter().any(String::is_empty) {
                return Err(invalid(
                    "retryable_codes",
                    "must contain only non-empty strings",
                ));
            }
            let unique: std::collections::BTreeSet<&String> = codes.iter().collect();
            if unique.len() != codes.len() {
                return Err(invalid("retryable_codes", "must not contain duplicates"));
            }
            RetryMode::Normal {
                max_retries,
                retryable_codes: codes,
            }
        }
    };
    Ok(ResolvedRetryPolicy {
        mode,
        initial_delay_ms: initial,
        max_delay_ms: max,
        jitter_ratio: jitter,
    })
}

/// The local backoff delay (ms) before retry number `retry` (≥ 1), with `random` in `[0, 1]`:
/// `min(min(initial·2^(retry−1), max) · (1 − j + 2j·random), max)`. The exponent is capped at
/// 1024 (then the product is infinite and the `min` yields `max`).
pub fn local_delay_ms(policy: &ResolvedRetryPolicy, retry: u64, random: f64) -> f64 {
    let exponent = retry.saturating_sub(1).min(1024);
    let exponential =
        (policy.initial_delay_ms * 2f64.powi(exponent as i32)).min(policy.max_delay_ms);
    let jitter = 1.0 - policy.jitter_ratio + 2.0 * policy.jitter_ratio * random;
    (exponential * jitter).min(policy.max_delay_ms)
}

/// A JSON number the way JavaScript prints it: integral values (within ±2^53) as integers,
/// others as their shortest float form. Non-finite values become `null`.
pub fn js_number(x: f64) -> Value {
    if x.is_finite() && x.fract() == 0.0 && x.abs() <= MAX_SAFE_INTEGER as f64 {
        // The range check above makes the cast exact.
        Value::from(x as i64)
    } else {
        serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

/// The policy key: the JSON text of the policy's behaviour fields, as upstream
/// `JSON.stringify`s them — normal `["normal",maxRetries,[codes sorted],initial,max,jitter]`,
/// always `["always",initial,max,jitter]`. Retry numbering continues only across `llm/retry`
/// events with the same provider and key.
pub fn policy_key(policy: &ResolvedRetryPolicy) -> String {
    let backoff = [
        js_number(policy.initial_delay_ms),
        js_number(policy.max_delay_ms),
        js_number(policy.jitter_ratio),
    ];
    let mut parts: Vec<Value> = vec![Value::from(policy.mode.as_str())];
    if let RetryMode::Normal {
        max_retries,
        retryable_codes,
    } = &policy.mode
    {
        let mut codes = retryable_codes.clone();
        codes.sort();
        parts.push(Value::from(*max_retries));
        parts.push(Value::from(codes));
    }
    parts.extend(backoff);
    Value::Array(parts).to_string()
}
