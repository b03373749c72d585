//! Agent lifecycle and inbox notifications (emit, scope-filtered by the agent's key). Their
//! payloads carry the [`Agent`] handle itself.
//!
//! See docs/upstream/agent-loop.md (Events).

use std::sync::Arc;

use dsh_llm::Message;

use crate::handle::Agent;

/// Payload of `agent/created` and `agent/disposed`.
#[derive(Clone, Debug)]
pub struct AgentNotice {
    /// The agent.
    pub agent: Agent,
}

dsh_kernel::event! {
    /// `agent/created` (emit): a new or resumed agent was published.
    pub struct AgentCreated: emit("agent/created") => AgentNotice;
}
dsh_kernel::event! {
    /// `agent/disposed` (emit): the agent's driver drained and its scope unwound.
    pub struct AgentDisposed: emit("agent/disposed") => AgentNotice;
}

/// Why a session lifecycle began (`SessionStartSource`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStartSource {
    /// A fresh (or seeded) session.
    Startup,
    /// A persisted session loaded again.
    Resume,
    /// A cleared session.
    Clear,
    /// A session continued after compaction.
    Compact,
}

impl SessionStartSource {
    /// The wire name (`startup`, `resume`, `clear`, `compact`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Startup => "startup",
            Self::Resume => "resume",
            Self::Clear => "clear",
            Self::Compact => "compact",
        }
    }
}

/// Payload of `agent/session-start`.
#[derive(Clone, Debug)]
pub struct SessionStart {
    /// The agent.
    pub agent: Agent,
    /// Why it started.
    pub source: SessionStartSource,
}

dsh_kernel::event! {
    /// `agent/session-start` (emit).
    pub struct AgentSessionStart: emit("agent/session-start") => SessionStart;
}

/// Payload of the per-message inbox emits.
#[derive(Clone, Debug)]
pub struct InboxNotice {
    /// The agent.
    pub agent: Agent,
    /// The message.
    pub message: Arc<Message>,
    /// The turn that claimed it (`agent/inbox/claimed` only).
    pub turn: Option<u64>,
}

dsh_kernel::event! {
    /// `agent/inbox/inserted` (emit).
    pub struct InboxInserted: emit("agent/inbox/inserted") => InboxNotice;
}
dsh_kernel::event! {
    /// `agent/inbox/discarded` (emit): removed by cancellation.
    pub struct InboxDiscarded: emit("agent/inbox/discarded") => InboxNotice;
}
dsh_kernel::event! {
    /// `agent/inbox/claimed` (emit): entered a step proposal.
    pub struct InboxClaimed: emit("agent/inbox/claimed") => InboxNotice;
}
