//! The session event envelope and the typed core payloads.
//!
//! See docs/upstream/session.md (Envelope; Event catalog, with the turn-end reasons). Wire form = upstream session log format v0 (camelCase, the
//! same tags). The key order dsh writes is documented in `docs/formats.md`.
//!
//! A [`SessionEvent`] is immutable once logged and shared as `Arc<SessionEvent>`. Its `data` is an
//! [`EventData`]: one typed variant per core type, plus [`EventData::Opaque`] for plugin-declared
//! log-only types and unknown-but-ignorable types. Parsing is strict for core types: a payload
//! that does not match its shape, or that carries fields dsh would drop on re-serialization, is
//! refused with `MALFORMED_EVENT` (never silently lossy).

use std::borrow::Cow;
use std::sync::Arc;

use dsh_llm::{CallId, EpochHeader, LlmFailure, Message, StreamChunk, TokenUsage};
use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::SessionError;
use crate::lossless::{Residual, json_equiv};

/// Upstream `SESSION_FORMAT_VERSION`: the only log format version dsh reads and writes.
pub const SESSION_FORMAT_VERSION: u64 = 0;

/// An event type name (`"turn/start"`, `"compaction/start"`, …). Core names are `'static`
/// constants (no allocation); plugin names are owned strings. JSON: a plain string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventType {
    name: Cow<'static, str>,
    /// Cached classification (a function of `name`), so hot-path checks do not re-match.
    core: Option<CoreKind>,
}

impl EventType {
    /// `turn/start` — `{turn, trigger?}`.
    pub const TURN_START: EventType = EventType::core_const("turn/start", CoreKind::TurnStart);
    /// `turn/end` — `{turn, reason}`.
    pub const TURN_END: EventType = EventType::core_const("turn/end", CoreKind::TurnEnd);
    /// `step/start` — `{turn, step}`.
    pub const STEP_START: EventType = EventType::core_const("step/start", CoreKind::StepStart);
    /// `step/end` — `{turn, step}`.
    pub const STEP_END: EventType = EventType::core_const("step/end", CoreKind::StepEnd);
    /// `user/message` — the user-role `Message` itself (surface type).
    pub const USER_MESSAGE: EventType =
        EventType::core_const("user/message", CoreKind::UserMessage);
    /// `assistant/chunk` — `{turn, step, chunk}`.
    pub const ASSISTANT_CHUNK: EventType =
        EventType::core_const("assistant/chunk", CoreKind::AssistantChunk);
    /// `assistant/message` — `{turn, step, message, usage?, interrupted?}` (surface type).
    pub const ASSISTANT_MESSAGE: EventType =
        EventType::core_const("assistant/message", CoreKind::AssistantMessage);
    /// `tool/call` — `{turn, step, callId, name, arguments}`.
    pub const TOOL_CALL: EventType = EventType::core_const("tool/call", CoreKind::ToolCall);
    /// `tool/result` — `{turn, step, message, error?, meta?}` (surface type).
    pub const TOOL_RESULT: EventType = EventType::core_const("tool/result", CoreKind::ToolResult);
    /// `todo/write` — `{todos}`.
    pub const TODO_WRITE: EventType = EventType::core_const("todo/write", CoreKind::TodoWrite);
    /// `request/header` — `{header, reason}`.
    pub const REQUEST_HEADER: EventType =
        EventType::core_const("request/header", CoreKind::RequestHeader);
    /// `request/context` — `{provider, model, contextWindow?}`.
    pub const REQUEST_CONTEXT: EventType =
        EventType::core_const("request/context", CoreKind::RequestContext);
    /// `session/end-seed` — `{}`; written only by the session constructor.
    pub const END_SEED: EventType = EventType::core_const("session/end-seed", CoreKind::EndSeed);

    /// Every core type, in spec order.
    pub const CORE: [EventType; 13] = [
        Self::TURN_START,
        Self::TURN_END,
        Self::STEP_START,
        Self::STEP_END,
        Self::USER_MESSAGE,
        Self::ASSISTANT_CHUNK,
        Self::ASSISTANT_MESSAGE,
        Self::TOOL_CALL,
        Self::TOOL_RESULT,
        Self::TODO_WRITE,
        Self::REQUEST_HEADER,
        Self::REQUEST_CONTEXT,
        Self::END_SEED,
    ];

