//! Response translation: SSE `data:` payloads of an OpenAI-format chat-completions stream →
//! [`StreamChunk`]s, as a synchronous state machine callable without HTTP.
//!
//! See docs/upstream/llm.md (Stream chunks; Adapter contract; Usage and failures) and
//! docs/upstream/deepseek.md (Stream translation; wire fixtures 1–14 and 22–28; bug cases BC-01,
//! BC-02, BC-05).

use std::borrow::Cow;
use std::fmt;

use dsh_llm::{CallId, ContentBlock, FinishReason, LlmFailure, StreamChunk, TokenUsage, codes};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Deserialize)]
struct WireChunk<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Option<Vec<WireChoice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(default)]
    index: u32,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
}

#[derive(Deserialize)]
struct WireToolCall<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<WireFunction<'a>>,
}

#[derive(Deserialize)]
struct WireFunction<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "args_text")]
    arguments: Option<Cow<'a, str>>,
}

/// Accepts arguments as a JSON string (kept raw) or as any other JSON value (re-stringified,
/// adapter contract item 2).
fn args_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("tool-call arguments")
        }
        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_owned())))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v)))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(self)
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_string())))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_string())))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_string())))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(Value::from(v).to_string())))
        }
        fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
            let v = Value::deserialize(de::value::MapAccessDeserializer::new(a))?;
            Ok(Some(Cow::Owned(v.to_string())))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
            let v = Value::deserialize(de::value::SeqAccessDeserializer::new(a))?;
            Ok(Some(Cow::Owned(v.to_string())))
        }
    }
    d.deserialize_option(V)
}

/// The wire `usage` object (OpenAI / DeepSeek / llama.cpp fields; unknown ones ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireUsage {
    /// Total prompt tokens (cached included).
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// Completion tokens (reasoning included).
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    /// DeepSeek cache hits.
    #[serde(default)]
    pub prompt_cache_hit_tokens: Option<u64>,
    /// DeepSeek cache misses.
    #[serde(default)]
    pub prompt_cache_miss_tokens: Option<u64>,
    /// `{cached_tokens}`.
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptDetails>,
    /// `{reasoning_tokens}`.
    #[serde(default)]
    pub completion_tokens_details: Option<CompletionDetails>,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptDetails {
    /// Cached prompt tokens.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

/// `usage.completion_tokens_details`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionDetails {
    /// Reasoning tokens (part of completion tokens).
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

impl WireUsage {
    /// Disjoint [`TokenUsage`]: cache read = `prompt_cache_hit_tokens` (else
    /// `prompt_tokens_details.cached_tokens`); input = `prompt_cache_miss_tokens` (else
    /// prompt − cache read, saturating); output = completion; reasoning from the details.
    pub fn to_usage(&self) -> TokenUsage {
        let cache_read = self.prompt_cache_hit_tokens.or(self
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens));
        let input = self.prompt_cache_miss_tokens.unwrap_or_else(|| {
            self.prompt_tokens
                .unwrap_or(0)
                .saturating_sub(cache_read.unwrap_or(0))
        });
        TokenUsage {
            input_tokens: input,
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_read_tokens: cache_read,
            cache_write_tokens: None,
            reasoning_tokens: self
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens),
            estimated: false,
        }
    }
}

#[derive(Debug)]
enum Slot {
    Text(String),
    Reasoning(String),
    Call {
        id: String,
        /// The provider's id for the call, when it sent one (fragments are routed by it).
        wire_id: Option<String>,
        synthesized: bool,
        wire_index: u32,
        name: String,
        args: String,
    },
}

/// Where the translator stands after a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Keep feeding payloads.
    More,
    /// A terminal chunk was queued (`[DONE]`, a stream `error`); ignore further input.
    Ended,
}

