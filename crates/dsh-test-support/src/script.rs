//! The replay script: parsing, validation and DeepSeek-style stream synthesis.
//!
//! Format: see the crate docs. Stream shapes: docs/upstream/deepseek.md (Stream translation).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::TestSupportError;

/// One scripted response (see the crate docs for the three shapes). All fields are optional;
/// the shape is decided by which are set: `body` ⇒ plain JSON response, `sse` ⇒ raw SSE,
/// otherwise a synthesized stream from `text` / `reasoning` / `tool_calls` / `finish`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptResponse {
    /// Raw SSE body served byte-exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse: Option<String>,
    /// Answer text (synthesized stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Reasoning text (synthesized stream, `reasoning_content`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Tool calls `[name, arguments]`; arguments as raw JSON text or as a JSON value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<(String, Value)>>,
    /// Wire `finish_reason` (synthesized stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<String>,
    /// Usage object replacing the synthesized one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    /// HTTP status (default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// JSON body of a plain response (a string is sent verbatim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// Extra response headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Delay before each frame (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Abort the connection after this many frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disconnect_after: Option<usize>,
}

impl ScriptResponse {
    /// A raw SSE response.
    pub fn sse(body: impl Into<String>) -> Self {
        Self {
            sse: Some(body.into()),
            ..Self::default()
        }
    }

    /// A synthesized text answer (finish `stop`).
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A synthesized answer with reasoning, optional text and tool calls `(name, raw args)`.
    pub fn thinking(reasoning: &str, text: Option<&str>, tool_calls: &[(&str, &str)]) -> Self {
        Self {
            reasoning: Some(reasoning.to_owned()),
            text: text.map(str::to_owned),
            tool_calls: (!tool_calls.is_empty()).then(|| {
                tool_calls
                    .iter()
                    .map(|(n, a)| ((*n).to_owned(), Value::String((*a).to_owned())))
                    .collect()
            }),
            ..Self::default()
        }
    }

    /// A plain HTTP response with a JSON body.
    pub fn status(status: u16, body: Value) -> Self {
        Self {
            status: Some(status),
            body: Some(body),
            ..Self::default()
        }
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .get_or_insert_with(BTreeMap::new)
            .insert(name.to_owned(), value.to_owned());
        self
    }

    /// Sets the per-frame delay (ms).
    pub fn with_delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = Some(ms);
        self
    }

    /// Aborts the connection after `frames` frames.
    pub fn with_disconnect_after(mut self, frames: usize) -> Self {
        self.disconnect_after = Some(frames);
        self
    }

    fn validate(&self, i: usize) -> Result<(), TestSupportError> {
        let synth = self.text.is_some()
            || self.reasoning.is_some()
            || self.tool_calls.is_some()
            || self.finish.is_some()
            || self.usage.is_some();
        let shapes =
            usize::from(self.sse.is_some()) + usize::from(self.body.is_some()) + usize::from(synth);
        if shapes > 1 {
            return Err(TestSupportError::InvalidScript(format!(
                "response {i} mixes `sse`, `body` and synthesized fields"
            )));
        }
        if shapes == 0 && self.status.is_none() {
            return Err(TestSupportError::InvalidScript(format!(
                "response {i} has none of `sse`, `body`, `status`, `text`, `reasoning`, `tool_calls`"
            )));
        }
        if let Some(s) = self.status
            && !(100..=599).contains(&s)
        {
            return Err(TestSupportError::InvalidScript(format!(
                "response {i}: status {s} is outside 100..=599"
            )));
        }
        Ok(())
    }

    /// The response frames when it is a stream (raw or synthesized), `None` for a JSON body.
    /// `number` is the response's position (used in synthesized ids).
    pub fn frames(&self, number: usize) -> Option<Vec<String>> {
        if self.body.is_some() {
            return None;
        }
        if self.sse.is_none() && self.status.is_some_and(|s| s != 200) && !self.is_synth() {
            return None;
        }
        let raw = match &self.sse {
            Some(raw) => raw.clone(),
            None => synthesize_sse(self, number),
        };
        Some(split_frames(&raw))
    }

    /// As [`ScriptResponse::frames`], for a request in the Anthropic Messages format: a
    /// synthesized response becomes [`synthesize_anthropic_sse`]; raw SSE and JSON bodies are
    /// served as they are.
    pub fn anthropic_frames(&self, number: usize) -> Option<Vec<String>> {
        if self.sse.is_some() || !self.is_synth() {
            return self.frames(number);
        }
        Some(split_frames(&synthesize_anthropic_sse(self, number)))
    }

    fn is_synth(&self) -> bool {
        self.text.is_some()
            || self.reasoning.is_some()
            || self.tool_calls.is_some()
            || self.finish.is_some()
            || self.usage.is_some()
    }
}