    const fn core_const(name: &'static str, kind: CoreKind) -> Self {
        EventType {
            name: Cow::Borrowed(name),
            core: Some(kind),
        }
    }

    /// A type from a name; core names reuse the `'static` constant.
    pub fn new(name: impl Into<String>) -> Self {
        let name: String = name.into();
        match CoreKind::of(&name) {
            Some(k) => k.event_type(),
            None => EventType {
                name: Cow::Owned(name),
                core: None,
            },
        }
    }

    /// A type from a `'static` name (no allocation).
    pub fn from_static(name: &'static str) -> Self {
        match CoreKind::of(name) {
            Some(k) => k.event_type(),
            None => EventType {
                name: Cow::Borrowed(name),
                core: None,
            },
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The core kind, or `None` for plugin/unknown types (O(1), cached).
    pub fn core(&self) -> Option<CoreKind> {
        self.core
    }

    /// True for the surface (message-producing) types: `user/message`, `assistant/message`,
    /// `tool/result`.
    pub fn is_surface(&self) -> bool {
        self.core().is_some_and(CoreKind::is_surface)
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl From<&str> for EventType {
    fn from(s: &str) -> Self {
        match CoreKind::of(s) {
            Some(k) => k.event_type(),
            None => EventType {
                name: Cow::Owned(s.to_owned()),
                core: None,
            },
        }
    }
}

impl From<String> for EventType {
    fn from(s: String) -> Self {
        EventType::new(s)
    }
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name)
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s: Cow<'de, str> = Deserialize::deserialize(d)?;
        Ok(EventType::from(s.as_ref()))
    }
}

/// The 13 core event types as a fieldless enum (for `match`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CoreKind {
    /// `turn/start`.
    TurnStart,
    /// `turn/end`.
    TurnEnd,
    /// `step/start`.
    StepStart,
    /// `step/end`.
    StepEnd,
    /// `user/message`.
    UserMessage,
    /// `assistant/chunk`.
    AssistantChunk,
    /// `assistant/message`.
    AssistantMessage,
    /// `tool/call`.
    ToolCall,
    /// `tool/result`.
    ToolResult,
    /// `todo/write`.
    TodoWrite,
    /// `request/header`.
    RequestHeader,
    /// `request/context`.
    RequestContext,
    /// `session/end-seed`.
    EndSeed,
}

impl CoreKind {
    /// The core kind of a type name.
    pub fn of(name: &str) -> Option<CoreKind> {
        Some(match name {
            "turn/start" => Self::TurnStart,
            "turn/end" => Self::TurnEnd,
            "step/start" => Self::StepStart,
            "step/end" => Self::StepEnd,
            "user/message" => Self::UserMessage,
            "assistant/chunk" => Self::AssistantChunk,
            "assistant/message" => Self::AssistantMessage,
            "tool/call" => Self::ToolCall,
            "tool/result" => Self::ToolResult,
            "todo/write" => Self::TodoWrite,
            "request/header" => Self::RequestHeader,
            "request/context" => Self::RequestContext,
            "session/end-seed" => Self::EndSeed,
            _ => return None,
        })
    }

    /// The type name constant.
    pub fn event_type(self) -> EventType {
        match self {
            Self::TurnStart => EventType::TURN_START,
            Self::TurnEnd => EventType::TURN_END,
            Self::StepStart => EventType::STEP_START,
            Self::StepEnd => EventType::STEP_END,
            Self::UserMessage => EventType::USER_MESSAGE,
            Self::AssistantChunk => EventType::ASSISTANT_CHUNK,
            Self::AssistantMessage => EventType::ASSISTANT_MESSAGE,
            Self::ToolCall => EventType::TOOL_CALL,
            Self::ToolResult => EventType::TOOL_RESULT,
            Self::TodoWrite => EventType::TODO_WRITE,
            Self::RequestHeader => EventType::REQUEST_HEADER,
            Self::RequestContext => EventType::REQUEST_CONTEXT,
            Self::EndSeed => EventType::END_SEED,
        }
    }

