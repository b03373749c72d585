//! Execution inputs, the materialised [`ToolExecution`], policy decisions and results; the
//! output-file convention of tools that bound their own output ([`OutputFolders`],
//! [`declared_output_files`]).
//!
//! Behaviour notes: `docs/tools.md` ("Execution types", "Pipeline", "Spill").

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::BoxError;
use dsh_session::SessionHeader;

use dsh_llm::{CallId, ContentBlock, Message};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::caller::ToolCaller;
use crate::error::ErrorInfo;

/// What a caller hands to [`crate::ToolRegistry::execute`] (upstream `ToolExecutionInput`).
#[derive(Debug, Clone)]
pub struct ToolExecutionInput {
    /// The provider's call id.
    pub call_id: CallId,
    /// The id of the outermost call this one descends from (nested calls); `None` ⇒ `call_id`.
    pub root_call_id: Option<CallId>,
    /// The tool name the model asked for (may be unknown: it then fails at dispatch).
    pub name: String,
    /// Parsed JSON arguments (a raw string when the model's text was not valid JSON).
    pub arguments: Value,
    /// The calling agent; `None` for agentless calls (approval then denies).
    pub caller: Option<ToolCaller>,
    /// The caller's cancellation signal (required).
    pub signal: CancellationToken,
}

impl ToolExecutionInput {
    /// An agentless input with a fresh, uncancelled signal.
    pub fn new(call_id: impl Into<CallId>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            call_id: call_id.into(),
            root_call_id: None,
            name: name.into(),
            arguments,
            caller: None,
            signal: CancellationToken::new(),
        }
    }

    /// Sets the caller.
    pub fn with_caller(mut self, caller: ToolCaller) -> Self {
        self.caller = Some(caller);
        self
    }

    /// Sets the signal.
    pub fn with_signal(mut self, signal: CancellationToken) -> Self {
        self.signal = signal;
        self
    }
}

/// The registry's materialised, immutable view of one call (shared as `Arc<ToolExecution>` with
/// every waterfall listener; listeners cannot rewrite arguments).
#[derive(Debug)]
pub struct ToolExecution {
    /// The provider's call id.
    pub call_id: CallId,
    /// Resolved root call id (`call_id` for top-level calls).
    pub root_call_id: CallId,
    /// The tool name as requested.
    pub name: String,
    /// The arguments (JSON snapshot; never mutated).
    pub arguments: Value,
    /// The calling agent, if any.
    pub caller: Option<ToolCaller>,
    /// The caller's signal.
    pub signal: CancellationToken,
}

impl ToolExecution {
    /// The caller's scope key (the carrier key of every `tools/*` dispatch for this call).
    pub fn key(&self) -> Option<&dsh_kernel::ScopeKey> {
        self.caller.as_ref().map(|c| &c.key)
    }
}

/// Result of `tools/pre-execute` (default [`PreToolDecision::Allow`]). No argument rewriting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreToolDecision {
    /// Proceed (to guards).
    Allow,
    /// Refuse; the model sees `Error: <reason>`.
    Deny {
        /// The reason text.
        reason: String,
    },
    /// Ask the approval service; only `allowed-once` proceeds.
    Ask {
        /// Why approval is needed (also used as the denial text when no approval service exists).
        reason: Option<String>,
    },
}

/// Result of `tools/post-execute` (default [`PostToolDecision::Accept`] with no contexts).
/// Every variant may add `additional_contexts` (user messages queued for the next step).
#[derive(Debug, Clone, PartialEq)]
pub enum PostToolDecision {
    /// Keep the result.
    Accept {
        /// Extra user messages.
        additional_contexts: Vec<Message>,
    },
    /// Replace the content blocks, keep value/meta (`accept{content}`).
    ReplaceContent {
        /// New content.
        content: Vec<ContentBlock>,
        /// Extra user messages.
        additional_contexts: Vec<Message>,
    },
    /// Replace the value of a success: revalidated against the output schema and re-rendered
    /// (`accept{value}`). On a failure, or for an unknown tool, this yields an error result.
    ReplaceValue {
        /// New value.
        value: Value,
        /// Extra user messages.
        additional_contexts: Vec<Message>,
    },
    /// Turn the result into an error whose content is `feedback`; `error.message` = the joined
    /// text of `feedback`, or `tool result blocked by post-execute policy` when it has none.
    Block {
        /// What the model sees.
        feedback: Vec<ContentBlock>,
        /// Extra user messages.
        additional_contexts: Vec<Message>,
    },
}

