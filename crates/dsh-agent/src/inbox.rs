//! The agent inbox: two ordered lists of pending user-role messages (`next-turn`, `next-step`).
//!
//! See docs/upstream/agent-loop.md (Agent handle).
//! Every mutation is first logged as a durable `agent/inbox/spliced {target, start,
//! removedCount?, inserted, outcome?}` session event and only then applied to the live
//! projection, so a resumed agent can rebuild its inbox from the log.

use std::sync::{Arc, Mutex};

use dsh_llm::{Message, MessageId};
use dsh_session::{EventData, Session, SessionError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The session event type of inbox mutations.
pub const INBOX_SPLICED: &str = "agent/inbox/spliced";

/// One of the two ordered pending-message lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum InboxTarget {
    /// `next-turn`: prompts, one per turn, FIFO.
    #[serde(rename = "next-turn")]
    NextTurn,
    /// `next-step`: steering and injected context, all claimed at the next step boundary.
    #[serde(rename = "next-step")]
    NextStep,
}

impl InboxTarget {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NextTurn => "next-turn",
            Self::NextStep => "next-step",
        }
    }
}

/// Inbox failures.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum InboxError {
    /// A message with this id is already pending in either list. Code `DUPLICATE_MESSAGE`.
    #[error("message `{0}` is already pending in the inbox")]
    #[code("DUPLICATE_MESSAGE")]
    Duplicate(MessageId),
    /// The splice could not be logged; the live projection is unchanged. Code `INBOX_LOG`.
    #[error("inbox splice could not be logged: {0}")]
    #[code("INBOX_LOG")]
    Log(#[from] SessionError),
}

#[derive(Debug, Default)]
struct Lists {
    next_turn: Vec<Arc<Message>>,
    next_step: Vec<Arc<Message>>,
}

impl Lists {
    fn list(&mut self, t: InboxTarget) -> &mut Vec<Arc<Message>> {
        match t {
            InboxTarget::NextTurn => &mut self.next_turn,
            InboxTarget::NextStep => &mut self.next_step,
        }
    }

    fn contains(&self, id: &MessageId) -> bool {
        self.next_turn
            .iter()
            .chain(self.next_step.iter())
            .any(|m| &m.id == id)
    }
}

/// The live projection of the durable inbox of one agent.
#[derive(Debug)]
pub struct Inbox {
    session: Arc<Session>,
    lists: Mutex<Lists>,
}

fn splice_value(
    target: InboxTarget,
    start: usize,
    removed: usize,
    inserted: &[Arc<Message>],
    canceled: bool,
) -> Value {
    // Built field by field in wire order (`target, start, removedCount?, inserted, outcome?`):
    // one map allocation and no intermediate `json!` values.
    let mut obj =
        serde_json::Map::with_capacity(3 + usize::from(removed > 0) + usize::from(canceled));
    obj.insert("target".into(), Value::from(target.as_str()));
    obj.insert("start".into(), Value::from(start));
    if removed > 0 {
        obj.insert("removedCount".into(), Value::from(removed));
    }
    let inserted = if inserted.is_empty() {
        Value::Array(Vec::new())
    } else {
        serde_json::to_value(inserted).unwrap_or(Value::Array(Vec::new()))
    };
    obj.insert("inserted".into(), inserted);
    if canceled {
        obj.insert("outcome".into(), Value::from("canceled"));
    }
    Value::Object(obj)
}

impl Inbox {
    /// An empty inbox logging into `session`.
    pub fn new(session: Arc<Session>) -> Self {
        Self {
            session,
            lists: Mutex::new(Lists::default()),
        }
    }