    /// True for `user/message`, `assistant/message`, `tool/result`.
    pub fn is_surface(self) -> bool {
        matches!(
            self,
            Self::UserMessage | Self::AssistantMessage | Self::ToolResult
        )
    }
}

/// `turn/start` payload. JSON `{"turn":n,"trigger"?:{…}}` (`trigger` is upstream's
/// merge-extensible `TurnTrigger`, kept verbatim).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStartData {
    /// Turn number (1-based, strictly increasing per session).
    pub turn: u64,
    /// What started the turn (`{kind:'message'|'retry'|'injection', …}`), when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Value>,
}

/// `turn/end` payload. JSON `{"turn":n,"reason":{…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEndData {
    /// The turn being closed.
    pub turn: u64,
    /// Why it ended.
    pub reason: TurnEndReason,
}

/// Why a turn ended. Merge-extensible: unknown kinds (and known kinds with shapes dsh does not
/// model, e.g. `{kind:'error', step, message}`) are kept verbatim in [`TurnEndReason::Other`].
/// JSON: an object tagged by `kind`.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEndReason {
    /// `{"kind":"completed"}`.
    Completed,
    /// `{"kind":"aborted","reason"?:{…}}` — `reason` is an `AgentCancelCause` or `{kind:'legacy'}`.
    Aborted {
        /// The cancel cause, verbatim.
        reason: Option<Value>,
    },
    /// `{"kind":"blocked"}` — a pre-step admission rejected the turn.
    Blocked,
    /// `{"kind":"error","error":{message,code,…}}` — a provider failure, or a failure of the loop
    /// itself with its own code (`dsh_agent_loop::LoopError`; upstream flattens those to
    /// `{message, code:'UNKNOWN'}`).
    Error {
        /// The failure.
        error: LlmFailure,
    },
    /// `{"kind":"max-tokens"}` — sticky: any step hitting max-tokens.
    MaxTokens,
    /// `{"kind":"interrupted"}` — only synthesised by crash repair.
    Interrupted,
    /// `{"kind":"disposed"}`.
    Disposed,
    /// Any other shape, verbatim.
    Other(Value),
}

impl TurnEndReason {
    /// The `kind` tag.
    pub fn kind(&self) -> &str {
        match self {
            Self::Completed => "completed",
            Self::Aborted { .. } => "aborted",
            Self::Blocked => "blocked",
            Self::Error { .. } => "error",
            Self::MaxTokens => "max-tokens",
            Self::Interrupted => "interrupted",
            Self::Disposed => "disposed",
            Self::Other(v) => v.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    fn from_value(v: Value) -> Self {
        let Some(obj) = v.as_object() else {
            return Self::Other(v);
        };
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let only = |keys: &[&str]| obj.keys().all(|k| keys.contains(&k.as_str()));
        let typed = match kind {
            "completed" if obj.len() == 1 => Some(Self::Completed),
            "blocked" if obj.len() == 1 => Some(Self::Blocked),
            "max-tokens" if obj.len() == 1 => Some(Self::MaxTokens),
            "interrupted" if obj.len() == 1 => Some(Self::Interrupted),
            "disposed" if obj.len() == 1 => Some(Self::Disposed),
            "aborted" if only(&["kind", "reason"]) => Some(Self::Aborted {
                reason: obj.get("reason").cloned(),
            }),
            "error" if only(&["kind", "error"]) => obj
                .get("error")
                .and_then(|e| {
                    let f: LlmFailure = serde_json::from_value(e.clone()).ok()?;
                    let back = serde_json::to_value(&f).ok()?;
                    json_equiv(&back, e).then_some(f)
                })
                .map(|error| Self::Error { error }),
            _ => None,
        };
        typed.unwrap_or(Self::Other(v))
    }
}

impl Serialize for TurnEndReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Self::Other(v) = self {
            return v.serialize(s);
        }
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("kind", self.kind())?;
        match self {
            Self::Aborted {
                reason: Some(reason),
            } => m.serialize_entry("reason", reason)?,
            Self::Error { error } => m.serialize_entry("error", error)?,
            _ => {}
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for TurnEndReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::from_value(Value::deserialize(d)?))
    }
}