/// A parsed replay script.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Script {
    /// The responses, in serving order.
    pub responses: Vec<ScriptResponse>,
    /// Model ids for `GET /models`.
    pub models: Vec<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScriptFile {
    List(Vec<Value>),
    Object {
        responses: Vec<Value>,
        #[serde(default)]
        models: Option<Vec<String>>,
    },
}

impl Script {
    /// A script over `responses` with the default model list.
    pub fn new(responses: Vec<ScriptResponse>) -> Self {
        Self {
            responses,
            models: default_models(),
        }
    }

    /// Parses the JSON script format.
    ///
    /// # Errors
    /// [`TestSupportError::InvalidScript`] when the text is not JSON, not a list / object of the
    /// documented shape, or a response mixes shapes or has an unknown field.
    pub fn from_json(text: &str) -> Result<Self, TestSupportError> {
        let file: ScriptFile = serde_json::from_str(text)
            .map_err(|e| TestSupportError::InvalidScript(e.to_string()))?;
        let (raw, models) = match file {
            ScriptFile::List(r) => (r, None),
            ScriptFile::Object { responses, models } => (responses, models),
        };
        let mut responses = Vec::with_capacity(raw.len());
        for (i, v) in raw.into_iter().enumerate() {
            let r: ScriptResponse = serde_json::from_value(v)
                .map_err(|e| TestSupportError::InvalidScript(format!("response {i}: {e}")))?;
            r.validate(i)?;
            responses.push(r);
        }
        Ok(Self {
            responses,
            models: models.unwrap_or_else(default_models),
        })
    }

    /// Checks every response's shape.
    ///
    /// # Errors
    /// [`TestSupportError::InvalidScript`] naming the first bad response.
    pub fn validate(&self) -> Result<(), TestSupportError> {
        for (i, r) in self.responses.iter().enumerate() {
            r.validate(i)?;
        }
        Ok(())
    }
}

fn default_models() -> Vec<String> {
    vec!["deepseek-v4-flash".to_owned(), "deepseek-v4-pro".to_owned()]
}

/// Cuts a raw body after every `"\n\n"`; the concatenation of the frames is `raw`.
fn split_frames(raw: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = raw;
    while let Some(pos) = rest.find("\n\n") {
        out.push(rest[..pos + 2].to_owned());
        rest = &rest[pos + 2..];
    }
    if !rest.is_empty() {
        out.push(rest.to_owned());
    }
    out
}

fn pieces(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(8).map(|c| c.iter().collect()).collect()
}

