//! Which project root an agent's skills come from: the workspace root the agent factory
//! publishes ([`AgentInfo::cwd`], the same value the system prompt's `{{cwd}}` uses), else the
//! session header's `cwd`.

use std::path::PathBuf;

use dsh_agent::AgentInfo;
use dsh_kernel::Context;
use dsh_session::Session;
use dsh_skills::SkillScope;
use dsh_tools::ToolCaller;

/// The scope of an agent given its scope context (when known) and its session.
pub fn scope_of(agent_ctx: Option<&Context>, session: &Session) -> SkillScope {
    let cwd = agent_ctx
        .and_then(|c| c.get::<AgentInfo>())
        .and_then(|i| i.cwd.clone())
        .or_else(|| session.header().cwd.clone());
    SkillScope {
        project_root: cwd.map(PathBuf::from),
    }
}

/// The scope of a tool call's caller (agentless calls: no project root).
pub fn scope_of_caller(caller: Option<&ToolCaller>) -> SkillScope {
    match caller {
        Some(c) => scope_of(Some(&c.ctx), &c.session),
        None => SkillScope::default(),
    }
}