/// `step/start` / `step/end` payload. JSON `{"turn":n,"step":m}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepData {
    /// Enclosing turn.
    pub turn: u64,
    /// Step number within the turn (1-based, strictly increasing).
    pub step: u64,
}

/// `assistant/chunk` payload. JSON `{"turn","step","chunk":{…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantChunkData {
    /// Enclosing turn.
    pub turn: u64,
    /// Enclosing step.
    pub step: u64,
    /// The raw stream chunk.
    pub chunk: StreamChunk,
}

/// `assistant/message` payload. JSON `{"turn","step","message":{…},"usage"?:{…},"interrupted"?:true}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessageData {
    /// Enclosing turn.
    pub turn: u64,
    /// Enclosing step.
    pub step: u64,
    /// The assembled assistant message (shared with derived history).
    pub message: Arc<Message>,
    /// The step's token usage when the adapter reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// `Some(true)` when the stream was cut by cancellation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<bool>,
}

/// `tool/call` payload. JSON `{"turn","step","callId","name","arguments":"<raw JSON text>"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallData {
    /// Enclosing turn.
    pub turn: u64,
    /// Enclosing step.
    pub step: u64,
    /// Pairs the call with its `tool/result`.
    pub call_id: CallId,
    /// Tool name as the model sent it.
    pub name: String,
    /// Raw argument text exactly as the model produced it.
    pub arguments: String,
}

/// `tool/result.error`: internal failure identity. JSON `{"name","code"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultError {
    /// Error class name (e.g. `ToolOutcomeUnknownError`).
    pub name: String,
    /// Stable code (e.g. `TOOL_OUTCOME_UNKNOWN`).
    pub code: String,
}

/// `tool/result` payload. JSON `{"turn","step","message":{…},"error"?:{…},"meta"?:…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultData {
    /// Enclosing turn.
    pub turn: u64,
    /// Enclosing step.
    pub step: u64,
    /// The tool-result message (role user, one `tool-result` block, source `tool`).
    pub message: Arc<Message>,
    /// Internal failure identity, when the call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolResultError>,
    /// Tool-private presentation payload (opaque to core; lossless JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

impl ToolResultData {
    /// The call id this result answers: the message's `source.callId`, else the first
    /// `tool-result` block's `toolCallId`.
    pub fn call_id(&self) -> Option<&CallId> {
        if let dsh_llm::MessageSource::Tool { call_id } = &self.message.source {
            return Some(call_id);
        }
        self.message.content.iter().find_map(|b| match b {
            dsh_llm::ContentBlock::ToolResult { tool_call_id, .. } => Some(tool_call_id),
            _ => None,
        })
    }
}

/// A todo item's lifecycle state. JSON `"pending" | "in_progress" | "completed"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on now.
    InProgress,
    /// Done.
    Completed,
}

/// One todo entry. JSON `{"content","status"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    /// Short imperative line.
    pub content: String,
    /// Lifecycle state.
    pub status: TodoStatus,
}

/// `todo/write` payload (whole-list snapshot; last wins). JSON `{"todos":[…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoWriteData {
    /// The whole list.
    pub todos: Vec<TodoItem>,
}

/// Why a `request/header` snapshot was written. JSON `"initial" | "resume" | "change"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestHeaderReason {
    /// First request of a loop instance.
    Initial,
    /// First request after resuming a stored session.
    Resume,
    /// The header changed since the previous snapshot.
    Change,
}

/// `request/header` payload. JSON `{"header":{…},"reason":"initial"|"resume"|"change"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestHeaderData {
    /// The full header snapshot.
    pub header: EpochHeader,
    /// Why it was written.
    pub reason: RequestHeaderReason,
}

/// `request/context` payload: the resolved route's capacity. JSON
/// `{"provider","model","contextWindow"?}` (`contextWindow` in tokens).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestContext {
    /// Provider route id.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// Maximum combined request + response context, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