/// Translates one response stream. Feed every SSE `data` payload to
/// [`StreamTranslator::push_data`], then call [`StreamTranslator::finish_eof`] when the body
/// ends without `[DONE]`. Output chunks are appended to the caller's vector, in contract order:
/// `block-start` / deltas as they arrive (block indices in first-seen order; no empty deltas),
/// then at the end every `block-end` (index order), `usage` (if any arrived), and exactly one
/// `finish`; nothing after it.
///
/// Finish mapping (wire `finish_reason`, `stop` when `[DONE]` came without one): `stop` /
/// `tool_calls` with tool calls ⇒ `tool-calls`; `stop` / `tool_calls` with neither non-blank
/// text nor tool calls (e.g. reasoning only, fixture 14) ⇒ `error` `EMPTY_RESPONSE`; otherwise
/// `stop`; `length` ⇒ `max-tokens`; anything else (`content_filter`,
/// `insufficient_system_resource`, …) ⇒ `error` with the uppercased value as code. Failures
/// (stream `error` object, malformed JSON, EOF without a terminal signal, timeouts, transport)
/// emit no `block-end`s — partial blocks stay open, so consumers see them only as interrupted —
/// but still emit the usage seen so far before the `finish`.
///
/// Two dsh additions (docs/upstream/deepseek.md, Estimated usage; Tool-call ids): after
/// [`StreamTranslator::set_prompt_bytes`], a completed response without a wire `usage` gets an
/// estimated one; and a call's id is never one of [`StreamTranslator::reserve_call_ids`].
#[derive(Debug, Default)]
pub struct StreamTranslator {
    slots: Vec<Slot>,
    text_slot: Option<usize>,
    reasoning_slot: Option<usize>,
    response_id: Option<String>,
    usage: Option<WireUsage>,
    finish_reason: Option<String>,
    ended: bool,
    after_done: usize,
    /// Request body size (bytes) when usage estimation is on.
    prompt_bytes: Option<usize>,
    /// Call ids already used in the session's history.
    taken: std::collections::HashSet<String>,
}

/// A token estimate for `bytes` bytes of text: `ceil(bytes / 4)`.
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// A fresh synthesized call id: `call_dsh_` and a v4 UUID's 32 hex digits (unique in any
/// session, whatever the provider repeats).
fn fresh_call_id() -> String {
    format!("call_dsh_{}", uuid::Uuid::new_v4().simple())
}

impl StreamTranslator {
    /// A fresh translator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns usage estimation on: when the response completes without a wire `usage`, a `usage`
    /// chunk is emitted with `estimated: true`, input tokens [`estimate_tokens`] of
    /// `prompt_bytes` (the request body) and output tokens [`estimate_tokens`] of the answer's
    /// text, reasoning, tool names and arguments.
    pub fn set_prompt_bytes(&mut self, prompt_bytes: usize) {
        self.prompt_bytes = Some(prompt_bytes);
    }

    /// Call ids of the history the request carried: a wire id equal to one of them (a gateway
    /// that restarts its numbering every response) is replaced by a fresh synthesized id.
    pub fn reserve_call_ids(&mut self, ids: impl IntoIterator<Item = String>) {
        self.taken.extend(ids);
    }

    /// Whether a terminal chunk has been produced.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Payloads received after the end (counted, ignored).
    pub fn frames_after_end(&self) -> usize {
        self.after_done
    }

    /// The last non-null wire usage seen.
    pub fn wire_usage(&self) -> Option<&WireUsage> {
        self.usage.as_ref()
    }

