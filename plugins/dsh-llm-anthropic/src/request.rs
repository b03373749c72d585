//! Request mapping: [`GenerateOptions`] → the JSON body of `POST {base_url}/v1/messages`.
//!
//! See docs/upstream/anthropic.md (Request mapping; Replay state; Thinking; Prompt caching).

use std::collections::BTreeSet;

use dsh_llm::{ContentBlock, GenerateOptions, LlmFailure, Message, MessageSource, Role, codes};
use serde_json::{Map, Value, json};

use crate::config::AnthropicRoute;

/// `replayState.response.kind` of the messages this adapter produced.
pub const REPLAY_KIND: &str = "dsh-anthropic";
/// `replayState.response.version`.
pub const REPLAY_VERSION: u64 = 1;
/// The text a redacted thinking block shows in the session (its data is in the replay state).
pub const REDACTED_TEXT: &str = "[Reasoning redacted]";
/// `max_tokens` when neither the call nor the catalog gives one (tokens).
pub const DEFAULT_MAX_TOKENS: u64 = 32_768;
/// Tokens kept free beside the prompt estimate when `max_tokens` is clamped to the window.
pub const CLAMP_MARGIN_TOKENS: u64 = 4096;
/// The `anthropic-beta` value sent when thinking is enabled (thinking between tool calls).
pub const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";

/// The thinking budget (tokens) of a reasoning effort: `minimal` 1024, `low` 2048, `medium`
/// 8192, `high` / `xhigh` / `max` 16384; `off` (and anything unknown) ⇒ thinking disabled.
pub fn thinking_budget(effort: &str) -> Option<u64> {
    match effort {
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" | "xhigh" | "max" => Some(16_384),
        _ => None,
    }
}

/// A tool call id as Anthropic accepts it: `[A-Za-z0-9_-]`, at most 64 characters; other
/// characters become `_`. Ids already valid are unchanged, so a result still finds its call.
pub fn tool_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// The per-block replay entries of `message` when they may be trusted for `opts`: produced by
/// this adapter (`kind` [`REPLAY_KIND`], version [`REPLAY_VERSION`]) on the same route and
/// model, with one entry per content block. `None` = foreign history.
fn trusted_blocks<'a>(message: &'a Message, opts: &GenerateOptions) -> Option<&'a Vec<Value>> {
    let MessageSource::Model {
        provider,
        model,
        replay_state: Some(state),
    } = &message.source
    else {
        return None;
    };
    let response = state.get("response")?;
    let same = response.get("kind").and_then(Value::as_str) == Some(REPLAY_KIND)
        && response.get("version").and_then(Value::as_u64) == Some(REPLAY_VERSION)
        && provider == &opts.provider
        && model == &opts.model;
    let blocks = state.get("blocks")?.as_array()?;
    (same && blocks.len() == message.content.len()).then_some(blocks)
}

/// The text of a tool result's content: text blocks joined with `\n`; none ⇒ `(no output)`.
fn result_text(content: &[ContentBlock]) -> String {
    let text: Vec<&str> = content.iter().filter_map(ContentBlock::as_text).collect();
    let joined = text.join("\n");
    if joined.is_empty() {
        "(no output)".to_owned()
    } else {
        joined
    }
}

/// The assistant blocks of `message` on the wire: text (whitespace-only skipped); reasoning
/// with its signature ⇒ `thinking` (verbatim), redacted ⇒ `redacted_thinking {data}`, reasoning
/// without a trusted signature ⇒ `text`; tool calls ⇒ `tool_use` with the parsed arguments
/// (not an object ⇒ `{}`). Also returns the call ids.
fn assistant_blocks(message: &Message, opts: &GenerateOptions) -> (Vec<Value>, Vec<String>) {
    let replay = trusted_blocks(message, opts);
    let mut out = Vec::new();
    let mut calls = Vec::new();
    for (i, block) in message.content.iter().enumerate() {
        let state = replay.and_then(|b| b.get(i));
        match block {
            ContentBlock::Text { text } if !text.trim().is_empty() => {
                out.push(json!({"type": "text", "text": text}));
            }
            ContentBlock::Reasoning { text } => {
                let redacted = state
                    .filter(|s| s.get("redacted").and_then(Value::as_bool) == Some(true))
                    .and_then(|s| s.get("data"))
                    .and_then(Value::as_str);
                // an empty signature is no signature (a block cut by `max_tokens` or one
                // that never got its `signature_delta`): the provider rejects it
                let signature = state
                    .and_then(|s| s.get("signature"))
                    .and_then(Value::as_str)
                    .filter(|sig| !sig.is_empty());
                if let Some(data) = redacted {
                    out.push(json!({"type": "redacted_thinking", "data": data}));
                } else if let Some(sig) = signature {
                    out.push(json!({"type": "thinking", "thinking": text, "signature": sig}));
                } else if !text.trim().is_empty() {
                    // foreign reasoning (another format or route), or our own without a
                    // signature: plain text, as after a cancelled stream
                    out.push(json!({"type": "text", "text": text}));
                }
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => {
                let input = match serde_json::from_str::<Value>(arguments) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => json!({}),
                };
                let id = tool_id(id.as_str());
                calls.push(id.clone());
                out.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
            }
            _ => {}
        }
    }
    (out, calls)
}