/// A typed event payload. Serializes to the payload's JSON alone (no tag; the tag is the
/// envelope's `type`). `EndSeed` is `{}`.
#[derive(Debug, Clone, PartialEq)]
pub enum EventData {
    /// `turn/start`.
    TurnStart(TurnStartData),
    /// `turn/end`.
    TurnEnd(TurnEndData),
    /// `step/start`.
    StepStart(StepData),
    /// `step/end`.
    StepEnd(StepData),
    /// `user/message`: the message itself.
    UserMessage(Arc<Message>),
    /// `assistant/chunk`.
    AssistantChunk(AssistantChunkData),
    /// `assistant/message`.
    AssistantMessage(AssistantMessageData),
    /// `tool/call`.
    ToolCall(ToolCallData),
    /// `tool/result`.
    ToolResult(ToolResultData),
    /// `todo/write`.
    TodoWrite(TodoWriteData),
    /// `request/header`.
    RequestHeader(RequestHeaderData),
    /// `request/context`.
    RequestContext(RequestContext),
    /// `session/end-seed` (`{}`).
    EndSeed,
    /// A plugin-declared or unknown type's payload, verbatim.
    Opaque(Value),
}

impl EventData {
    /// The core kind this payload belongs to (`None` for `Opaque`).
    pub fn core_kind(&self) -> Option<CoreKind> {
        Some(match self {
            Self::TurnStart(_) => CoreKind::TurnStart,
            Self::TurnEnd(_) => CoreKind::TurnEnd,
            Self::StepStart(_) => CoreKind::StepStart,
            Self::StepEnd(_) => CoreKind::StepEnd,
            Self::UserMessage(_) => CoreKind::UserMessage,
            Self::AssistantChunk(_) => CoreKind::AssistantChunk,
            Self::AssistantMessage(_) => CoreKind::AssistantMessage,
            Self::ToolCall(_) => CoreKind::ToolCall,
            Self::ToolResult(_) => CoreKind::ToolResult,
            Self::TodoWrite(_) => CoreKind::TodoWrite,
            Self::RequestHeader(_) => CoreKind::RequestHeader,
            Self::RequestContext(_) => CoreKind::RequestContext,
            Self::EndSeed => CoreKind::EndSeed,
            Self::Opaque(_) => return None,
        })
    }

    /// The `(turn, step)` an execution payload names (`turn/*` give `(turn, None)`).
    pub fn turn_step(&self) -> Option<(u64, Option<u64>)> {
        match self {
            Self::TurnStart(d) => Some((d.turn, None)),
            Self::TurnEnd(d) => Some((d.turn, None)),
            Self::StepStart(d) | Self::StepEnd(d) => Some((d.turn, Some(d.step))),
            Self::AssistantChunk(d) => Some((d.turn, Some(d.step))),
            Self::AssistantMessage(d) => Some((d.turn, Some(d.step))),
            Self::ToolCall(d) => Some((d.turn, Some(d.step))),
            Self::ToolResult(d) => Some((d.turn, Some(d.step))),
            _ => None,
        }
    }

    /// Parses the payload of an event of type `kind` from JSON, strictly. Core types are parsed
    /// into their typed variant; any other type yields `Opaque(value)`.
    ///
    /// # Errors
    /// [`SessionError::MalformedEvent`] when a core payload does not match its shape, or when
    /// re-serializing the typed payload would not give an equal JSON value (fields dsh does
    /// not model; [`EventData::from_value_carrying`] keeps those instead); `seq` is attached for
    /// messages.
    pub fn from_value(
        kind: &EventType,
        value: Value,
        seq: Option<u64>,
    ) -> Result<Self, SessionError> {
        match Self::from_value_carrying(kind, value, seq)? {
            (data, None) => Ok(data),
            (_, Some(residual)) => Err(SessionError::malformed(
                seq,
                format!(
                    "`{kind}` payload has fields or shapes dsh does not model (would not round-trip): {residual:?}"
                ),
            )),
        }
    }

