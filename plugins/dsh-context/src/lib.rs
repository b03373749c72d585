//! dsh-context: the system-prompt sections and runtime contexts of a coding agent.
//!
//! They are contributed through the `SystemPrompt` service of dsh-system-prompt.
//!
//! Stable sections (part of the system prompt, byte-identical across days and commits):
//! - `context:persona` (order 10): [`PERSONA`] followed by the `persona` setting (or replaced
//!   by it with `persona_mode = "replace"`; [`ContextConfig::persona_text`]);
//! - `context:tool-guidance` (order 100): [`TOOL_GUIDANCE`];
//! - `context:environment` (order 200): the workspace root through the `{{cwd}}` variable
//!   (this plugin registers `cwd` from the agent's [`AgentInfo`]) and the OS
//!   ([`environment_text`]);
//! - one `context:agents-md:<path>` section per AGENTS.md file ([`load_agents_files`]: git
//!   root → cwd, then `$DSH_HOME/AGENTS.md`), read once per agent at its first assembly, cached
//!   by agent id (dropped on `agent/disposed`), inserted by a `system-prompt/assemble` listener
//!   right after `context:environment` (or last). Each section's text is `{{<variable>}}` with
//!   the file text in a per-assembly variable ([`AGENTS_VARIABLE_PREFIX`]`<n>`), so braces in a
//!   file are never parsed as template references.
//!
//! Runtime contexts (dynamic; sent as snapshot user messages only when they change):
//! - `context:date` (order 10, unless `include_date` is false): [`date_text`] of the clock;
//! - `context:git` (order 20, unless `include_git` is false): [`git_state`] of the agent's
//!   cwd (omitted without git, a cwd, or a repository), read through
//!   [`ContextService::git_text`]: the repository is located once per cwd (shared with the
//!   AGENTS.md discovery), the status is read at the first step of each turn (`turn/start`)
//!   and again only after a tool call whose declared effects may change the work tree
//!   ([`changes_workspace`], seen on `tools/result`); each git run is capped by
//!   `git_timeout_ms`, and above `git_status_max_files` index entries no status scan runs.
//!   See docs/upstream/context.md ("The git context").
//!
//! The permission mode is contributed by dsh-permissions (`permission:policy`).
//!
//! Settings section [`PLUGIN_ID`] = `dsh-context`: [`ContextConfig`].
//!
//! Spec: issue "dsh-context"; what it plugs into: docs/upstream/context.md and
//! docs/upstream/system-prompt.md (sections, contexts, variables, the snapshot rule).

mod agents;
mod config;
mod date;
mod error;
mod git;
mod install;
mod names;
mod service;
mod text;

pub use agents::{
    AGENTS_FILE_NAME, AgentsFile, MAX_AGENTS_FILE_BYTES, agents_section_text, chain_dirs,
    discover_agents_files, load_agents_file, load_agents_files,
};
pub use config::{Clock, ContextConfig, PersonaMode};
pub use date::{civil_from_days, date_text};
pub use dsh_agent::AgentInfo;
pub use error::ContextError;
pub use git::{
    DEFAULT_GIT_STATUS_MAX_FILES, DEFAULT_GIT_TIMEOUT_MS, GitOptions, GitRepo, MAX_STATUS_LINES,
    branch_from_header, changes_workspace, format_git_context, format_unavailable_context,
    format_unscanned_context, git_context, git_root, git_state, index_entry_count, locate_repo,
};
pub use install::install;
pub use names::{
    AGENTS_SECTION_PREFIX, AGENTS_VARIABLE_PREFIX, CWD_VARIABLE, DATE_CONTEXT, DATE_ORDER,
    ENVIRONMENT_ORDER, ENVIRONMENT_SECTION, GIT_CONTEXT, GIT_ORDER, PERSONA_ORDER, PERSONA_SECTION,
    TOOLS_ORDER, TOOLS_SECTION,
};
pub use service::ContextService;
pub use text::{PERSONA, TOOL_GUIDANCE, environment_text};

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-context";

dsh_kernel::plugin! {
    after = [
        dsh_system_prompt::PLUGIN,
        dsh_agent::PLUGIN,
    ],
    settings = ContextConfig,
    top_level = ["persona"],
    start = install::apply,
}
