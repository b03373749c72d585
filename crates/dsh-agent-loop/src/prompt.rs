//! Where the loop gets its system prompt and runtime contexts, and the runtime-context snapshot
//! rule.
//!
//! Spec: `../shared/spec/system-prompt.md` ("Runtime-context snapshot rule"),
//! `../shared/spec/agent-loop.md` (step 2b). Dynamic facts travel as snapshot `user/message`s,
//! re-sent only when they change, so the system prompt — and with it `request/header` and the
//! provider's prefix cache — stays stable.

use std::sync::Arc;

use dsh_agent::Agent;
use dsh_kernel::{BoxError, CancellationToken};
use dsh_llm::{ContentBlock, ContextForm, ContextSection, Message, MessageSource};
use dsh_session::Session;
use futures::future::BoxFuture;

/// The plugin id upstream records on snapshot messages.
pub const SNAPSHOT_PLUGIN: &str = "@deepseek-ai/dsh-system-prompt";

/// Text of a snapshot that replaces earlier ones.
pub const SNAPSHOT_PREAMBLE: &str =
    "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.";

/// Text of the snapshot sent when every runtime context disappeared.
pub const EMPTY_SNAPSHOT_TEXT: &str =
    "Current runtime context: none. Earlier runtime-context snapshots no longer apply.";

/// What one step's prompt assembly produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptParts {
    /// The rendered system prompt (`None` = none).
    pub system: Option<String>,
    /// The rendered dynamic runtime contexts, in order.
    pub contexts: Vec<ContextSection>,
}

/// Assembles the system prompt and runtime contexts for one step of `agent`.
pub trait PromptSource: Send + Sync + 'static {
    /// Assembles for the next step.
    ///
    /// # Errors
    /// Any assembly failure ends the turn with `error`.
    fn assemble(
        &self,
        agent: &Agent,
        signal: &CancellationToken,
    ) -> BoxFuture<'static, Result<PromptParts, BoxError>>;
}

/// No system prompt and no runtime contexts.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPrompt;

impl PromptSource for NoPrompt {
    fn assemble(
        &self,
        _agent: &Agent,
        _signal: &CancellationToken,
    ) -> BoxFuture<'static, Result<PromptParts, BoxError>> {
        Box::pin(async { Ok(PromptParts::default()) })
    }
}

/// The snapshot message to enter when `current` differs from the `previous` retained snapshot
/// (`None` = nothing retained). Unchanged, or nothing before and nothing now ⇒ `None`.
pub fn snapshot_message(
    previous: Option<&[ContextSection]>,
    current: &[ContextSection],
) -> Option<Arc<Message>> {
    let prev = previous.unwrap_or(&[]);
    if prev == current {
        return None;
    }
    let text = if current.is_empty() {
        EMPTY_SNAPSHOT_TEXT.to_owned()
    } else {
        let mut t = SNAPSHOT_PREAMBLE.to_owned();
        for s in current {
            t.push_str("\n\n");
            t.push_str(&s.text);
        }
        t
    };
    Some(Arc::new(Message::user(
        vec![ContentBlock::text(text)],
        MessageSource::Plugin {
            plugin: SNAPSHOT_PLUGIN.to_owned(),
            form: Some(ContextForm::Snapshot),
            sections: Some(current.to_vec()),
            extra: serde_json::Map::new(),
        },
    )))
}

/// The sections of the last runtime-context snapshot still on the session's surface (so a
/// resumed loop does not re-send an unchanged snapshot).
pub fn last_snapshot(session: &Session) -> Option<Vec<ContextSection>> {
    session
        .derive_messages()
        .iter()
        .rev()
        .find_map(|m| match &m.source {
            MessageSource::Plugin {
                form: Some(ContextForm::Snapshot),
                sections,
                ..
            } => Some(sections.clone().unwrap_or_default()),
            _ => None,
        })
}
