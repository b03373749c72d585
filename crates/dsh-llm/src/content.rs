//! Content blocks, message sources and messages.
//!
//! See docs/upstream/llm.md (Content and messages); wire form = upstream session
//! log format v0 (camelCase fields, the same `type`/`kind` tags).
//!
//! The sums here are *merge-extensible*: a plugin may use a variant dsh does not model. Such a
//! value is kept verbatim in the `Other` variant and serializes back to the same JSON value, so
//! code matching on these enums must always keep a fallback arm.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ids::{CallId, MessageId};

/// One block of message content. JSON: an object tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ContentBlock {
    /// `{"type":"text","text":…}`.
    #[serde(rename = "text")]
    Text {
        /// The text.
        text: String,
    },
    /// `{"type":"reasoning","text":…}`: the model's visible reasoning (DeepSeek
    /// `reasoning_content`, Anthropic `thinking`).
    #[serde(rename = "reasoning")]
    Reasoning {
        /// The reasoning text.
        text: String,
    },
    /// `{"type":"image","attachment":{…}}`: an attachment reference (opaque here).
    #[serde(rename = "image")]
    Image {
        /// The `ImageAttachmentRef` object, kept verbatim.
        attachment: Value,
    },
    /// `{"type":"tool-call","id":…,"name":…,"arguments":"<raw JSON text>"}`.
    #[serde(rename = "tool-call")]
    ToolCall {
        /// The provider's call id.
        id: CallId,
        /// The tool name as the model sent it.
        name: String,
        /// The arguments exactly as the model produced them (raw JSON text, possibly invalid).
        arguments: String,
    },
    /// `{"type":"tool-result","toolCallId":…,"content":[…],"isError"?:bool}`.
    #[serde(rename = "tool-result")]
    ToolResult {
        /// The call this result answers.
        #[serde(rename = "toolCallId")]
        tool_call_id: CallId,
        /// The rendered result content.
        content: Vec<ContentBlock>,
        /// Present (true or false) when the producer recorded it.
        #[serde(rename = "isError", default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
    /// A block type dsh does not model, kept verbatim (including its `type`).
    #[serde(untagged)]
    Other(Value),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// A reasoning block.
    pub fn reasoning(text: impl Into<String>) -> Self {
        Self::Reasoning { text: text.into() }
    }

    /// A tool-call block.
    pub fn tool_call(
        id: impl Into<CallId>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The block's `type` tag (`"text"`, `"tool-call"`, …; for `Other`, its own tag or `""`).
    pub fn type_tag(&self) -> &str {
        match self {
            Self::Text { .. } => "text",
            Self::Reasoning { .. } => "reasoning",
            Self::Image { .. } => "image",
            Self::ToolCall { .. } => "tool-call",
            Self::ToolResult { .. } => "tool-result",
            Self::Other(v) => v.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The text of a text or reasoning block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } | Self::Reasoning { text } => Some(text),
            _ => None,
        }
    }
}

/// A message's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// System instructions.
    System,
    /// User input, tool results and plugin context.
    User,
    /// Model output.
    Assistant,
}

/// How a plugin-sourced context message should be treated (`source.form`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextForm {
    /// Standing instructions.
    Instructions,
    /// A catalog (e.g. of skills).
    Catalog,
    /// A runtime-context snapshot (superseded by the next one).
    Snapshot,
    /// A one-off notice.
    Notice,
    /// Relayed output of another agent.
    Relay,
    /// Recalled memory.
    Recall,
    /// A form dsh does not model, kept verbatim.
    #[serde(untagged)]
    Other(String),
}

/// One named section of a runtime-context snapshot (`source.sections[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextSection {
    /// The context's registered name (e.g. `sandbox:policy`).
    pub name: String,
    /// Its rendered text.
    pub text: String,
}