    /// Parses the payload of an event of type `kind` from JSON, carrying what dsh does not
    /// model. Core types are parsed into their typed variant; when the typed payload's JSON is
    /// not equal ([`json_equiv`]) to `value` — extra keys at any depth (in a message's `source`,
    /// on a content part, a tool call, usage, the payload itself), or a default the record
    /// omits — the difference is returned as a [`Residual`], which turns the typed payload's
    /// JSON back into `value`. Any other type yields `Opaque(value)` and no residual.
    /// See docs/formats.md (Fields dsh does not model).
    ///
    /// # Errors
    /// [`SessionError::MalformedEvent`] when a core payload does not match its shape (a modeled
    /// field missing or of the wrong type); `seq` is attached for messages.
    pub fn from_value_carrying(
        kind: &EventType,
        value: Value,
        seq: Option<u64>,
    ) -> Result<(Self, Option<Residual>), SessionError> {
        let Some(core) = kind.core() else {
            return Ok((Self::Opaque(value), None));
        };
        fn parse<T: serde::de::DeserializeOwned>(
            kind: &EventType,
            v: &Value,
            seq: Option<u64>,
        ) -> Result<T, SessionError> {
            T::deserialize(v)
                .map_err(|e| SessionError::malformed(seq, format!("`{kind}` payload: {e}")))
        }
        let data = match core {
            CoreKind::TurnStart => Self::TurnStart(parse(kind, &value, seq)?),
            CoreKind::TurnEnd => Self::TurnEnd(parse(kind, &value, seq)?),
            CoreKind::StepStart => Self::StepStart(parse(kind, &value, seq)?),
            CoreKind::StepEnd => Self::StepEnd(parse(kind, &value, seq)?),
            CoreKind::UserMessage => Self::UserMessage(parse(kind, &value, seq)?),
            CoreKind::AssistantChunk => Self::AssistantChunk(parse(kind, &value, seq)?),
            CoreKind::AssistantMessage => Self::AssistantMessage(parse(kind, &value, seq)?),
            CoreKind::ToolCall => Self::ToolCall(parse(kind, &value, seq)?),
            CoreKind::ToolResult => Self::ToolResult(parse(kind, &value, seq)?),
            CoreKind::TodoWrite => Self::TodoWrite(parse(kind, &value, seq)?),
            CoreKind::RequestHeader => Self::RequestHeader(parse(kind, &value, seq)?),
            CoreKind::RequestContext => Self::RequestContext(parse(kind, &value, seq)?),
            CoreKind::EndSeed => {
                if value.as_object().is_some_and(Map::is_empty) {
                    Self::EndSeed
                } else {
                    return Err(SessionError::malformed(
                        seq,
                        "`session/end-seed` payload must be {}",
                    ));
                }
            }
        };
        let back =
            serde_json::to_value(&data).map_err(|e| SessionError::malformed(seq, e.to_string()))?;
        let residual = Residual::between(&back, &value);
        if let Some(r) = &residual {
            // The residual must reproduce the stored payload exactly (as JSON values).
            let mut rebuilt = back;
            r.apply(&mut rebuilt);
            if !json_equiv(&rebuilt, &value) {
                return Err(SessionError::malformed(
                    seq,
                    format!("`{kind}` payload does not round-trip: {value}"),
                ));
            }
        }
        Ok((data, residual))
    }

    /// The payload as a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl Serialize for EventData {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::TurnStart(d) => d.serialize(s),
            Self::TurnEnd(d) => d.serialize(s),
            Self::StepStart(d) | Self::StepEnd(d) => d.serialize(s),
            Self::UserMessage(d) => d.serialize(s),
            Self::AssistantChunk(d) => d.serialize(s),
            Self::AssistantMessage(d) => d.serialize(s),
            Self::ToolCall(d) => d.serialize(s),
            Self::ToolResult(d) => d.serialize(s),
            Self::TodoWrite(d) => d.serialize(s),
            Self::RequestHeader(d) => d.serialize(s),
            Self::RequestContext(d) => d.serialize(s),
            Self::EndSeed => s.serialize_map(Some(0))?.end(),
            Self::Opaque(v) => v.serialize(s),
        }
    }
}