impl PostToolDecision {
    /// `Accept` with no contexts (the default).
    pub fn accept() -> Self {
        Self::Accept {
            additional_contexts: Vec::new(),
        }
    }
}

/// `error` of a failure: `{message, info?: {name, code}}` (info only for typed errors).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolErrorPayload {
    /// The message (content is `Error: <message>` unless replaced).
    pub message: String,
    /// `{name, code}` for typed errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub info: Option<ErrorInfo>,
}

/// A successful outcome. JSON: `{"isError":false,"value","content","meta"?,"additionalContexts"?,
/// "concludesTurn"?:true}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolExecutionSuccess {
    /// The canonical JSON value the body returned.
    pub value: Value,
    /// Rendered content blocks (what the model sees).
    pub content: Vec<ContentBlock>,
    /// Lossless JSON side data (UI/presentation), recorded in `tool/result.meta`.
    pub meta: Option<Value>,
    /// User messages queued for the next step, after the results.
    pub additional_contexts: Vec<Message>,
    /// The tool asked the turn to end after this step.
    pub concludes_turn: bool,
}

/// A failed outcome. JSON: `{"isError":true,"error":{message,info?},"content","meta"?,
/// "additionalContexts"?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolExecutionFailure {
    /// Message and optional info.
    pub error: ToolErrorPayload,
    /// What the model sees (default `[text "Error: <message>"]`).
    pub content: Vec<ContentBlock>,
    /// Lossless JSON side data.
    pub meta: Option<Value>,
    /// User messages queued for the next step.
    pub additional_contexts: Vec<Message>,
}

/// The outcome of one call. The final result handed out by the pipeline is frozen: an
/// `Arc<ToolExecutionResult>` nobody can mutate.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolExecutionResult {
    /// `isError: false`.
    Success(ToolExecutionSuccess),
    /// `isError: true`.
    Failure(ToolExecutionFailure),
}

impl ToolExecutionResult {
    /// A failure with content `[text "Error: <message>"]`.
    pub fn failure(message: impl Into<String>, info: Option<ErrorInfo>) -> Self {
        let message = message.into();
        Self::Failure(ToolExecutionFailure {
            content: vec![ContentBlock::text(format!("Error: {message}"))],
            error: ToolErrorPayload { message, info },
            meta: None,
            additional_contexts: Vec::new(),
        })
    }

    /// A failure from a typed dsh-tools error (info present).
    pub fn from_error(e: &crate::ToolsError) -> Self {
        Self::failure(e.to_string(), Some(e.info()))
    }

    /// True for failures.
    pub fn is_error(&self) -> bool {
        matches!(self, Self::Failure(_))
    }

    /// The content blocks.
    pub fn content(&self) -> &[ContentBlock] {
        match self {
            Self::Success(s) => &s.content,
            Self::Failure(f) => &f.content,
        }
    }

    pub(crate) fn content_mut(&mut self) -> &mut Vec<ContentBlock> {
        match self {
            Self::Success(s) => &mut s.content,
            Self::Failure(f) => &mut f.content,
        }
    }

    /// The meta value.
    pub fn meta(&self) -> Option<&Value> {
        match self {
            Self::Success(s) => s.meta.as_ref(),
            Self::Failure(f) => f.meta.as_ref(),
        }
    }

    /// The queued user messages.
    pub fn additional_contexts(&self) -> &[Message] {
        match self {
            Self::Success(s) => &s.additional_contexts,
            Self::Failure(f) => &f.additional_contexts,
        }
    }

    pub(crate) fn additional_contexts_mut(&mut self) -> &mut Vec<Message> {
        match self {
            Self::Success(s) => &mut s.additional_contexts,
            Self::Failure(f) => &mut f.additional_contexts,
        }
    }

    /// True only for a success that concludes the turn.
    pub fn concludes_turn(&self) -> bool {
        matches!(self, Self::Success(s) if s.concludes_turn)
    }

    /// `error.info` of a failure (what `tool/result.error` records), if present.
    pub fn error_info(&self) -> Option<&ErrorInfo> {
        match self {
            Self::Failure(f) => f.error.info.as_ref(),
            Self::Success(_) => None,
        }
    }

    /// `error.message` of a failure.
    pub fn error_message(&self) -> Option<&str> {
        match self {
            Self::Failure(f) => Some(&f.error.message),
            Self::Success(_) => None,
        }
    }

    /// The value of a success.
    pub fn value(&self) -> Option<&Value> {
        match self {
            Self::Success(s) => Some(&s.value),
            Self::Failure(_) => None,
        }
    }

