//! Recognising the provider's "request is larger than the context window" failure.
//!
//! See docs/upstream/compaction.md (Triggers; Overflow). Adapters classify it as
//! `CONTEXT_WINDOW_EXCEEDED`; these helpers also recognise the raw HTTP 400/413 wording of
//! DeepSeek (`This model's maximum context length is N tokens. However, you requested M
//! tokens …`) and OpenAI (`context_length_exceeded`), for adapters that report it as a plain
//! `INVALID_REQUEST`, and read the stated limit. Anthropic Messages says `prompt is too long:
//! 208310 tokens > 200000 maximum` (HTTP 400, `invalid_request_error`) or `input length and
//! `max_tokens` exceed context limit: 188240 + 21333 > 200000`; both are recognised and their
//! limit read (docs/upstream/anthropic.md, Errors).

use dsh_llm::{LlmFailure, codes};
use serde_json::Value;

const WORDING: [&str; 11] = [
    "available context size",
    "exceed_context_size",
    "maximum context length",
    "context_length_exceeded",
    "context length",
    "context window",
    "context_window",
    "prompt is too long",
    "reduce the length of the messages",
    "exceeds the context",
    "exceed context limit",
];

/// True when `text` (an error message, type or code) says the request is too long for the
/// model's context (case-insensitive).
pub fn mentions_context_overflow(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    WORDING.iter().any(|w| t.contains(w))
}

/// True when an HTTP error response is a context overflow: status 413, or 400 whose OpenAI
/// envelope `{"error":{"message","type","code"}}` (or, unparsed, the body) has the wording.
pub fn is_overflow_response(status: u16, body: &str) -> bool {
    match status {
        413 => true,
        400 => {
            let parsed: Option<Value> = serde_json::from_str(body.trim()).ok();
            let text = match parsed.as_ref().and_then(|v| v.get("error")) {
                Some(e) => ["message", "type", "code"]
                    .iter()
                    .filter_map(|k| e.get(*k).and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(" "),
                None => body.to_owned(),
            };
            mentions_context_overflow(&text)
        }
        _ => false,
    }
}

/// True when a model-call failure is a context overflow: code `CONTEXT_WINDOW_EXCEEDED`, or an
/// HTTP 400/413 failure whose message has the wording.
pub fn is_context_overflow(failure: &LlmFailure) -> bool {
    failure.code == codes::CONTEXT_WINDOW_EXCEEDED
        || (matches!(failure.status, Some(400 | 413))
            && mentions_context_overflow(&failure.message))
}

/// The limit an overflow message states (`maximum context length is 1048576 tokens` ⇒
/// `1048576`), so the effective window can be corrected for the session.
pub fn stated_context_limit(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    // Anthropic: "… too long: 208310 tokens > 200000 maximum", "… limit: 188240 + 21333 > 200000"
    if lower.contains("prompt is too long") || lower.contains("exceed context limit") {
        let at = lower.rfind('>')? + 1;
        let digits: String = lower[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        return digits.parse().ok();
    }
    let at = lower.find("maximum context length is")? + "maximum context length is".len();
    let digits: String = lower[at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Per-agent accounting of context-overflow retries. After a context-window failure the loop
/// retries the request only when compaction (or pruning) changed the surface — its replace
/// generation advanced — and fewer than `max` retries were spent since the counter was last
/// reset; reset it on every `assistant/message` and when the agent goes idle. So a second
/// overflow right after a retry ends the turn instead of looping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverflowRetries {
    max: u32,
    used: u32,
}

impl OverflowRetries {
    /// A counter allowing `max` retries (`[compaction] max_overflow_retries`, default 1).
    pub fn new(max: u32) -> Self {
        Self { max, used: 0 }
    }

    /// Whether to retry after an overflow, given the surface's replace generation before and
    /// after the compaction attempt; counts the retry when it says yes.
    pub fn should_retry(&mut self, generation_before: u64, generation_after: u64) -> bool {
        if generation_after <= generation_before || self.used >= self.max {
            return false;
        }
        self.used += 1;
        true
    }

    /// Forgets the spent retries (an assistant message arrived, or the agent went idle).
    pub fn reset(&mut self) {
        self.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_prompt_too_long_is_an_overflow_with_its_limit() {
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#;
        assert!(is_overflow_response(400, body));
        assert_eq!(
            stated_context_limit("prompt is too long: 208310 tokens > 200000 maximum"),
            Some(200_000)
        );
        let other = "input length and `max_tokens` exceed context limit: 188240 + 21333 > \
                     200000, decrease input length or `max_tokens` and try again";
        assert!(mentions_context_overflow(other));
        assert_eq!(stated_context_limit(other), Some(200_000));
        let failure = LlmFailure::new(codes::INVALID_REQUEST, other).with_status(400);
        assert!(is_context_overflow(&failure));
        assert_eq!(
            stated_context_limit("This model's maximum context length is 131072 tokens."),
            Some(131_072)
        );
    }

    #[test]
    fn one_retry_per_overflow_and_only_when_the_surface_changed() {
        let mut r = OverflowRetries::new(1);
        assert!(!r.should_retry(3, 3), "nothing was compacted");
        assert!(r.should_retry(3, 4));
        assert!(!r.should_retry(4, 5), "a second overflow ends the turn");
        r.reset();
        assert!(r.should_retry(5, 6));
        let mut none = OverflowRetries::new(0);
        assert!(!none.should_retry(0, 1));
    }
}