    /// Handles one SSE `data` payload (`[DONE]` or a JSON chunk).
    ///
    /// Malformed JSON ⇒ a terminal `finish{error}` with code `TRANSPORT` (the body is not a
    /// valid stream); an `error` object ⇒ terminal `finish{error}` with code `SERVER` and the
    /// provider's message.
    pub fn push_data(&mut self, data: &str, out: &mut Vec<StreamChunk>) -> Progress {
        if self.ended {
            self.after_done += 1;
            return Progress::Ended;
        }
        let data = data.trim_matches(|c: char| c == ' ' || c == '\r' || c == '\n');
        if data.is_empty() {
            return Progress::More;
        }
        if data == "[DONE]" {
            self.finish_done(out);
            return Progress::Ended;
        }
        let chunk: WireChunk<'_> = match serde_json::from_str(data) {
            Ok(c) => c,
            Err(e) => {
                self.fail(
                    out,
                    LlmFailure::new(
                        codes::TRANSPORT,
                        format!("malformed stream chunk from the provider: {e}"),
                    ),
                );
                return Progress::Ended;
            }
        };
        if let Some(err) = chunk.error.filter(|e| !e.is_null()) {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| err.to_string());
            self.fail(out, in_band_failure(&err, &message));
            return Progress::Ended;
        }
        if self.response_id.is_none()
            && let Some(id) = chunk.id.filter(|s| !s.is_empty())
        {
            self.response_id = Some(id.into_owned());
        }
        if let Some(u) = chunk.usage {
            self.usage = Some(u);
        }
        for choice in chunk.choices.into_iter().flatten() {
            if choice.index != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                if let Some(r) = delta.reasoning_content.or(delta.reasoning) {
                    self.reasoning(&r, out);
                }
                if let Some(t) = delta.content {
                    self.text(&t, out);
                }
                for tc in delta.tool_calls.into_iter().flatten() {
                    self.tool_call(tc, out);
                }
            }
            if let Some(f) = choice.finish_reason.filter(|f| !f.is_empty()) {
                self.finish_reason = Some(f.into_owned());
            }
        }
        Progress::More
    }

    /// Handles a complete non-streaming `chat.completion` body (a server that ignored
    /// `stream:true`; leading blank lines are fine): each `choices[].message` is treated as
    /// one delta whose `tool_calls` entries are keyed by their position (each entry is one call,
    /// whatever `index` or `id` it carries; a repeated id is made unique),
    /// then the stream ends as after `[DONE]`. A body that is not a JSON object ⇒ terminal
    /// `finish{error}` `TRANSPORT`; an `error` object ⇒ as in [`StreamTranslator::push_data`].
    pub fn push_completion(&mut self, body: &str, out: &mut Vec<StreamChunk>) {
        let mut v: Value = match serde_json::from_str(body.trim_start()) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) | Err(_) => {
                let failure = LlmFailure::new(
                    codes::TRANSPORT,
                    "the provider's non-streaming body is not a JSON object",
                );
                self.finish_with(failure, false, out);
                return;
            }
        };
        if let Some(choices) = v.get_mut("choices").and_then(Value::as_array_mut) {
            for c in choices.iter_mut() {
                if let Some(obj) = c.as_object_mut()
                    && let Some(mut m) = obj.remove("message")
                {
                    // each entry is one whole call: key it by its position
                    if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                        for (k, call) in calls.iter_mut().enumerate() {
                            if let Some(call) = call.as_object_mut() {
                                call.insert("index".into(), Value::from(k));
                            }
                        }
                    }
                    obj.insert("delta".into(), m);
                }
            }
        }
        if self.push_data(&v.to_string(), out) == Progress::More {
            self.finish_done(out);
        }
    }

    fn reasoning(&mut self, text: &str, out: &mut Vec<StreamChunk>) {
        if text.is_empty() {
            return;
        }
        let index = match self.reasoning_slot {
            Some(i) => i,
            None => {
                let i = self.open(Slot::Reasoning(String::new()), "reasoning", out);
                self.reasoning_slot = Some(i);
                i
            }
        };
        if let Some(Slot::Reasoning(s)) = self.slots.get_mut(index) {
            s.push_str(text);
        }
        out.push(StreamChunk::ReasoningDelta {
            index: index as u32,
            text: text.to_owned(),
        });
    }

    fn text(&mut self, text: &str, out: &mut Vec<StreamChunk>) {
        if text.is_empty() {
            return;
        }
        let index = match self.text_slot {
            Some(i) => i,
            None => {
                let i = self.open(Slot::Text(String::new()), "text", out);
                self.text_slot = Some(i);
                i
            }
        };
        if let Some(Slot::Text(s)) = self.slots.get_mut(index) {
            s.push_str(text);
        }
        out.push(StreamChunk::TextDelta {
            index: index as u32,
            text: text.to_owned(),
        });
    }

    fn open(&mut self, slot: Slot, kind: &str, out: &mut Vec<StreamChunk>) -> usize {
        let i = self.slots.len();
        self.slots.push(slot);
        out.push(StreamChunk::BlockStart {
            index: i as u32,
            block_type: kind.to_owned(),
        });
        i
    }

    /// Routes a tool-call fragment (docs/upstream/deepseek.md, Tool-call ids). With a wire
    /// `index` (OpenAI's streaming contract keys calls by it): the latest call on that index when
    /// the fragment has no id, the same wire id, or the call has only a synthesized id (which
    /// then adopts the wire id); otherwise a new call — so two calls that share an id but not an
    /// index stay two calls. Without an `index`: a non-empty id seen before ⇒ that call; else as
    /// with index 0. Empty `id`/`name` strings count as absent (BC-02). A new call whose wire id
    /// the history or an earlier call of this response already uses gets a fresh synthesized id
    /// (the wire id is kept for routing).
    fn tool_call(&mut self, tc: WireToolCall<'_>, out: &mut Vec<StreamChunk>) {
        let keyed_by_index = tc.index.is_some();
        let wire_index = tc.index.unwrap_or(0);
        let id = tc.id.filter(|s| !s.is_empty());
        let (name, args) = match tc.function {
            Some(f) => (f.name.filter(|s| !s.is_empty()), f.arguments),
            None => (None, None),
        };
        let latest_on_index = self
            .slots
            .iter()
            .rposition(|s| matches!(s, Slot::Call { wire_index: w, .. } if *w == wire_index));
        let target = match &id {
            Some(id) => {
                let by_id = self.slots.iter().position(|s| {
                    matches!(s, Slot::Call { wire_id: Some(w), wire_index: w_index, .. }
                        if w.as_str() == id.as_ref() && (!keyed_by_index || *w_index == wire_index))
                });
                match by_id {
                    Some(i) => Some(i),
                    None => match latest_on_index {
                        Some(i)
                            if matches!(
                                self.slots[i],
                                Slot::Call {
                                    synthesized: true,
                                    ..
                                }
                            ) =>
                        {
                            let usable = !self.id_in_use(id);
                            if let Slot::Call {
                                id: sid,
                                wire_id,
                                synthesized,
                                ..
                            } = &mut self.slots[i]
                            {
                                *wire_id = Some(id.to_string());
                                if usable {
                                    *sid = id.to_string();
                                    *synthesized = false;
                                }
                            }
                            Some(i)
                        }
                        _ => None,
                    },
                }
            }
            None => latest_on_index,
        };
        let (index, is_new) = match target {
            Some(i) => (i, false),
            None => {
                let (sid, synthesized) = match &id {
                    Some(id) if !self.id_in_use(id) => (id.to_string(), false),
                    Some(_) => (fresh_call_id(), false),
                    None => (fresh_call_id(), true),
                };
                let i = self.open(
                    Slot::Call {
                        id: sid,
                        wire_id: id.as_ref().map(|w| w.to_string()),
                        synthesized,
                        wire_index,
                        name: String::new(),
                        args: String::new(),
                    },
                    "tool-call",
                    out,
                );
                (i, true)
            }
        };
        if let Some(Slot::Call {
            id: sid,
            name: sname,
            args: sargs,
            ..
        }) = self.slots.get_mut(index)
        {
            let new_name = match name {
                Some(n) if sname.is_empty() => {
                    *sname = n.into_owned();
                    Some(sname.clone())
                }
                _ => None,
            };
            let delta = args.map(Cow::into_owned).unwrap_or_default();
            if !is_new && new_name.is_none() && delta.is_empty() {
                return;
            }
            sargs.push_str(&delta);
            out.push(StreamChunk::ToolCallDelta {
                index: index as u32,
                id: CallId::new(sid.clone()),
                name: new_name,
                arguments_delta: delta,
            });
        }
    }

    /// Whether `id` is a call id of the history or of a call already in this response.
    fn id_in_use(&self, id: &str) -> bool {
        self.taken.contains(id)
            || self
                .slots
                .iter()
                .any(|s| matches!(s, Slot::Call { id: sid, .. } if sid == id))
    }

    fn fail(&mut self, out: &mut Vec<StreamChunk>, failure: LlmFailure) {
        self.ended = true;
        if let Some(u) = &self.usage {
            out.push(StreamChunk::Usage {
                usage: u.to_usage(),
            });
        }
        out.push(StreamChunk::Finish {
            reason: FinishReason::Error { failure },
            replay_state: None,
        });
    }

    fn finish_done(&mut self, out: &mut Vec<StreamChunk>) {
        let reason = self
            .finish_reason
            .clone()
            .unwrap_or_else(|| "stop".to_owned());
        self.complete(&reason, out);
    }

    /// The body ended (EOF) without `[DONE]`: a finish reason seen ⇒ a normal end; otherwise a
    /// terminal `finish{error}` with code `TRANSPORT` ("incomplete stream"). No-op once ended.
    pub fn finish_eof(&mut self, out: &mut Vec<StreamChunk>) {
        if self.ended {
            return;
        }
        match self.finish_reason.clone() {
            Some(r) => self.complete(&r, out),
            None => self.fail(
                out,
                LlmFailure::new(
                    codes::TRANSPORT,
                    "the provider's stream ended before completion (no finish reason, no [DONE])",
                ),
            ),
        }
    }

    /// Ends with an externally decided failure (timeout, transport) — or, for
    /// `aborted = true`, a `finish{aborted}`. No-op once ended.
    pub fn finish_with(&mut self, failure: LlmFailure, aborted: bool, out: &mut Vec<StreamChunk>) {
        if self.ended {
            return;
        }
        if aborted {
            self.ended = true;
            out.push(StreamChunk::Finish {
                reason: FinishReason::Aborted { failure },
                replay_state: None,
            });
        } else {
            self.fail(out, failure);
        }
    }

    fn complete(&mut self, wire_reason: &str, out: &mut Vec<StreamChunk>) {
        self.ended = true;
        let mut has_text = false;
        let mut has_call = false;
        let mut answer_bytes = 0;
        for (i, slot) in self.slots.drain(..).enumerate() {
            let block = match slot {
                Slot::Text(t) => {
                    has_text |= !t.trim().is_empty();
                    answer_bytes += t.len();
                    ContentBlock::Text { text: t }
                }
                Slot::Reasoning(t) => {
                    answer_bytes += t.len();
                    ContentBlock::Reasoning { text: t }
                }
                Slot::Call { id, name, args, .. } => {
                    has_call = true;
                    answer_bytes += name.len() + args.len();
                    ContentBlock::ToolCall {
                        id: CallId::new(id),
                        name,
                        arguments: args,
                    }
                }
            };
            out.push(StreamChunk::BlockEnd {
                index: i as u32,
                block,
            });
        }
        if let Some(u) = &self.usage {
            out.push(StreamChunk::Usage {
                usage: u.to_usage(),
            });
        } else if let Some(prompt) = self.prompt_bytes {
            out.push(StreamChunk::Usage {
                usage: TokenUsage {
                    input_tokens: estimate_tokens(prompt),
                    output_tokens: estimate_tokens(answer_bytes),
                    estimated: true,
                    ..TokenUsage::default()
                },
            });
        }
        let reason = match wire_reason {
            "stop" | "tool_calls" | "function_call" if has_call => FinishReason::ToolCalls,
            "stop" | "tool_calls" | "function_call" if !has_text => FinishReason::Error {
                failure: LlmFailure::new(
                    codes::EMPTY_RESPONSE,
                    "the model finished without an answer (no text and no tool calls)",
                ),
            },
            "stop" | "tool_calls" | "function_call" => FinishReason::Stop,
            "length" => FinishReason::MaxTokens,
            other => FinishReason::Error {
                failure: LlmFailure::new(
                    other.to_ascii_uppercase(),
                    format!("the provider ended the response with finish_reason {other:?}"),
                ),
            },
        };
        out.push(StreamChunk::Finish {
            reason,
            replay_state: None,
        });
    }
}