    /// Rebuilds the pending lists by replaying every `agent/inbox/spliced` event of the log.
    pub fn restore(session: Arc<Session>) -> Self {
        let mut lists = Lists::default();
        for e in session.events() {
            if e.kind.as_str() != INBOX_SPLICED {
                continue;
            }
            let EventData::Opaque(v) = &e.data else {
                continue;
            };
            let target = match v.get("target").and_then(Value::as_str) {
                Some("next-turn") => InboxTarget::NextTurn,
                Some("next-step") => InboxTarget::NextStep,
                _ => continue,
            };
            let list = lists.list(target);
            let start = v
                .get("start")
                .and_then(Value::as_u64)
                .map_or(0, |s| usize::try_from(s).unwrap_or(usize::MAX))
                .min(list.len());
            let removed = v
                .get("removedCount")
                .and_then(Value::as_u64)
                .map_or(0, |s| usize::try_from(s).unwrap_or(usize::MAX))
                .min(list.len() - start);
            let inserted: Vec<Arc<Message>> = v
                .get("inserted")
                .and_then(|i| serde_json::from_value::<Vec<Message>>(i.clone()).ok())
                .unwrap_or_default()
                .into_iter()
                .map(Arc::new)
                .collect();
            list.splice(start..start + removed, inserted);
        }
        Self {
            session,
            lists: Mutex::new(lists),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lists> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log(
        &self,
        target: InboxTarget,
        start: usize,
        removed: usize,
        inserted: &[Arc<Message>],
        canceled: bool,
    ) -> Result<(), InboxError> {
        self.session.append(
            INBOX_SPLICED,
            EventData::Opaque(splice_value(target, start, removed, inserted, canceled)),
            None,
        )?;
        Ok(())
    }

    /// Appends `message` to `target` (logged first).
    ///
    /// # Errors
    /// [`InboxError::Duplicate`] when its id is pending; [`InboxError::Log`] when the splice
    /// cannot be appended (nothing changes).
    pub fn push(&self, target: InboxTarget, message: Arc<Message>) -> Result<(), InboxError> {
        let mut lists = self.lock();
        if lists.contains(&message.id) {
            return Err(InboxError::Duplicate(message.id.clone()));
        }
        let start = lists.list(target).len();
        self.log(target, start, 0, std::slice::from_ref(&message), false)?;
        lists.list(target).push(message);
        Ok(())
    }

    /// Claims the batch of a proposed step: every `next-step` message, plus — at a turn
    /// boundary — the first `next-turn` message. Logged as pure-deletion splices (no outcome).
    /// Order of the returned batch: the turn's prompt first, then next-step input.
    ///
    /// # Errors
    /// [`InboxError::Log`] (nothing is claimed).
    pub fn claim(&self, turn_boundary: bool) -> Result<Vec<Arc<Message>>, InboxError> {
        let mut lists = self.lock();
        let mut out = Vec::new();
        if turn_boundary && !lists.next_turn.is_empty() {
            self.log(InboxTarget::NextTurn, 0, 1, &[], false)?;
            out.push(lists.next_turn.remove(0));
        }
        if !lists.next_step.is_empty() {
            let n = lists.next_step.len();
            self.log(InboxTarget::NextStep, 0, n, &[], false)?;
            out.append(&mut lists.next_step);
        }
        Ok(out)
    }

    /// Clears both lists as a cancellation (`outcome: "canceled"`); returns the discarded
    /// messages.
    ///
    /// # Errors
    /// [`InboxError::Log`] (nothing is cleared).
    pub fn clear(&self) -> Result<Vec<Arc<Message>>, InboxError> {
        let mut lists = self.lock();
        let mut out = Vec::new();
        for target in [InboxTarget::NextTurn, InboxTarget::NextStep] {
            let n = lists.list(target).len();
            if n > 0 {
                self.log(target, 0, n, &[], true)?;
                out.append(lists.list(target));
            }
        }
        Ok(out)
    }

    /// Pending `next-turn` messages.
    pub fn next_turn(&self) -> Vec<Arc<Message>> {
        self.lock().next_turn.clone()
    }

    /// Pending `next-step` messages.
    pub fn next_step(&self) -> Vec<Arc<Message>> {
        self.lock().next_step.clone()
    }

    /// True when `next-turn` has a prompt waiting.
    pub fn has_next_turn(&self) -> bool {
        !self.lock().next_turn.is_empty()
    }

    /// True when `next-step` has input waiting.
    pub fn has_next_step(&self) -> bool {
        !self.lock().next_step.is_empty()
    }
}
