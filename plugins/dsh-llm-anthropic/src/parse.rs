//! Stream translation: Anthropic Messages SSE events → [`StreamChunk`]s per the adapter
//! contract, and the failure mapping of `error` events and error bodies.
//!
//! See docs/upstream/anthropic.md (SSE decoding; Replay state; Errors).

use dsh_llm::{
    ContentBlock, FinishReason, LlmFailure, ReplayEnvelope, StreamChunk, TokenUsage, codes,
};
use dsh_llm_http::is_context_overflow;
use serde_json::{Value, json};

use crate::request::{REDACTED_TEXT, REPLAY_KIND, REPLAY_VERSION};

/// The canonical code of an Anthropic error `type` (from an `error` event or an error body)
/// with its `message`: `overloaded_error` / `api_error` ⇒ `SERVER`; `rate_limit_error` ⇒
/// `RATE_LIMIT`; `authentication_error` / `permission_error` ⇒ `AUTH`; context wording
/// (`prompt is too long`, …) ⇒ `CONTEXT_WINDOW_EXCEEDED`; `invalid_request_error` /
/// `request_too_large` / `not_found_error` ⇒ `INVALID_REQUEST`; anything else ⇒ `SERVER`.
pub fn error_type_code(kind: &str, message: &str) -> &'static str {
    match kind {
        "overloaded_error" | "api_error" => codes::SERVER,
        "rate_limit_error" => codes::RATE_LIMIT,
        "authentication_error" | "permission_error" => codes::AUTH,
        _ if is_context_overflow(&format!("{kind} {message}")) => codes::CONTEXT_WINDOW_EXCEEDED,
        "invalid_request_error" | "request_too_large" | "not_found_error" => codes::INVALID_REQUEST,
        _ => codes::SERVER,
    }
}

/// The failure of an in-stream `error` event's data (`{"type":"error","error":{"type",
/// "message"}}`), prefixed by the route: e.g. `overloaded_error` ⇒ `SERVER` "anthropic:
/// Overloaded (overloaded_error)".
pub fn stream_error_failure(route: &str, data: &Value) -> LlmFailure {
    let err = data.get("error").unwrap_or(data);
    let kind = err.get("type").and_then(Value::as_str).unwrap_or("error");
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the provider reported an error");
    LlmFailure::new(
        error_type_code(kind, message),
        format!("{route}: {message} ({kind})"),
    )
}

/// One content block being received.
#[derive(Debug)]
struct Partial {
    /// `text`, `reasoning`, `tool-call`.
    kind: &'static str,
    text: String,
    signature: Option<String>,
    redacted: Option<String>,
    id: String,
    name: String,
    /// `input` of `content_block_start` (used when no `input_json_delta` arrives).
    start_input: Value,
    named: bool,
    closed: bool,
}

/// Translates one response's events to chunks. Feed each SSE event with
/// [`StreamTranslator::push_event`]; end with [`StreamTranslator::finish_eof`] or
/// [`StreamTranslator::finish_with`].
#[derive(Debug)]
pub struct StreamTranslator {
    route: String,
    model: String,
    /// wire index → position among started blocks
    wire: Vec<(u64, usize)>,
    blocks: Vec<Partial>,
    usage: Option<TokenUsage>,
    response_id: Option<String>,
    response_model: Option<String>,
    stop_reason: Option<String>,
    started: bool,
    ended: bool,
    /// The request body's size, for the estimate when the response carries no usage.
    prompt_bytes: Option<usize>,
}

fn usage_from(v: &Value, base: Option<TokenUsage>) -> TokenUsage {
    let mut u = base.unwrap_or_default();
    let get = |k: &str| v.get(k).and_then(Value::as_u64);
    if let Some(n) = get("input_tokens") {
        u.input_tokens = n;
    }
    if let Some(n) = get("output_tokens") {
        u.output_tokens = n;
    }
    if let Some(n) = get("cache_read_input_tokens") {
        u.cache_read_tokens = (n > 0).then_some(n);
    }
    if let Some(n) = get("cache_creation_input_tokens") {
        u.cache_write_tokens = (n > 0).then_some(n);
    }
    u
}