/// Classifies an `error` object inside a 200 stream: rate-limit wording in its
/// `code`/`type`/`message` ⇒ `RATE_LIMIT` (with a "try again in N s" hint as
/// `providerRetryAfterMs`), anything else ⇒ `SERVER` (BC-09; llama.cpp fixture 28).
fn in_band_failure(err: &Value, message: &str) -> LlmFailure {
    let field = |k: &str| match err.get(k) {
        Some(Value::String(s)) => s.to_ascii_lowercase(),
        Some(v) => v.to_string(),
        None => String::new(),
    };
    let all = format!(
        "{} {} {}",
        field("code"),
        field("type"),
        message.to_ascii_lowercase()
    );
    let rate = all.contains("rate_limit") || all.contains("rate limit");
    let code = if rate {
        codes::RATE_LIMIT
    } else {
        codes::SERVER
    };
    let mut f = LlmFailure::new(code, format!("provider error inside the stream: {message}"));
    if rate {
        f.provider_retry_after_ms = try_again_hint_ms(&all);
    }
    f
}

/// Parses "try again in N s|seconds|ms" (N integer or decimal) into milliseconds (> 0; a number
/// too large ⇒ [`crate::SATURATED_WAIT_MS`]).
pub fn try_again_hint_ms(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let pos = lower.find("try again in ")? + "try again in ".len();
    let rest = &lower[pos..];
    let num_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let n: f64 = rest[..num_len].parse().ok()?;
    let unit = rest[num_len..].trim_start();
    let ms = if unit.starts_with("ms") || unit.starts_with("milli") {
        n
    } else {
        n * 1000.0
    };
    (ms > 0.0).then(|| dsh_llm_http::saturating_ms(ms))
}