/// Synthesizes a DeepSeek-style SSE body for a scripted `text`/`reasoning`/`tool_calls`
/// response (`number` = response position, used in ids). Shape: see the crate docs.
pub fn synthesize_sse(r: &ScriptResponse, number: usize) -> String {
    let id = format!("replay-{number}");
    let frame = |delta: Value, finish: Value, usage: Value| {
        let chunk = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": 1_767_225_600,
            "model": "replay",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            "usage": usage,
        });
        format!("data: {chunk}\n\n")
    };
    let mut out = String::new();
    let mut emitted = 0usize;
    if r.reasoning.is_some() {
        out.push_str(&frame(
            json!({"role":"assistant","content":null,"reasoning_content":""}),
            Value::Null,
            Value::Null,
        ));
    } else {
        out.push_str(&frame(
            json!({"role":"assistant","content":""}),
            Value::Null,
            Value::Null,
        ));
    }
    if let Some(reasoning) = &r.reasoning {
        for p in pieces(reasoning) {
            emitted += p.chars().count();
            out.push_str(&frame(
                json!({"content":null,"reasoning_content":p}),
                Value::Null,
                Value::Null,
            ));
        }
    }
    if let Some(text) = &r.text {
        for p in pieces(text) {
            emitted += p.chars().count();
            out.push_str(&frame(
                json!({"content":p,"reasoning_content":null}),
                Value::Null,
                Value::Null,
            ));
        }
    }
    let calls = r.tool_calls.clone().unwrap_or_default();
    for (i, (name, args)) in calls.iter().enumerate() {
        let args = match args {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&frame(
            json!({"tool_calls":[{"index":i,"id":format!("call_{i:02}_replay{number}"),"type":"function","function":{"name":name,"arguments":""}}]}),
            Value::Null,
            Value::Null,
        ));
        for p in pieces(&args) {
            emitted += p.chars().count();
            out.push_str(&frame(
                json!({"tool_calls":[{"index":i,"function":{"arguments":p}}]}),
                Value::Null,
                Value::Null,
            ));
        }
    }
    let finish = r.finish.clone().unwrap_or_else(|| {
        if calls.is_empty() {
            "stop".to_owned()
        } else {
            "tool_calls".to_owned()
        }
    });
    let completion = (emitted / 4).max(1);
    let usage = r.usage.clone().unwrap_or_else(|| {
        json!({
            "prompt_tokens": 100,
            "completion_tokens": completion,
            "total_tokens": 100 + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
            "prompt_cache_hit_tokens": 0,
            "prompt_cache_miss_tokens": 100,
        })
    });
    out.push_str(&frame(json!({"content":""}), json!(finish), usage));
    out.push_str("data: [DONE]\n\n");
    out
}

