//! The identity of whoever calls a tool: [`ToolCaller`].
//!
//! Behaviour notes: `docs/tools.md` ("Execution types": `ToolExecutionInput.agent`). Upstream
//! passes the `Agent` itself; the agent type lives in a later crate (dsh-agent depends on
//! dsh-tools), so dsh-tools defines the few facts its pipeline needs and dsh-agent builds one
//! `ToolCaller` per agent (cheap to clone: a key, a context, two `Arc`-ish handles).

use std::sync::Arc;

use dsh_kernel::{Context, ScopeKey};
use dsh_llm::SessionId;
use dsh_session::Session;

/// What the pipeline knows about the calling agent.
///
/// - `key`: the agent's scope key. Every `tools/*` waterfall and emit is dispatched with it, so
///   listeners registered through the agent's tagged scope only see this agent's calls; scoped
///   tools, restrictions and guards are looked up by it.
/// - `ctx`: the agent's scope (`Context::tagged(key, …)`), for agent-scoped services (e.g. a
///   per-agent approval answerer or sandbox policy).
/// - `session` / `session_id`: the agent's session log (approval appends `approval/asked` /
///   `approval/decided` into it; tools may read it).
#[derive(Clone)]
pub struct ToolCaller {
    /// The agent's scope key (filters dispatch).
    pub key: ScopeKey,
    /// The agent's scope.
    pub ctx: Context,
    /// The agent's session log.
    pub session: Arc<Session>,
    /// The session's id (equals the agent id upstream).
    pub session_id: SessionId,
}

impl ToolCaller {
    /// Bundles the four facts.
    pub fn new(key: ScopeKey, ctx: Context, session: Arc<Session>, session_id: SessionId) -> Self {
        Self {
            key,
            ctx,
            session,
            session_id,
        }
    }

    /// The approval-side view of this caller (scope key, scope and session).
    pub fn approval_caller(&self) -> dsh_approval::ApprovalCaller {
        dsh_approval::ApprovalCaller {
            key: self.key.clone(),
            ctx: self.ctx.clone(),
            session: self.session.clone(),
            session_id: self.session_id.clone(),
        }
    }
}

impl std::fmt::Debug for ToolCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCaller")
            .field("key", &self.key)
            .field("session_id", &self.session_id)
            .finish()
    }
}