/// One wire message being built.
struct Turn {
    role: &'static str,
    /// `tool_result` blocks (first in a user message).
    results: Vec<Value>,
    content: Vec<Value>,
}

/// The `messages` array: consecutive user-role messages (user text, tool results, plugin
/// context, in-history system messages) merge into one user message whose `tool_result` blocks
/// come first; a call without a result gets a synthetic `tool_result` "No result provided"
/// (`is_error: true`); a result whose call is not in the previous assistant message becomes
/// text; empty messages are dropped.
///
/// # Errors
/// `UNSUPPORTED_CONTENT` for an image (the attachment store is not reachable from here).
pub fn wire_messages(opts: &GenerateOptions) -> Result<Vec<Value>, LlmFailure> {
    let mut turns: Vec<Turn> = Vec::new();
    // ids of the calls of the last assistant message still waiting for a result
    let mut open_calls: Vec<String> = Vec::new();
    let mut answered: BTreeSet<String> = BTreeSet::new();
    let close_calls =
        |turns: &mut Vec<Turn>, open: &mut Vec<String>, answered: &BTreeSet<String>| {
            let missing: Vec<Value> = open
                .iter()
                .filter(|id| !answered.contains(*id))
                .map(|id| {
                    json!({"type": "tool_result", "tool_use_id": id,
                       "content": "No result provided", "is_error": true})
                })
                .collect();
            open.clear();
            if missing.is_empty() {
                return;
            }
            match turns.last_mut() {
                Some(t) if t.role == "user" => t.results.extend(missing),
                _ => turns.push(Turn {
                    role: "user",
                    results: missing,
                    content: Vec::new(),
                }),
            }
        };
    for message in &opts.messages {
        match message.role {
            Role::Assistant => {
                close_calls(&mut turns, &mut open_calls, &answered);
                let (content, calls) = assistant_blocks(message, opts);
                if content.is_empty() {
                    continue;
                }
                answered.clear();
                open_calls = calls;
                match turns.last_mut() {
                    Some(t) if t.role == "assistant" => t.content.extend(content),
                    _ => turns.push(Turn {
                        role: "assistant",
                        results: Vec::new(),
                        content,
                    }),
                }
            }
            Role::User | Role::System => {
                let mut results = Vec::new();
                let mut content = Vec::new();
                for block in &message.content {
                    match block {
                        ContentBlock::Text { text } if !text.trim().is_empty() => {
                            content.push(json!({"type": "text", "text": text}));
                        }
                        ContentBlock::ToolResult {
                            tool_call_id,
                            content: inner,
                            is_error,
                        } => {
                            let id = tool_id(tool_call_id.as_str());
                            let text = result_text(inner);
                            if open_calls.contains(&id) && answered.insert(id.clone()) {
                                let mut r = json!({"type": "tool_result", "tool_use_id": id,
                                                   "content": text});
                                if *is_error == Some(true) {
                                    r["is_error"] = Value::Bool(true);
                                }
                                results.push(r);
                            } else {
                                content.push(json!({"type": "text",
                                    "text": format!("[tool result {id}]\n{text}")}));
                            }
                        }
                        ContentBlock::Image { .. } => {
                            return Err(LlmFailure::new(
                                codes::UNSUPPORTED_CONTENT,
                                format!(
                                    "{}: images are not supported by this route yet",
                                    opts.provider
                                ),
                            ));
                        }
                        _ => {}
                    }
                }
                if results.is_empty() && content.is_empty() {
                    continue;
                }
                match turns.last_mut() {
                    Some(t) if t.role == "user" => {
                        t.results.extend(results);
                        t.content.extend(content);
                    }
                    _ => turns.push(Turn {
                        role: "user",
                        results,
                        content,
                    }),
                }
            }
        }
    }
    close_calls(&mut turns, &mut open_calls, &answered);
    Ok(turns
        .into_iter()
        .map(|t| {
            let mut content = t.results;
            content.extend(t.content);
            json!({"role": t.role, "content": content})
        })
        .collect())
}

/// The `tools` array: `{name, description, input_schema: {type: "object", properties,
/// required?}}` (other top-level schema keys dropped).
fn wire_tools(opts: &GenerateOptions) -> Vec<Value> {
    opts.tools
        .iter()
        .map(|t| {
            let mut schema = Map::new();
            schema.insert("type".to_owned(), json!("object"));
            schema.insert(
                "properties".to_owned(),
                t.parameters
                    .get("properties")
                    .cloned()
                    .unwrap_or_else(|| json!({})),
            );
            if let Some(req) = t.parameters.get("required") {
                schema.insert("required".to_owned(), req.clone());
            }
            json!({"name": t.name, "description": t.description, "input_schema": schema})
        })
        .collect()
}