    /// The upstream JSON shape (camelCase, `isError` discriminator, optional fields omitted).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let (content, meta, ctx) = match self {
            Self::Success(s) => {
                m.insert("isError".into(), Value::Bool(false));
                m.insert("value".into(), s.value.clone());
                (&s.content, &s.meta, &s.additional_contexts)
            }
            Self::Failure(f) => {
                m.insert("isError".into(), Value::Bool(true));
                m.insert(
                    "error".into(),
                    serde_json::to_value(&f.error).unwrap_or(Value::Null),
                );
                (&f.content, &f.meta, &f.additional_contexts)
            }
        };
        m.insert(
            "content".into(),
            serde_json::to_value(content).unwrap_or(Value::Null),
        );
        if let Some(meta) = meta {
            m.insert("meta".into(), meta.clone());
        }
        if !ctx.is_empty() {
            m.insert(
                "additionalContexts".into(),
                serde_json::to_value(ctx).unwrap_or(Value::Null),
            );
        }
        if self.concludes_turn() {
            m.insert("concludesTurn".into(), Value::Bool(true));
        }
        Value::Object(m)
    }
}

/// A frozen final result.
pub type FrozenResult = Arc<ToolExecutionResult>;

/// The value field by which a tool declares the file holding the whole of an output it cut
/// itself: `"outputFile"` (an absolute path), at the top level of its value or in an object
/// directly under it (the bash tool: `stdout.outputFile`, `stderr.outputFile`). A result that
/// declares one is already bounded with exactly one notice; the spill policy leaves it as is.
pub const OUTPUT_FILE_FIELD: &str = "outputFile";

/// The output files a tool's value declares ([`OUTPUT_FILE_FIELD`] strings at the top level and
/// in the objects directly under it, top level first, then in field order); empty for `None`,
/// a non-object value or a value without any.
pub fn declared_output_files(value: Option<&Value>) -> Vec<&str> {
    let Some(obj) = value.and_then(Value::as_object) else {
        return Vec::new();
    };
    fn own(o: &Map<String, Value>) -> Option<&str> {
        o.get(OUTPUT_FILE_FIELD).and_then(Value::as_str)
    }
    own(obj)
        .into_iter()
        .chain(obj.values().filter_map(Value::as_object).filter_map(own))
        .collect()
}

/// The service (looked up by type) that gives a tool call a private folder of its session for
/// the whole of an output the tool bounds itself (the bash tool's output files), so the part
/// the model does not see stays readable with `read`/`grep`. Provided by the plugin that owns a
/// session's files (dsh-spill: the session's spill folder, created 0700 and granted to the
/// filesystem service for reading); without it such tools keep no file.
pub struct OutputFolders {
    folder: Box<FolderFn>,
}

/// What an [`OutputFolders`] provider runs: the folder of a session, or why there is none.
type FolderFn = dyn Fn(&SessionHeader) -> Result<PathBuf, BoxError> + Send + Sync;

impl OutputFolders {
    /// A service answering with `folder` (which creates the folder and returns its absolute
    /// path, or the reason it cannot).
    pub fn new(
        folder: impl Fn(&SessionHeader) -> Result<PathBuf, BoxError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            folder: Box::new(folder),
        }
    }

    /// The existing folder for output files of `session`'s tool calls (absolute path).
    ///
    /// # Errors
    /// Whatever the provider reports (the folder cannot be created or is unsafe); the caller
    /// then keeps no file.
    pub fn folder_for(&self, session: &SessionHeader) -> Result<PathBuf, BoxError> {
        (self.folder)(session)
    }
}

impl std::fmt::Debug for OutputFolders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputFolders").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_output_files_reads_the_top_level_and_one_level_down() {
        let v = serde_json::json!({
            "outputFile": "/s/top.txt",
            "stdout": {"outputFile": "/s/out.txt", "text": "x"},
            "stderr": {"text": "y"},
            "deeper": {"inner": {"outputFile": "/s/no.txt"}},
            "odd": {"outputFile": 3},
        });
        assert_eq!(
            declared_output_files(Some(&v)),
            vec!["/s/top.txt", "/s/out.txt"]
        );
        assert!(declared_output_files(Some(&serde_json::json!({"text": "x"}))).is_empty());
        assert!(declared_output_files(Some(&serde_json::json!(["/s/a"]))).is_empty());
        assert!(declared_output_files(None).is_empty());
    }
}