/// How a surface event joined the surface. JSON `"append"` or
/// `{"op":"replace","start":seq,"end":seq}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SurfaceOp {
    /// Appended at the tail.
    Append,
    /// Replaces the current surface nodes from `start` through `end` inclusive by surface
    /// position (`start` may be numerically greater than `end`).
    Replace {
        /// Seq of the first shadowed node.
        start: u64,
        /// Seq of the last shadowed node.
        end: u64,
    },
}

impl Serialize for SurfaceOp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Append => s.serialize_str("append"),
            Self::Replace { start, end } => {
                let mut m = s.serialize_map(Some(3))?;
                m.serialize_entry("op", "replace")?;
                m.serialize_entry("start", start)?;
                m.serialize_entry("end", end)?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for SurfaceOp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Replace {
            op: String,
            start: u64,
            end: u64,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Str(String),
            Replace(Replace),
        }
        match Repr::deserialize(d)? {
            Repr::Str(s) if s == "append" => Ok(Self::Append),
            Repr::Replace(r) if r.op == "replace" => Ok(Self::Replace {
                start: r.start,
                end: r.end,
            }),
            _ => Err(D::Error::custom(
                "surfaceOp must be \"append\" or {op:\"replace\",start,end}",
            )),
        }
    }
}

/// Surface placement and provenance for [`crate::Session::append`]. Required on surface types,
/// rejected on every other type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceIntent {
    /// How the event joins the surface.
    pub surface_op: SurfaceOp,
    /// Complete known provenance (earlier seqs, unique). `None` = unrecorded; `Some(vec![])`
    /// only on `assistant/message` (known-empty stream).
    pub source_event_seqs: Option<Vec<u64>>,
}

impl SurfaceIntent {
    /// `{surfaceOp:'append'}` without provenance.
    pub fn append() -> Self {
        Self {
            surface_op: SurfaceOp::Append,
            source_event_seqs: None,
        }
    }

    /// `{surfaceOp:'append', sourceEventSeqs}`.
    pub fn append_from(sources: Vec<u64>) -> Self {
        Self {
            surface_op: SurfaceOp::Append,
            source_event_seqs: Some(sources),
        }
    }

    /// `{surfaceOp:{op:'replace',start,end}, sourceEventSeqs}`.
    pub fn replace(start: u64, end: u64, sources: Vec<u64>) -> Self {
        Self {
            surface_op: SurfaceOp::Replace { start, end },
            source_event_seqs: Some(sources),
        }
    }
}

/// One immutable entry of the session log.
///
/// JSON (key order dsh writes): `{"type","seq","time","data","sourceEventSeqs"?,"surfaceOp"?,
/// "ignorable"?:true}`; `time` is epoch milliseconds; `seq` equals the event's index in its log.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEvent {
    /// The event type.
    pub kind: EventType,
    /// Position in the log (contiguous from 0).
    pub seq: u64,
    /// Unix epoch milliseconds.
    pub time: u64,
    /// The payload.
    pub data: EventData,
    /// `true` marks an event a reader that does not know its type may skip.
    pub ignorable: bool,
    /// Provenance (surface types only).
    pub source_event_seqs: Option<Vec<u64>>,
    /// Surface placement (surface types only).
    pub surface_op: Option<SurfaceOp>,
    /// What the stored payload holds beyond what `data` serializes to (fields dsh does not
    /// model), applied when the event is written, so a stored record re-writes unchanged.
    /// `None` for every event dsh builds itself. See docs/formats.md (Fields dsh does not model).
    pub residual: Option<Arc<Residual>>,
}

