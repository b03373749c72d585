//! HTTP failure mapping (status + body + headers → [`LlmFailure`]), context-overflow and quota
//! wording, and `Retry-After` parsing, shared by every HTTP provider plugin.
//!
//! See docs/upstream/llm.md (Usage and failures; adapter contract item 6),
//! docs/upstream/deepseek.md (HTTP errors; Retry-After) and docs/upstream/anthropic.md (Errors).

use dsh_llm::{LlmFailure, codes};
use serde_json::Value;

fn is_quota_wording(s: &str) -> bool {
    let s = s.to_ascii_lowercase();
    [
        "quota",
        "balance",
        "billing",
        "credit",
        "insufficient_funds",
        "payment required",
    ]
    .iter()
    .any(|w| s.contains(w))
}

/// Context-overflow wording over provider message/type/code (adapter contract item 6).
pub fn is_context_overflow(s: &str) -> bool {
    let s = s.to_ascii_lowercase();
    [
        "context length",
        "context_length",
        "context window",
        "maximum context",
        "context_window",
        "too many tokens",
        "prompt is too long",
        "input is too long",
        "exceeds the context",
        "reduce the length of the messages",
        "exceed context limit",
        // llama.cpp: "the request exceeds the available context size", exceed_context_size_error
        "available context size",
        "exceed_context_size",
    ]
    .iter()
    .any(|w| s.contains(w))
}

/// The wait a provider's too-large `Retry-After` saturates to (ms): 2^53 − 1, the largest
/// integer the session log stores losslessly (the failure, with this value, is logged), and far
/// above any `max_retry_wait_ms`, so the turn fails at once instead of the value being ignored
/// (docs/upstream/deepseek.md, Retry-After).
pub const SATURATED_WAIT_MS: u64 = (1 << 53) - 1;

/// Milliseconds as a `u64` in `1..=SATURATED_WAIT_MS`: a value too large (or infinite)
/// saturates to [`SATURATED_WAIT_MS`].
pub fn saturating_ms(ms: f64) -> u64 {
    if ms >= SATURATED_WAIT_MS as f64 {
        SATURATED_WAIT_MS
    } else {
        ms.ceil().max(1.0) as u64
    }
}

/// Parses a `retry-after-ms` header value: decimal digits, > 0; a number too large for a `u64`
/// (or above [`SATURATED_WAIT_MS`]) ⇒ [`SATURATED_WAIT_MS`]. Anything else ⇒ `None`.
pub fn retry_after_ms_header(value: &str) -> Option<u64> {
    let value = value.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match value.parse::<u64>() {
        Ok(0) => None,
        Ok(n) => Some(n.min(SATURATED_WAIT_MS)),
        Err(_) => Some(SATURATED_WAIT_MS),
    }
}