/// Synthesizes an Anthropic Messages SSE body for a scripted `text`/`reasoning`/`tool_calls`
/// response (`number` = response position). Shape: `message_start` (id `msg_replay<R>`, usage
/// `input_tokens` 100), a `thinking` block (the reasoning in `thinking_delta` pieces of at most 8
/// characters, then one `signature_delta` `sig-replay<R>-<len>` where len is the reasoning's
/// character count), a `text` block, each tool call as a `tool_use` block (id
/// `toolu_<NN>_replay<R>`, `input_json_delta` pieces; arguments given as a JSON value are
/// serialized compactly), a `ping` after `message_start`, `message_delta` with `stop_reason`
/// (`finish`, default `tool_use` with tool calls, else `end_turn`) and usage (`output_tokens` =
/// emitted characters / 4, at least 1; a scripted `usage` object replaces it and is also sent on
/// `message_start`), then `message_stop`.
pub fn synthesize_anthropic_sse(r: &ScriptResponse, number: usize) -> String {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut out = String::new();
    let start_usage = r.usage.clone().unwrap_or_else(|| {
        json!({"input_tokens": 100, "cache_creation_input_tokens": 0,
               "cache_read_input_tokens": 0, "output_tokens": 0})
    });
    out.push_str(&ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": format!("msg_replay{number}"),
            "type": "message", "role": "assistant", "model": "replay", "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
    ));
    out.push_str(&ev("ping", json!({"type": "ping"})));
    let mut index = 0usize;
    let mut emitted = 0usize;
    if let Some(reasoning) = &r.reasoning {
        out.push_str(&ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "thinking", "thinking": ""}}),
        ));
        for p in pieces(reasoning) {
            emitted += p.chars().count();
            out.push_str(&ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "thinking_delta", "thinking": p}}),
            ));
        }
        let sig = format!("sig-replay{number}-{}", reasoning.chars().count());
        out.push_str(&ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "signature_delta", "signature": sig}}),
        ));
        out.push_str(&ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if let Some(text) = &r.text {
        out.push_str(&ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "text", "text": ""}}),
        ));
        for p in pieces(text) {
            emitted += p.chars().count();
            out.push_str(&ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "text_delta", "text": p}}),
            ));
        }
        out.push_str(&ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let calls = r.tool_calls.clone().unwrap_or_default();
    for (i, (name, args)) in calls.iter().enumerate() {
        let args = match args {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": format!("toolu_{i:02}_replay{number}"),
                                     "name": name, "input": {}}}),
        ));
        for p in pieces(&args) {
            emitted += p.chars().count();
            out.push_str(&ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": p}}),
            ));
        }
        out.push_str(&ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let stop = r.finish.clone().unwrap_or_else(|| {
        if calls.is_empty() {
            "end_turn".to_owned()
        } else {
            "tool_use".to_owned()
        }
    });
    let usage = r
        .usage
        .clone()
        .unwrap_or_else(|| json!({"output_tokens": (emitted / 4).max(1)}));
    out.push_str(&ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": usage}),
    ));
    out.push_str(&ev("message_stop", json!({"type": "message_stop"})));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_kernel::ErrorCode;

    #[test]
    fn frames_concatenate_to_the_raw_body() {
        let raw = ": keep-alive\n\ndata: {}\n\ndata: [DONE]\n\ntail";
        let frames = split_frames(raw);
        assert_eq!(frames.len(), 4);
        assert_eq!(frames.concat(), raw);
    }

    #[test]
    fn parses_all_three_shapes_and_rejects_mixed() {
        let s = Script::from_json(
            r#"[{"sse":"data: [DONE]\n\n"},{"text":"hi","delay_ms":5},
                {"status":429,"body":{"error":{"message":"x"}},"headers":{"retry-after":"2"}}]"#,
        )
        .unwrap();
        assert_eq!(s.responses.len(), 3);
        assert_eq!(s.models, default_models());
        let e = Script::from_json(r#"[{"sse":"x","text":"y"}]"#).unwrap_err();
        assert_eq!(e.code(), "INVALID_SCRIPT");
        let e = Script::from_json(r#"[{"bogus":1}]"#).unwrap_err();
        assert_eq!(e.code(), "INVALID_SCRIPT");
        let s = Script::from_json(r#"{"responses":[{"text":"a"}],"models":["m1"]}"#).unwrap();
        assert_eq!(s.models, vec!["m1".to_owned()]);
    }

    #[test]
    fn synthesized_stream_has_usage_on_the_finish_chunk_then_done() {
        let r = ScriptResponse::thinking("think", Some("answer"), &[("bash", "{\"c\":1}")]);
        let body = synthesize_sse(&r, 3);
        assert!(body.ends_with("data: [DONE]\n\n"));
        assert!(body.contains("\"id\":\"call_00_replay3\""));
        assert!(body.contains("\"finish_reason\":\"tool_calls\""));
    }

    #[test]
    fn anthropic_synthesis_carries_a_signature_and_tool_use_blocks() {
        let r = ScriptResponse::thinking("think", Some("answer"), &[("bash", "{\"c\":1}")]);
        let body = synthesize_anthropic_sse(&r, 2);
        assert!(body.starts_with("event: message_start\n"));
        assert!(body.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
        assert!(body.contains("\"signature\":\"sig-replay2-5\""));
        assert!(body.contains("\"id\":\"toolu_00_replay2\""));
        assert!(body.contains("\"stop_reason\":\"tool_use\""));
        assert_eq!(r.anthropic_frames(2).unwrap().concat(), body);
    }
}
