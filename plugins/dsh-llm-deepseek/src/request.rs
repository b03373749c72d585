//! Request serialization: [`GenerateOptions`] → the chat-completions JSON body.
//!
//! See docs/upstream/deepseek.md (Thinking + tools; wire fixture 15; bug cases BC-02, BC-04).

use dsh_llm::{ContentBlock, GenerateOptions, LlmFailure, Message, Role, codes};
use serde_json::{Map, Value, json};

use crate::config::RouteConfig;

/// DeepSeek thinking settings resolved from a reasoning effort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thinking {
    /// Thinking enabled.
    pub enabled: bool,
    /// Wire `reasoning_effort` (`high` | `max`) when enabled.
    pub effort: Option<&'static str>,
}

/// Maps an adapter reasoning-effort id to DeepSeek thinking: `None`/`high`/`low`/`medium` ⇒
/// enabled `high`; `max`/`xhigh` ⇒ enabled `max`; `off`/`none`/`disabled` ⇒ disabled. Any other
/// id ⇒ enabled `high`.
pub fn thinking_for(effort: Option<&str>) -> Thinking {
    match effort {
        Some("off" | "none" | "disabled") => Thinking {
            enabled: false,
            effort: None,
        },
        Some("max" | "xhigh") => Thinking {
            enabled: true,
            effort: Some("max"),
        },
        _ => Thinking {
            enabled: true,
            effort: Some("high"),
        },
    }
}

fn unsupported(what: &str) -> LlmFailure {
    LlmFailure::new(
        codes::UNSUPPORTED_CONTENT,
        format!("{what} cannot be sent to this OpenAI-compatible route (text-only)"),
    )
}

/// Text of blocks inside a tool result: text blocks joined by `\n`; an image ⇒ failure.
fn result_text(blocks: &[ContentBlock]) -> Result<String, LlmFailure> {
    let mut parts = Vec::new();
    for b in blocks {
        match b {
            ContentBlock::Text { text } => parts.push(text.as_str()),
            ContentBlock::Image { .. } => return Err(unsupported("an image in a tool result")),
            _ => {}
        }
    }
    Ok(parts.join("\n"))
}

/// Ids of the history's tool calls without a usable name (empty or blank): they ran as error
/// results and are not replayed, neither the call nor its result (a nameless function call is
/// a request most servers refuse, in every later request).
fn nameless_calls(messages: &[std::sync::Arc<Message>]) -> std::collections::HashSet<&str> {
    messages
        .iter()
        .flat_map(|m| m.tool_calls())
        .filter(|(_, name, _)| name.trim().is_empty())
        .map(|(id, _, _)| id.as_str())
        .collect()
}

/// Serializes one history message into zero or more wire messages, appending to `out`; calls
/// and results whose id is in `skip` are left out.
fn push_message(
    route: &RouteConfig,
    thinking_on: bool,
    m: &Message,
    skip: &std::collections::HashSet<&str>,
    out: &mut Vec<Value>,
) -> Result<(), LlmFailure> {
    match m.role {
        Role::System => {
            let text = m.text();
            out.push(json!({"role": system_role(route), "content": text}));
        }
        Role::User => {
            let mut texts = Vec::new();
            for b in &m.content {
                match b {
                    ContentBlock::Text { text } => texts.push(text.as_str()),
                    ContentBlock::ToolResult { tool_call_id, .. }
                        if skip.contains(tool_call_id.as_str()) => {}
                    ContentBlock::ToolResult {
                        tool_call_id,
                        content,
                        ..
                    } => {
                        out.push(json!({
                            "role": "tool",
                            "tool_call_id": tool_call_id.as_str(),
                            "content": result_text(content)?,
                        }));
                    }
                    ContentBlock::Image { .. } => return Err(unsupported("an image")),
                    _ => {}
                }
            }
            if !texts.is_empty() {
                out.push(json!({"role": "user", "content": texts.join("\n")}));
            }
        }
        Role::Assistant => {
            let mut text = String::new();
            let mut reasoning: Option<String> = None;
            let mut calls = Vec::new();
            for b in &m.content {
                match b {
                    ContentBlock::Text { text: t } => text.push_str(t),
                    ContentBlock::Reasoning { text: t } => {
                        reasoning.get_or_insert_with(String::new).push_str(t);
                    }
                    ContentBlock::ToolCall { id, .. } if skip.contains(id.as_str()) => {}
                    ContentBlock::ToolCall {
                        id,
                        name,
                        arguments,
                    } => calls.push(json!({
                        "id": id.as_str(),
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    })),
                    _ => {}
                }
            }
            if calls.is_empty() && text.is_empty() && m.tool_calls().next().is_some() {
                // only nameless calls: nothing left to replay
                return Ok(());
            }
            let mut msg = Map::new();
            msg.insert("role".into(), json!("assistant"));
            if calls.is_empty() {
                msg.insert("content".into(), json!(text));
            } else {
                let content = if text.is_empty() {
                    Value::Null
                } else {
                    Value::String(text)
                };
                msg.insert("content".into(), content);
                if route.quirks.send_reasoning_content {
                    match reasoning {
                        Some(r) => {
                            msg.insert("reasoning_content".into(), Value::String(r));
                        }
                        None if route.quirks.empty_reasoning_for_tool_calls && thinking_on => {
                            msg.insert("reasoning_content".into(), json!(""));
                        }
                        None => {}
                    }
                }
                msg.insert("tool_calls".into(), Value::Array(calls));
            }
            out.push(Value::Object(msg));
        }
    }
    Ok(())
}