impl SessionEvent {
    /// Parses one event from a JSON value (the stored record form).
    ///
    /// # Errors
    /// [`SessionError::MalformedEvent`] for a non-object, missing/ill-typed envelope fields,
    /// `ignorable` other than `true`, unknown envelope keys, or a core payload that does not
    /// parse (see [`EventData::from_value_carrying`]; fields dsh does not model are kept in
    /// [`SessionEvent::residual`]).
    pub fn from_value(value: Value) -> Result<Self, SessionError> {
        let Value::Object(mut obj) = value else {
            return Err(SessionError::malformed(None, "event is not a JSON object"));
        };
        let seq = obj.get("seq").and_then(Value::as_u64);
        let take_u64 = |obj: &mut Map<String, Value>, key: &str| -> Result<u64, SessionError> {
            match obj.remove(key) {
                Some(v) => v.as_u64().ok_or_else(|| {
                    SessionError::malformed(seq, format!("`{key}` must be a non-negative integer"))
                }),
                None => Err(SessionError::malformed(seq, format!("missing `{key}`"))),
            }
        };
        let kind = match obj.remove("type") {
            Some(Value::String(s)) => EventType::new(s),
            _ => return Err(SessionError::malformed(seq, "`type` must be a string")),
        };
        let seq_v = take_u64(&mut obj, "seq")?;
        let time = take_u64(&mut obj, "time")?;
        let data = obj
            .remove("data")
            .ok_or_else(|| SessionError::malformed(seq, "missing `data`"))?;
        let ignorable = match obj.remove("ignorable") {
            None => false,
            Some(Value::Bool(true)) => true,
            Some(_) => {
                return Err(SessionError::malformed(
                    seq,
                    "`ignorable` may only be `true`",
                ));
            }
        };
        let source_event_seqs = match obj.remove("sourceEventSeqs") {
            None => None,
            Some(v) => Some(
                Vec::<u64>::deserialize(&v)
                    .map_err(|e| SessionError::malformed(seq, format!("`sourceEventSeqs`: {e}")))?,
            ),
        };
        let surface_op = match obj.remove("surfaceOp") {
            None => None,
            Some(v) => Some(
                SurfaceOp::deserialize(&v)
                    .map_err(|e| SessionError::malformed(seq, format!("`surfaceOp`: {e}")))?,
            ),
        };
        if let Some(k) = obj.keys().next() {
            return Err(SessionError::malformed(
                seq,
                format!("unknown envelope field `{k}`"),
            ));
        }
        let (data, residual) = EventData::from_value_carrying(&kind, data, seq)?;
        Ok(Self {
            kind,
            seq: seq_v,
            time,
            data,
            ignorable,
            source_event_seqs,
            surface_op,
            residual: residual.map(Arc::new),
        })
    }

    /// An event with no surface intent, not ignorable, carrying nothing unmodeled.
    pub fn new(kind: EventType, seq: u64, time: u64, data: EventData) -> Self {
        Self {
            kind,
            seq,
            time,
            data,
            ignorable: false,
            source_event_seqs: None,
            surface_op: None,
            residual: None,
        }
    }

    /// The payload as stored: `data`'s JSON with the [`SessionEvent::residual`] applied.
    pub fn data_value(&self) -> Value {
        let mut v = self.data.to_value();
        if let Some(r) = &self.residual {
            r.apply(&mut v);
        }
        v
    }

    /// Parses one event from a JSON text line.
    ///
    /// # Errors
    /// [`SessionError::MalformedEvent`] for invalid JSON or as [`SessionEvent::from_value`].
    pub fn from_json(text: &str) -> Result<Self, SessionError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| SessionError::malformed(None, format!("invalid JSON: {e}")))?;
        Self::from_value(v)
    }

    /// The event as a JSON value (dsh key order).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The event as one compact JSON line (no trailing newline), dsh key order.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The surface intent this event carries, if any.
    pub fn intent(&self) -> Option<SurfaceIntent> {
        self.surface_op.map(|surface_op| SurfaceIntent {
            surface_op,
            source_event_seqs: self.source_event_seqs.clone(),
        })
    }
}

impl Serialize for SessionEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("type", &self.kind)?;
        m.serialize_entry("seq", &self.seq)?;
        m.serialize_entry("time", &self.time)?;
        match &self.residual {
            None => m.serialize_entry("data", &self.data)?,
            Some(_) => m.serialize_entry("data", &self.data_value())?,
        }
        if let Some(src) = &self.source_event_seqs {
            m.serialize_entry("sourceEventSeqs", src)?;
        }
        if let Some(op) = &self.surface_op {
            m.serialize_entry("surfaceOp", op)?;
        }
        if self.ignorable {
            m.serialize_entry("ignorable", &true)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for SessionEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Self::from_value(v).map_err(D::Error::custom)
    }
}