/// Where a message came from. JSON: an object tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum MessageSource {
    /// `{"kind":"user"}`: typed by a person.
    #[serde(rename = "user")]
    User,
    /// `{"kind":"plugin","plugin":…,"form"?:…,…}`: context injected by a plugin.
    #[serde(rename = "plugin")]
    Plugin {
        /// The plugin's id (upstream uses npm names, e.g. `@deepseek-ai/dsh-system-prompt`).
        plugin: String,
        /// The context form, if declared.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        form: Option<ContextForm>,
        /// Snapshot sections (form `snapshot`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sections: Option<Vec<ContextSection>>,
        /// Any other field the plugin recorded, kept verbatim.
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    /// `{"kind":"model","provider":…,"model":…,"replayState"?:…}`: produced by a model.
    #[serde(rename = "model")]
    Model {
        /// Provider route that produced it.
        provider: String,
        /// Model id.
        model: String,
        /// Opaque adapter state to hand back on replay (see [`crate::ReplayEnvelope`]).
        #[serde(
            rename = "replayState",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        replay_state: Option<Value>,
    },
    /// `{"kind":"tool","callId":…}`: a tool result.
    #[serde(rename = "tool")]
    Tool {
        /// The call it answers.
        #[serde(rename = "callId")]
        call_id: CallId,
    },
    /// A source kind dsh does not model (e.g. upstream's `goal`), kept verbatim.
    #[serde(untagged)]
    Other(Value),
}

impl MessageSource {
    /// The `kind` tag.
    pub fn kind(&self) -> &str {
        match self {
            Self::User => "user",
            Self::Plugin { .. } => "plugin",
            Self::Model { .. } => "model",
            Self::Tool { .. } => "tool",
            Self::Other(v) => v.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// A plain plugin source without form.
    pub fn plugin(plugin: impl Into<String>) -> Self {
        Self::Plugin {
            plugin: plugin.into(),
            form: None,
            sections: None,
            extra: Map::new(),
        }
    }
}

/// A message: the unit of model history. Immutable once created (share it behind `Arc`).
///
/// JSON: `{"id":…,"role":…,"content":[…],"source":{…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Unique id (not unique in some normalized upstream corpora; never relied on for identity).
    pub id: MessageId,
    /// Role.
    pub role: Role,
    /// Content blocks, in order.
    pub content: Vec<ContentBlock>,
    /// Provenance.
    pub source: MessageSource,
}

impl Message {
    /// A user message with one text block, a fresh id and source `user`.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            id: MessageId::fresh(),
            role: Role::User,
            content: vec![ContentBlock::text(text)],
            source: MessageSource::User,
        }
    }

    /// A user-role message with the given source (plugin context, goal rounds, …).
    pub fn user(content: Vec<ContentBlock>, source: MessageSource) -> Self {
        Self {
            id: MessageId::fresh(),
            role: Role::User,
            content,
            source,
        }
    }

    /// An assistant message produced by `provider`/`model`.
    pub fn assistant(
        content: Vec<ContentBlock>,
        provider: impl Into<String>,
        model: impl Into<String>,
        replay_state: Option<Value>,
    ) -> Self {
        Self {
            id: MessageId::fresh(),
            role: Role::Assistant,
            content,
            source: MessageSource::Model {
                provider: provider.into(),
                model: model.into(),
                replay_state,
            },
        }
    }

    /// A tool-result message: role user, exactly one `tool-result` block, source `tool`.
    pub fn tool_result(call_id: CallId, content: Vec<ContentBlock>, is_error: bool) -> Self {
        Self {
            id: MessageId::fresh(),
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_call_id: call_id.clone(),
                content,
                is_error: Some(is_error),
            }],
            source: MessageSource::Tool { call_id },
        }
    }

    /// The tool-call blocks of this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = (&CallId, &str, &str)> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => Some((id, name.as_str(), arguments.as_str())),
            _ => None,
        })
    }

    /// Concatenated text of all `text` blocks.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}