fn system_role(route: &RouteConfig) -> &'static str {
    if route.quirks.no_developer_role {
        "system"
    } else {
        "developer"
    }
}

/// Builds the streaming request body for `route`.
///
/// Shape: `{"model","messages":[…],"thinking"?,"reasoning_effort"?,"tools"?,"max_tokens"?,
/// "temperature"?,"stop"?,"stream":true,"stream_options"?:{"include_usage":true}}`.
/// Messages: the system prompt first (role `system`, or `developer` when the route allows it),
/// then history: user text ⇒ `user` (text blocks joined by `\n`); each tool-result block ⇒
/// `{"role":"tool","tool_call_id","content"}`; assistant ⇒ `content` (text or, with tool calls
/// and no text, `null`), `reasoning_content` only on tool-call messages (recorded reasoning
/// verbatim; `""` when none was recorded and the route has
/// [`crate::Quirks::empty_reasoning_for_tool_calls`] while thinking is on; only on routes with
/// [`crate::Quirks::send_reasoning_content`]), `tool_calls` with `type:"function"` and the raw
/// argument text. A tool call without a name (empty or blank) and its result are never sent; an
/// assistant message left with neither text nor calls is dropped. Temperature is omitted while DeepSeek thinking is enabled (it is ignored
/// there).
///
/// # Errors
/// `UNSUPPORTED_CONTENT` when the history holds an image.
pub fn build_body(route: &RouteConfig, opts: &GenerateOptions) -> Result<Value, LlmFailure> {
    let thinking = route
        .quirks
        .deepseek_thinking
        .then(|| thinking_for(opts.reasoning_effort.as_deref()));
    let thinking_on = thinking.as_ref().is_some_and(|t| t.enabled);
    let mut messages = Vec::with_capacity(opts.messages.len() + 1);
    if let Some(system) = opts.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": system_role(route), "content": system}));
    }
    let skip = nameless_calls(&opts.messages);
    for m in &opts.messages {
        push_message(route, thinking_on, m, &skip, &mut messages)?;
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(opts.model));
    if let Some(t) = &thinking {
        let kind = if t.enabled { "enabled" } else { "disabled" };
        body.insert("thinking".into(), json!({"type": kind}));
        if let Some(e) = t.effort {
            body.insert("reasoning_effort".into(), json!(e));
        }
    }
    body.insert("stream".into(), json!(true));
    if route.quirks.include_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if !opts.tools.is_empty() {
        let tools: Vec<Value> = opts
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters,
                }})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("messages".into(), Value::Array(messages));
    if let Some(n) = opts.max_tokens {
        body.insert("max_tokens".into(), json!(n));
    }
    if let Some(t) = opts.temperature
        && !thinking_on
    {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(stop) = opts.stop.as_ref().filter(|s| !s.is_empty()) {
        body.insert("stop".into(), json!(stop));
    }
    Ok(Value::Object(body))
}
