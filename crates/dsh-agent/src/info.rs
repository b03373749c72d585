//! [`AgentInfo`]: the per-agent facts an agent factory publishes in each agent scope, for prompt
//! variables and system-prompt context providers (e.g. `dsh-context`'s workspace sections).
//!
//! It lives here, with the rest of the agent vocabulary, so a plugin can read it without
//! depending on the agent loop that publishes it. See `docs/upstream/agent-loop.md` (agent
//! scope).

/// What the agent factory (the agent loop) provides as a service in each agent scope: the
/// agent's identity and workspace root. Read with `agent_scope.get::<AgentInfo>()`; absent in
/// scopes no factory created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    /// The session id (= agent id).
    pub id: String,
    /// Absolute workspace root, when the session has one (the session header's `cwd`).
    pub cwd: Option<String>,
}