impl StreamTranslator {
    /// A translator for one call on `route` for `model` (both recorded in the replay state).
    pub fn new(route: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            route: route.into(),
            model: model.into(),
            wire: Vec::new(),
            blocks: Vec::new(),
            usage: None,
            response_id: None,
            response_model: None,
            stop_reason: None,
            started: false,
            ended: false,
            prompt_bytes: None,
        }
    }

    /// Turns usage estimation on: when the response completes without any wire `usage`
    /// (neither `message_start` nor `message_delta` carried one), a `usage` chunk is emitted
    /// with `estimated: true`, input tokens ⌈`prompt_bytes` / 4⌉ (the request body) and output
    /// tokens ⌈bytes / 4⌉ of the answer's text, thinking, tool names and arguments — the
    /// estimate the OpenAI-format route makes (docs/upstream/anthropic.md, "Usage").
    pub fn set_prompt_bytes(&mut self, prompt_bytes: usize) {
        self.prompt_bytes = Some(prompt_bytes);
    }

    /// The usage to report at the end of a completed response: the wire's, else the estimate
    /// when [`StreamTranslator::set_prompt_bytes`] turned it on.
    fn final_usage(&self) -> Option<TokenUsage> {
        if self.usage.is_some() {
            return self.usage;
        }
        let prompt = self.prompt_bytes?;
        let answer: usize = self
            .blocks
            .iter()
            .map(|b| b.text.len() + b.name.len())
            .sum();
        Some(TokenUsage {
            input_tokens: (prompt as u64).div_ceil(4),
            output_tokens: (answer as u64).div_ceil(4),
            estimated: true,
            ..TokenUsage::default()
        })
    }

    /// The terminal chunk was produced.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    fn position(&self, wire: u64) -> Option<usize> {
        self.wire.iter().find(|(w, _)| *w == wire).map(|(_, p)| *p)
    }

    fn fail(&mut self, failure: LlmFailure, out: &mut Vec<StreamChunk>) {
        if let Some(usage) = self.usage {
            out.push(StreamChunk::Usage { usage });
        }
        out.push(StreamChunk::Finish {
            reason: FinishReason::Error { failure },
            replay_state: None,
        });
        self.ended = true;
    }

    /// Feeds one SSE event (`name` = its `event:` field; the `type` in `data` wins) and appends
    /// the chunks it yields to `out`. Nothing is appended once the stream ended.
    pub fn push_event(&mut self, name: Option<&str>, data: &str, out: &mut Vec<StreamChunk>) {
        if self.ended {
            return;
        }
        let v: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) => {
                if name == Some("ping") || data.trim().is_empty() {
                    return;
                }
                let failure = LlmFailure::new(
                    codes::TRANSPORT,
                    format!(
                        "{}: the provider sent an event that is not JSON: {e}",
                        self.route
                    ),
                );
                self.fail(failure, out);
                return;
            }
        };
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .or(name)
            .unwrap_or("")
            .to_owned();
        match kind.as_str() {
            "message_start" => {
                self.started = true;
                let m = v.get("message").unwrap_or(&Value::Null);
                self.response_id = m.get("id").and_then(Value::as_str).map(str::to_owned);
                self.response_model = m.get("model").and_then(Value::as_str).map(str::to_owned);
                if let Some(u) = m.get("usage") {
                    self.usage = Some(usage_from(u, None));
                }
            }
            "content_block_start" => self.block_start(&v, out),
            "content_block_delta" => self.block_delta(&v, out),
            "content_block_stop" => {
                let Some(pos) = v
                    .get("index")
                    .and_then(Value::as_u64)
                    .and_then(|w| self.position(w))
                else {
                    return;
                };
                self.close(pos, out);
            }
            "message_delta" => {
                if let Some(r) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(r.to_owned());
                }
                if let Some(u) = v.get("usage") {
                    self.usage = Some(usage_from(u, self.usage));
                }
            }
            "message_stop" => self.finish(out),
            "error" => {
                let failure = stream_error_failure(&self.route, &v);
                self.fail(failure, out);
            }
            _ => {}
        }
    }

    fn block_start(&mut self, v: &Value, out: &mut Vec<StreamChunk>) {
        let Some(wire) = v.get("index").and_then(Value::as_u64) else {
            return;
        };
        if self.position(wire).is_some() {
            return;
        }
        let cb = v.get("content_block").unwrap_or(&Value::Null);
        let s = |k: &str| cb.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let (kind, partial) = match cb.get("type").and_then(Value::as_str) {
            Some("thinking") => (
                "reasoning",
                Partial {
                    kind: "reasoning",
                    text: s("thinking"),
                    signature: cb
                        .get("signature")
                        .and_then(Value::as_str)
                        .filter(|sig| !sig.is_empty())
                        .map(str::to_owned),
                    ..Partial::new("reasoning")
                },
            ),
            Some("redacted_thinking") => (
                "reasoning",
                Partial {
                    redacted: Some(s("data")),
                    ..Partial::new("reasoning")
                },
            ),
            Some("tool_use") => (
                "tool-call",
                Partial {
                    id: s("id"),
                    name: s("name"),
                    start_input: cb.get("input").cloned().unwrap_or_else(|| json!({})),
                    ..Partial::new("tool-call")
                },
            ),
            Some("text") => (
                "text",
                Partial {
                    text: s("text"),
                    ..Partial::new("text")
                },
            ),
            // server tools, citations, …: not modelled; their deltas are ignored
            _ => return,
        };
        let pos = self.blocks.len();
        self.wire.push((wire, pos));
        let index = pos as u32;
        out.push(StreamChunk::BlockStart {
            index,
            block_type: kind.to_owned(),
        });
        if !partial.text.is_empty() {
            out.push(if kind == "text" {
                StreamChunk::TextDelta {
                    index,
                    text: partial.text.clone(),
                }
            } else {
                StreamChunk::ReasoningDelta {
                    index,
                    text: partial.text.clone(),
                }
            });
        }
        self.blocks.push(partial);
    }

    fn block_delta(&mut self, v: &Value, out: &mut Vec<StreamChunk>) {
        let Some(pos) = v
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|w| self.position(w))
        else {
            return;
        };
        let d = v.get("delta").unwrap_or(&Value::Null);
        let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let Some(b) = self.blocks.get_mut(pos) else {
            return;
        };
        if b.closed {
            return;
        }
        let index = pos as u32;
        match d.get("type").and_then(Value::as_str) {
            Some("text_delta") => {
                let t = s("text");
                b.text.push_str(&t);
                if !t.is_empty() {
                    out.push(StreamChunk::TextDelta { index, text: t });
                }
            }
            Some("thinking_delta") => {
                let t = s("thinking");
                b.text.push_str(&t);
                if !t.is_empty() {
                    out.push(StreamChunk::ReasoningDelta { index, text: t });
                }
            }
            Some("signature_delta") => {
                b.signature
                    .get_or_insert_with(String::new)
                    .push_str(&s("signature"));
            }
            Some("input_json_delta") => {
                let t = s("partial_json");
                b.text.push_str(&t);
                if !t.is_empty() {
                    let name = (!b.named).then(|| b.name.clone());
                    b.named = true;
                    out.push(StreamChunk::ToolCallDelta {
                        index,
                        id: b.id.clone().into(),
                        name,
                        arguments_delta: t,
                    });
                }
            }
            _ => {}
        }
    }

    fn close(&mut self, pos: usize, out: &mut Vec<StreamChunk>) {
        let Some(b) = self.blocks.get_mut(pos) else {
            return;
        };
        if b.closed {
            return;
        }
        b.closed = true;
        out.push(StreamChunk::BlockEnd {
            index: pos as u32,
            block: b.block(),
        });
    }

    fn finish(&mut self, out: &mut Vec<StreamChunk>) {
        for pos in 0..self.blocks.len() {
            self.close(pos, out);
        }
        let reason = match self.stop_reason.as_deref() {
            Some("end_turn" | "pause_turn" | "stop_sequence") | None => FinishReason::Stop,
            Some("max_tokens") => FinishReason::MaxTokens,
            Some("tool_use") => FinishReason::ToolCalls,
            Some(other) => FinishReason::Error {
                failure: LlmFailure::new(
                    other.to_ascii_uppercase(),
                    format!(
                        "{}: the model stopped with stop_reason {other:?}",
                        self.route
                    ),
                ),
            },
        };
        if reason == FinishReason::Stop && self.blocks.is_empty() {
            let failure = LlmFailure::new(
                codes::EMPTY_RESPONSE,
                format!("{}: the model answered with no content", self.route),
            );
            self.fail(failure, out);
            return;
        }
        if let Some(usage) = self.final_usage() {
            out.push(StreamChunk::Usage { usage });
        }
        let replay_state = Some(self.replay_envelope());
        out.push(StreamChunk::Finish {
            reason,
            replay_state,
        });
        self.ended = true;
    }

    fn replay_envelope(&self) -> ReplayEnvelope {
        let mut response = json!({
            "kind": REPLAY_KIND,
            "version": REPLAY_VERSION,
            "provider": self.route,
            "model": self.model,
            "stopReason": self.stop_reason,
        });
        if let Some(id) = &self.response_id {
            response["responseId"] = json!(id);
        }
        if let Some(m) = &self.response_model {
            response["responseModel"] = json!(m);
        }
        let blocks = self
            .blocks
            .iter()
            .map(|b| match b.kind {
                "reasoning" => match (&b.redacted, &b.signature) {
                    (Some(data), _) => json!({"type": "reasoning", "redacted": true, "data": data}),
                    (None, Some(sig)) => json!({"type": "reasoning", "signature": sig}),
                    (None, None) => json!({"type": "reasoning"}),
                },
                kind => json!({"type": kind}),
            })
            .collect();
        ReplayEnvelope {
            response,
            blocks: Some(blocks),
        }
    }

    /// Ends the stream with `failure` (`aborted` when `aborted`): the usage so far, then the
    /// terminal finish.
    pub fn finish_with(&mut self, failure: LlmFailure, aborted: bool, out: &mut Vec<StreamChunk>) {
        if self.ended {
            return;
        }
        if aborted {
            if let Some(usage) = self.usage {
                out.push(StreamChunk::Usage { usage });
            }
            out.push(StreamChunk::Finish {
                reason: FinishReason::Aborted { failure },
                replay_state: None,
            });
            self.ended = true;
        } else {
            self.fail(failure, out);
        }
    }

    /// The body ended: after `message_stop` nothing happens; otherwise `TRANSPORT` "stream
    /// ended before message_stop" (or "… before message_start" when nothing arrived).
    pub fn finish_eof(&mut self, out: &mut Vec<StreamChunk>) {
        if self.ended {
            return;
        }
        let what = if self.started {
            "message_stop"
        } else {
            "message_start"
        };
        let failure = LlmFailure::new(
            codes::TRANSPORT,
            format!("{}: the stream ended before {what}", self.route),
        );
        self.fail(failure, out);
    }
}