/// Parses a `Retry-After` value to milliseconds (> 0): delay-seconds (integer or decimal, as
/// RFC 9110 §10.2.3 and some providers send them; a number too large to represent ⇒
/// [`SATURATED_WAIT_MS`], i.e. above any wait ceiling) or an HTTP-date, taken relative to `now` (a date not
/// in the future ⇒ `None`, the local backoff applies). Anything else ⇒ `None`.
pub fn retry_after_ms_at(value: &str, now: std::time::SystemTime) -> Option<u64> {
    let value = value.trim();
    let numeric = value.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if numeric && let Ok(secs) = value.parse::<f64>() {
        return (secs > 0.0).then(|| saturating_ms(secs * 1000.0));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let wait = at.duration_since(now).ok()?;
    (!wait.is_zero()).then(|| saturating_ms(wait.as_secs_f64() * 1000.0))
}

/// [`retry_after_ms_at`] relative to the system clock.
pub fn retry_after_ms(value: &str) -> Option<u64> {
    retry_after_ms_at(value, std::time::SystemTime::now())
}

/// Maps a non-2xx response to a failure. Order: 401/403 ⇒ `AUTH`; 402 or quota/balance wording
/// ⇒ `QUOTA` (checked before 429); context-window wording on 400/413/422 ⇒
/// `CONTEXT_WINDOW_EXCEEDED`; 400/413/422 ⇒ `INVALID_REQUEST`; 429 ⇒ `RATE_LIMIT`; ≥ 500 ⇒
/// `SERVER`; anything else ⇒ `HTTP_<status>`. `status` is always set; `retry_after_ms` (from
/// `Retry-After` / `retry-after-ms`) and `request_id` (`x-request-id`) when given. The message is
/// the provider's `error.message` (or a top-level `message`, vLLM's shape; else the body's first
/// 300 characters, else the status), with
/// `secret` (the API key) redacted, prefixed by the route and, for `AUTH`, a hint naming
/// `key_env`.
pub fn http_failure(
    route_id: &str,
    status: u16,
    body: &str,
    retry_after_ms: Option<u64>,
    request_id: Option<String>,
    key_env: Option<&str>,
    secret: Option<&str>,
) -> LlmFailure {
    let parsed: Option<Value> = serde_json::from_str(body.trim()).ok();
    // The OpenAI envelope `{"error":{…}}`, else a top-level error object (vLLM:
    // `{"object":"error","message":…,"code":400}`).
    let err = parsed
        .as_ref()
        .and_then(|v| v.get("error").filter(|e| e.is_object()).or(Some(v)));
    let field = |k: &str| {
        err.and_then(|e| e.get(k))
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .unwrap_or_default()
    };
    let (msg, kind, code) = (field("message"), field("type"), field("code"));
    let mut message = if !msg.is_empty() {
        msg.clone()
    } else {
        let t: String = body.trim().chars().take(300).collect();
        if t.is_empty() {
            format!("HTTP {status}")
        } else {
            t
        }
    };
    if let Some(s) = secret.filter(|s| s.len() >= 4) {
        message = message.replace(s, "***");
    }
    let all = format!("{msg} {kind} {code}");
    let c = match status {
        300..=399 => codes::REDIRECT_REFUSED.to_owned(),
        401 | 403 => codes::AUTH.to_owned(),
        402 => codes::QUOTA.to_owned(),
        _ if (400..500).contains(&status) && is_quota_wording(&all) => codes::QUOTA.to_owned(),
        400 | 413 | 422 if is_context_overflow(&all) => codes::CONTEXT_WINDOW_EXCEEDED.to_owned(),
        400 | 413 | 422 => codes::INVALID_REQUEST.to_owned(),
        429 => codes::RATE_LIMIT.to_owned(),
        s if s >= 500 => codes::SERVER.to_owned(),
        s => format!("HTTP_{s}"),
    };
    let mut text = format!("{route_id}: {message} (HTTP {status})");
    if c == codes::AUTH
        && let Some(env) = key_env
    {
        text.push_str(&format!("; check the API key in env {env}"));
    }
    let mut f = LlmFailure::new(c, text).with_status(status);
    f.provider_retry_after_ms = retry_after_ms;
    f.request_id = request_id;
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trial 14 defect 3: llama.cpp's and vLLM's context errors are context-window failures,
    /// with the provider's message, not the raw body.
    #[test]
    fn llama_cpp_and_vllm_context_errors_are_classified() {
        let llama = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":17000,"n_ctx":16000}}"#;
        let f = http_failure("local", 400, llama, None, None, None, None);
        assert_eq!(
            (f.code.as_str(), f.message.as_str()),
            (
                "CONTEXT_WINDOW_EXCEEDED",
                "local: the request exceeds the available context size, try increasing it \
                 (HTTP 400)"
            )
        );
        let vllm = r#"{"object":"error","message":"This model's maximum context length is 16000 tokens. However, you requested 19169 tokens (10977 in the messages, 8192 in the completion).","type":"BadRequestError","param":null,"code":400}"#;
        let f = http_failure("local", 400, vllm, None, None, None, None);
        assert_eq!(
            (f.code.as_str(), f.message.as_str()),
            (
                "CONTEXT_WINDOW_EXCEEDED",
                "local: This model's maximum context length is 16000 tokens. However, you \
                 requested 19169 tokens (10977 in the messages, 8192 in the completion). (HTTP \
                 400)"
            )
        );
        let other = r#"{"object":"error","message":"bad field","code":400}"#;
        let f = http_failure("local", 400, other, None, None, None, None);
        assert_eq!(
            (f.code.as_str(), f.message.as_str()),
            ("INVALID_REQUEST", "local: bad field (HTTP 400)")
        );
    }
}