/// Marks the last block of the last user message with `cache_control: {type: ephemeral}`.
fn mark_last_user_block(messages: &mut [Value]) {
    let last_user = messages
        .iter_mut()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    if let Some(block) = last_user
        .and_then(|m| m.get_mut("content"))
        .and_then(Value::as_array_mut)
        .and_then(|c| c.last_mut())
        .and_then(Value::as_object_mut)
    {
        block.insert("cache_control".to_owned(), json!({"type": "ephemeral"}));
    }
}

/// What [`build_body`] decided besides the body.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltRequest {
    /// The JSON body.
    pub body: Value,
    /// Thinking is enabled (send the `anthropic-beta` header).
    pub thinking: bool,
}

/// The request body: `model`, `stream: true`, `max_tokens`, `system` (one text block with a
/// cache breakpoint; omitted when empty), `messages` ([`wire_messages`], the last user block a
/// cache breakpoint), `tools` (the last one a cache breakpoint), `thinking` (from the reasoning
/// effort, else the model's default effort: `{type: enabled, budget_tokens}`, or `{type:
/// disabled}` for `off` on a model that declares efforts), `temperature` only when thinking is
/// off, `stop_sequences`.
///
/// `max_tokens` = the call's, else the catalog's default, else the output limit, else
/// [`DEFAULT_MAX_TOKENS`]; with thinking, plus the budget up to the output limit (the budget
/// then at most `max_tokens − 1024`); finally clamped to `window − ⌈body bytes / 4⌉ − 4096`
/// (at least 1) when the window is known.
///
/// # Errors
/// As [`wire_messages`].
pub fn build_body(
    route: &AnthropicRoute,
    opts: &GenerateOptions,
) -> Result<BuiltRequest, LlmFailure> {
    let entry = route.model(&opts.model);
    let mut messages = wire_messages(opts)?;
    mark_last_user_block(&mut messages);
    let mut body = Map::new();
    body.insert("model".to_owned(), json!(opts.model));
    body.insert("stream".to_owned(), json!(true));
    if let Some(system) = opts.system.as_deref().filter(|s| !s.trim().is_empty()) {
        body.insert(
            "system".to_owned(),
            json!([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]),
        );
    }
    body.insert("messages".to_owned(), Value::Array(messages));
    let mut tools = wire_tools(opts);
    if let Some(last) = tools.last_mut().and_then(Value::as_object_mut) {
        last.insert("cache_control".to_owned(), json!({"type": "ephemeral"}));
    }
    if !tools.is_empty() {
        body.insert("tools".to_owned(), Value::Array(tools));
    }
    let effort = opts
        .reasoning_effort
        .clone()
        .or_else(|| entry.and_then(|e| e.reasoning_efforts.first().cloned()));
    let declares_efforts = entry.is_some_and(|e| !e.reasoning_efforts.is_empty());
    let limit = entry.and_then(|e| e.max_output_tokens);
    let base = opts
        .max_tokens
        .or_else(|| entry.and_then(|e| e.default_max_tokens))
        .or(limit)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    let mut max_tokens = base;
    let mut thinking = false;
    match effort.as_deref().and_then(thinking_budget) {
        Some(budget) => {
            max_tokens = base.saturating_add(budget);
            if let Some(l) = limit {
                max_tokens = max_tokens.min(l);
            }
            let budget = budget.min(max_tokens.saturating_sub(1024));
            if budget >= 1024 {
                thinking = true;
                body.insert(
                    "thinking".to_owned(),
                    json!({"type": "enabled", "budget_tokens": budget}),
                );
            }
        }
        None if declares_efforts || effort.is_some() => {
            body.insert("thinking".to_owned(), json!({"type": "disabled"}));
        }
        None => {}
    }
    if !thinking && let Some(t) = opts.temperature {
        body.insert("temperature".to_owned(), json!(t));
    }
    if let Some(stop) = opts.stop.as_ref().filter(|s| !s.is_empty()) {
        body.insert("stop_sequences".to_owned(), json!(stop));
    }
    if let Some(window) = entry.and_then(|e| e.context_window) {
        let bytes = serde_json::to_vec(&body).map(|b| b.len()).unwrap_or(0) as u64;
        let estimate = bytes.div_ceil(4);
        let room = window
            .saturating_sub(estimate)
            .saturating_sub(CLAMP_MARGIN_TOKENS)
            .max(1);
        if max_tokens > room {
            max_tokens = room;
            if let Some(t) = body.get_mut("thinking")
                && t.get("type").and_then(Value::as_str) == Some("enabled")
            {
                let budget = max_tokens.saturating_sub(1024);
                if budget >= 1024 {
                    t["budget_tokens"] = json!(budget);
                } else {
                    *t = json!({"type": "disabled"});
                    thinking = false;
                }
            }
        }
    }
    body.insert("max_tokens".to_owned(), json!(max_tokens));
    Ok(BuiltRequest {
        body: Value::Object(body),
        thinking,
    })
}