impl Partial {
    fn new(kind: &'static str) -> Self {
        Self {
            kind,
            text: String::new(),
            signature: None,
            redacted: None,
            id: String::new(),
            name: String::new(),
            start_input: Value::Null,
            named: false,
            closed: false,
        }
    }

    /// The complete block: a tool call's arguments are its input re-serialized compactly (the
    /// raw text when it does not parse; the start input when no delta came).
    fn block(&self) -> ContentBlock {
        match self.kind {
            "reasoning" if self.redacted.is_some() => ContentBlock::reasoning(REDACTED_TEXT),
            "reasoning" => ContentBlock::reasoning(self.text.clone()),
            "tool-call" => {
                let arguments = if self.text.trim().is_empty() {
                    match &self.start_input {
                        Value::Null => "{}".to_owned(),
                        v => v.to_string(),
                    }
                } else {
                    match serde_json::from_str::<Value>(&self.text) {
                        Ok(v) => v.to_string(),
                        Err(_) => self.text.clone(),
                    }
                };
                ContentBlock::tool_call(self.id.clone(), self.name.clone(), arguments)
            }
            _ => ContentBlock::text(self.text.clone()),
        }
    }
}

/// Translates a complete SSE body held in memory (no HTTP), as the adapter would: each event's
/// `event:` name and `data`, then end of body. Events are split on blank lines (LF or CRLF);
/// `data:` lines of one event are joined with `\n`.
pub fn translate_sse_text(route: &str, model: &str, body: &str) -> Vec<StreamChunk> {
    let mut tr = StreamTranslator::new(route, model);
    let mut out = Vec::new();
    let body = body.replace("\r\n", "\n");
    for event in body.split("\n\n") {
        let mut name = None;
        let mut data: Vec<&str> = Vec::new();
        for line in event.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = Some(n.trim());
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        if !data.is_empty() {
            tr.push_event(name, &data.join("\n"), &mut out);
        }
    }
    tr.finish_eof(&mut out);
    out
}
