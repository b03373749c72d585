//! The runtime-context snapshot rule: dynamic contexts travel as user-role snapshot messages in
//! history (keeping the system prompt byte-stable for prefix caching), and a new snapshot is
//! appended only when its text differs from the last snapshot still on the session surface.
//!
//! See docs/upstream/system-prompt.md (Runtime-context snapshot). Facts of upstream's rule:
//! - comparison is by the message TEXT (one text block), not by the sections;
//! - no snapshot ever and nothing to say ⇒ nothing; a cleared snapshot (empty after a snapshot
//!   existed) has text [`CLEARED_TEXT`] and a plain plugin source WITHOUT `form`/`sections`;
//! - a replace surface event whose `sourceEventSeqs` include the retained snapshot's seq (a
//!   compaction) drops it, so the next step re-sends the current snapshot.

use std::sync::Arc;

use dsh_llm::{ContentBlock, ContextForm, ContextSection, Message, MessageSource};
use dsh_session::{EventData, Session, SessionEvent, SurfaceOp};
use serde_json::Map;

use crate::render::join_context_sections;

/// The plugin id recorded in snapshot message sources (upstream's npm name, kept for log
/// compatibility).
pub const SNAPSHOT_SOURCE_PLUGIN: &str = "@deepseek-ai/dsh-system-prompt";

/// The text of the snapshot sent when contexts become empty after a snapshot existed.
pub const CLEARED_TEXT: &str =
    "Current runtime context: none. Earlier runtime-context snapshots no longer apply.";

/// What the loop knows about the last snapshot it sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RetainedSnapshot {
    /// No snapshot was ever written to this session.
    #[default]
    Never,
    /// A snapshot existed but none is on the surface any more (shadowed by a replace).
    Dropped,
    /// The last snapshot, still on the surface.
    Retained {
        /// Its `user/message` event seq.
        seq: u64,
        /// Its text when it has exactly one text block (`None` otherwise: never equal).
        text: Option<String>,
    },
}

fn is_owned(message: &Message) -> bool {
    matches!(&message.source, MessageSource::Plugin { plugin, .. } if plugin == SNAPSHOT_SOURCE_PLUGIN)
}

fn text_of(message: &Message) -> Option<String> {
    match message.content.as_slice() {
        [ContentBlock::Text { text }] => Some(text.clone()),
        _ => None,
    }
}

fn owned_message(event: &SessionEvent) -> Option<&Arc<Message>> {
    match &event.data {
        EventData::UserMessage(m) if is_owned(m) => Some(m),
        _ => None,
    }
}

impl RetainedSnapshot {
    /// Restores the state from a log (e.g. after resume): the newest snapshot `user/message`
    /// whose seq is in `surface_nodes` is retained; if snapshots exist but the newest one is
    /// not on the surface, scanning continues to older ones (upstream does the same: the
    /// newest snapshot on the surface wins) and `Dropped` results when none is.
    pub fn from_log(events: &[Arc<SessionEvent>], surface_nodes: &[u64]) -> Self {
        let on_surface: std::collections::HashSet<u64> = surface_nodes.iter().copied().collect();
        let mut state = Self::Never;
        for event in events.iter().rev() {
            let Some(m) = owned_message(event) else {
                continue;
            };
            state = Self::Dropped;
            if on_surface.contains(&event.seq) {
                return Self::Retained {
                    seq: event.seq,
                    text: text_of(m),
                };
            }
        }
        state
    }

    /// [`RetainedSnapshot::from_log`] over a live session's log and surface.
    pub fn from_session(session: &Session) -> Self {
        Self::from_log(&session.events(), &session.surface().nodes)
    }

    /// Follows one newly appended event: a snapshot `user/message` becomes the retained one; a
    /// replace surface event whose provenance includes the retained seq drops it.
    pub fn observe(&mut self, event: &SessionEvent) {
        if let Some(m) = owned_message(event) {
            *self = Self::Retained {
                seq: event.seq,
                text: text_of(m),
            };
            return;
        }
        if let Self::Retained { seq, .. } = self
            && matches!(event.surface_op, Some(SurfaceOp::Replace { .. }))
            && event
                .source_event_seqs
                .as_ref()
                .is_some_and(|s| s.contains(seq))
        {
            *self = Self::Dropped;
        }
    }
}

/// The snapshot user message to append for `current` (from [`crate::render_contexts`]), or
/// `None` when nothing changed.
///
/// - `current` empty and no snapshot ever ⇒ `None`;
/// - text = [`crate::join_context_sections`]`(current)`, or [`CLEARED_TEXT`] when that is empty;
/// - equal to the retained snapshot's text ⇒ `None`;
/// - otherwise a user-role message with one text block and source
///   `{kind:'plugin', plugin:'@deepseek-ai/dsh-system-prompt', form:'snapshot', sections}`
///   (the cleared message carries no `form`/`sections`).
pub fn snapshot_message(
    retained: &RetainedSnapshot,
    current: &[ContextSection],
) -> Option<Message> {
    let joined = join_context_sections(current);
    if joined.is_empty() && *retained == RetainedSnapshot::Never {
        return None;
    }
    let text = if joined.is_empty() {
        CLEARED_TEXT.to_owned()
    } else {
        joined
    };
    if let RetainedSnapshot::Retained { text: Some(t), .. } = retained
        && *t == text
    {
        return None;
    }
    let sections: Vec<ContextSection> = current
        .iter()
        .filter(|s| !s.text.is_empty())
        .cloned()
        .collect();
    let source = if sections.is_empty() {
        MessageSource::plugin(SNAPSHOT_SOURCE_PLUGIN)
    } else {
        MessageSource::Plugin {
            plugin: SNAPSHOT_SOURCE_PLUGIN.to_owned(),
            form: Some(ContextForm::Snapshot),
            sections: Some(sections),
            extra: Map::new(),
        }
    };
    Some(Message::user(vec![ContentBlock::text(text)], source))
}

/// The sections of the newest snapshot message in `messages` (a derived history), or `None`
/// when there is none. A cleared snapshot yields `Some(vec![])`. Use
/// [`RetainedSnapshot`] for the exact diffing rule; this is a read-only helper for consumers.
pub fn last_snapshot_sections(messages: &[Arc<Message>]) -> Option<Vec<ContextSection>> {
    messages
        .iter()
        .rev()
        .find(|m| is_owned(m))
        .map(|m| match &m.source {
            MessageSource::Plugin {
                sections: Some(s), ..
            } => s.clone(),
            _ => Vec::new(),
        })
}