/// Translates a complete SSE body held in memory (no HTTP): decodes it with
/// `sse_stream::SseByteStream` (comments, blank lines, BOM, CR / CRLF handled there), feeds every
/// `data` payload to a [`StreamTranslator`], and treats the end of `body` as EOF. The input is
/// fed in slices of `read_size` bytes (≥ 1) to mimic network reads.
pub fn translate_sse_bytes(body: &[u8], read_size: usize) -> Vec<StreamChunk> {
    use futures::StreamExt;
    let reads: Vec<Result<&[u8], std::convert::Infallible>> =
        body.chunks(read_size.max(1)).map(Ok).collect();
    let mut sse = sse_stream::SseByteStream::new(futures::stream::iter(reads));
    let mut tr = StreamTranslator::new();
    let mut out = Vec::new();
    futures::executor::block_on(async {
        while let Some(ev) = sse.next().await {
            match ev {
                Ok(ev) => {
                    if let Some(data) = ev.data.as_deref() {
                        tr.push_data(data, &mut out);
                    }
                }
                Err(e) => {
                    tr.finish_with(
                        LlmFailure::new(codes::TRANSPORT, format!("SSE decoding failed: {e}")),
                        false,
                        &mut out,
                    );
                }
            }
        }
    });
    tr.finish_eof(&mut out);
    out
}
