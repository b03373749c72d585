//! dsh-context: the system-prompt content of a coding agent, contributed through the
//! `SystemPrompt` service of dsh-system-prompt.
//!
//! Stable sections (part of the system prompt, byte-identical across days and commits):
//! - `context:persona` (order 10): [`PERSONA`] or the `persona` setting;
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
//! - `context:git` (order 20, unless `include_git` is false): [`git_context`] of the agent's
//!   cwd (omitted without git, a cwd, or a repository). git runs at every assembly.
//!
//! The permission mode is contributed by dsh-permissions (`permission:policy`).
//!
//! Settings section [`PLUGIN_ID`] = `dsh-context`: [`ContextConfig`].
//!
//! Spec: issue "dsh-context"; what it plugs into: docs/upstream/context.md and
//! docs/upstream/system-prompt.md (sections, contexts, variables, the snapshot rule).

mod agents;
mod date;
mod git;
mod text;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use dsh_agent::lifecycle::AgentDisposed;
use dsh_kernel::{BoxError, Context};
use dsh_system_prompt::{
    AssembleContext, AssembleRequest, AssembledSection, PromptContext, PromptError, PromptSection,
    PromptText, SystemPrompt, SystemPromptAssemble,
};
use serde::Deserialize;

pub use agents::{
    AGENTS_FILE_NAME, AgentsFile, MAX_AGENTS_FILE_BYTES, agents_section_text, chain_dirs,
    discover_agents_files, load_agents_file, load_agents_files,
};
pub use date::{civil_from_days, date_text};
pub use dsh_agent::AgentInfo;
pub use git::{MAX_STATUS_LINES, branch_from_header, format_git_context, git_context, git_root};
pub use text::{PERSONA, TOOL_GUIDANCE, environment_text};

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-context";
/// Persona section name.
pub const PERSONA_SECTION: &str = "context:persona";
/// Persona section order (after dsh-system-prompt's `deployment:persona` at 0).
pub const PERSONA_ORDER: f64 = 10.0;
/// Tool-guidance section name.
pub const TOOLS_SECTION: &str = "context:tool-guidance";
/// Tool-guidance section order.
pub const TOOLS_ORDER: f64 = 100.0;
/// Environment section name.
pub const ENVIRONMENT_SECTION: &str = "context:environment";
/// Environment section order.
pub const ENVIRONMENT_ORDER: f64 = 200.0;
/// Prefix of the AGENTS.md section names (followed by the file's path).
pub const AGENTS_SECTION_PREFIX: &str = "context:agents-md:";
/// Prefix of the per-assembly variables holding AGENTS.md section texts (followed by 1, 2, …).
pub const AGENTS_VARIABLE_PREFIX: &str = "dsh_context_agents_md_";
/// The variable holding the agent's workspace root.
pub const CWD_VARIABLE: &str = "cwd";
/// Date runtime-context name.
pub const DATE_CONTEXT: &str = "context:date";
/// Date runtime-context order.
pub const DATE_ORDER: f64 = 10.0;
/// Git runtime-context name.
pub const GIT_CONTEXT: &str = "context:git";
/// Git runtime-context order.
pub const GIT_ORDER: f64 = 20.0;

/// The wall clock used for the date context (injectable for tests).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The `dsh-context` settings section (snake_case; unknown fields rejected).
///
/// JSON: `{"persona": "…"?, "dsh_home": "/path"?, "include_git": true, "include_date": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// Replaces [`PERSONA`] (may use `{{variables}}`, e.g. `{{cwd}}`; `""` drops the section).
    pub persona: Option<String>,
    /// Where `AGENTS.md` is looked up last; default `$DSH_HOME`, else `~/.dsh`.
    pub dsh_home: Option<PathBuf>,
    /// Contribute the `context:git` runtime context (default true).
    pub include_git: bool,
    /// Contribute the `context:date` runtime context (default true).
    pub include_date: bool,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            persona: None,
            dsh_home: None,
            include_git: true,
            include_date: true,
        }
    }
}

impl ContextConfig {
    /// The effective `$DSH_HOME`: `dsh_home`, else the `DSH_HOME` environment variable (when
    /// non-empty), else `~/.dsh`, else `None` (no home directory).
    pub fn resolved_dsh_home(&self) -> Option<PathBuf> {
        if let Some(h) = &self.dsh_home {
            return Some(h.clone());
        }
        if let Some(h) = std::env::var_os("DSH_HOME").filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(h));
        }
        dirs::home_dir().map(|h| h.join(".dsh"))
    }
}

/// Errors of this crate, each with a stable code ([`dsh_kernel::ErrorCode`]).
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum ContextError {
    /// The plugin needs the `SystemPrompt` service (link dsh-system-prompt). Code
    /// `MISSING_SYSTEM_PROMPT`.
    #[error("dsh-context needs the SystemPrompt service (link dsh-system-prompt)")]
    #[code("MISSING_SYSTEM_PROMPT")]
    MissingSystemPrompt,
    /// A section, context or variable could not be registered (e.g. another plugin already
    /// registered the `cwd` variable globally). Code `PROMPT_REGISTRATION`.
    #[error("dsh-context could not register its prompt entries: {0}")]
    #[code("PROMPT_REGISTRATION")]
    Registration(#[from] PromptError),
}

/// The agent's [`AgentInfo`] for one assembly, when the loop assembles for an agent.
fn agent_info(cx: &AssembleContext) -> Option<Arc<AgentInfo>> {
    cx.agent.as_ref()?.get::<AgentInfo>()
}

fn agent_cwd(cx: &AssembleContext) -> Option<String> {
    agent_info(cx)?.cwd.clone()
}

/// The plugin's service (provided as `Arc<ContextService>`): the per-agent AGENTS.md cache.
#[derive(Debug)]
pub struct ContextService {
    dsh_home: Option<PathBuf>,
    cache: Mutex<HashMap<String, Arc<Vec<AgentsFile>>>>,
}

impl ContextService {
    /// A service looking up `$DSH_HOME/AGENTS.md` in `dsh_home`.
    pub fn new(dsh_home: Option<PathBuf>) -> Self {
        Self {
            dsh_home,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The AGENTS.md files of agent `agent_id` with workspace `cwd`: loaded on the first call
    /// for that id, then served from the cache (later changes to the files are not seen).
    pub fn agents_files(&self, agent_id: &str, cwd: &Path) -> Arc<Vec<AgentsFile>> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .entry(agent_id.to_owned())
            .or_insert_with(|| Arc::new(load_agents_files(cwd, self.dsh_home.as_deref())))
            .clone()
    }

    /// Drops an agent's cached files.
    pub fn forget(&self, agent_id: &str) {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(agent_id);
    }

    /// Inserts the AGENTS.md sections (and their variables) for the request's agent into the
    /// assembly: right after [`ENVIRONMENT_SECTION`], or at the end when it is absent. No agent
    /// or no cwd ⇒ unchanged.
    pub fn add_agents_sections(&self, req: &mut AssembleRequest) {
        let Some(info) = agent_info(&req.context) else {
            return;
        };
        let Some(cwd) = info.cwd.as_deref() else {
            return;
        };
        let files = self.agents_files(&info.id, Path::new(cwd));
        if files.is_empty() {
            return;
        }
        let assembly = &mut req.assembly;
        let at = assembly
            .sections
            .iter()
            .position(|s| s.name == ENVIRONMENT_SECTION)
            .map_or(assembly.sections.len(), |i| i + 1);
        let mut added = Vec::with_capacity(files.len());
        for (i, file) in files.iter().enumerate() {
            let var = format!("{AGENTS_VARIABLE_PREFIX}{}", i + 1);
            assembly
                .variables
                .insert(var.clone(), Some(agents_section_text(file)));
            added.push(AssembledSection::new(
                format!("{AGENTS_SECTION_PREFIX}{}", file.path.display()),
                format!("{{{{{var}}}}}"),
            ));
        }
        assembly.sections.splice(at..at, added);
    }
}

/// Registers everything under `ctx` (what the plugin's `apply` does, with the system clock):
/// the three stable sections, the `cwd` variable, the enabled runtime contexts, the
/// `system-prompt/assemble` listener adding AGENTS.md sections and the `agent/disposed`
/// cache cleanup; provides `Arc<ContextService>`. All bound to `ctx`'s scope.
///
/// # Errors
/// [`ContextError::MissingSystemPrompt`]; [`ContextError::Registration`] (a name taken in the
/// global layer, e.g. `cwd`); kernel errors (boxed) when `ctx` is inactive.
pub fn install(
    ctx: &Context,
    config: &ContextConfig,
    clock: Clock,
) -> Result<Arc<ContextService>, BoxError> {
    let prompt = ctx
        .get::<SystemPrompt>()
        .ok_or(ContextError::MissingSystemPrompt)?;
    let persona = config.persona.clone().unwrap_or_else(|| PERSONA.to_owned());
    let reg = |r: Result<dsh_kernel::Registration, PromptError>| -> Result<(), ContextError> {
        r?.detach();
        Ok(())
    };
    reg(prompt.section(
        ctx,
        PromptSection::new(PERSONA_SECTION, PERSONA_ORDER, persona),
    ))?;
    reg(prompt.section(
        ctx,
        PromptSection::new(TOOLS_SECTION, TOOLS_ORDER, TOOL_GUIDANCE),
    ))?;
    reg(prompt.section(
        ctx,
        PromptSection::new(
            ENVIRONMENT_SECTION,
            ENVIRONMENT_ORDER,
            PromptText::dynamic(|cx| environment_text(agent_cwd(cx).is_some())),
        ),
    ))?;
    reg(prompt.variable(ctx, CWD_VARIABLE, agent_cwd))?;
    if config.include_date {
        reg(prompt.context(
            ctx,
            PromptContext::new(
                DATE_CONTEXT,
                DATE_ORDER,
                PromptText::dynamic(move |_| date_text(clock())),
            ),
        ))?;
    }
    if config.include_git {
        reg(prompt.context(
            ctx,
            PromptContext::new(
                GIT_CONTEXT,
                GIT_ORDER,
                PromptText::dynamic(|cx| {
                    agent_cwd(cx)
                        .and_then(|cwd| git_context(Path::new(&cwd)))
                        .unwrap_or_default()
                }),
            ),
        ))?;
    }

    let service = Arc::new(ContextService::new(config.resolved_dsh_home()));
    ctx.provide(service.clone())?.detach();
    let s = service.clone();
    ctx.on_waterfall::<SystemPromptAssemble, _, _>(move |mut req, next| {
        s.add_agents_sections(&mut req);
        next.run(req)
    })?
    .detach();
    let s = service.clone();
    ctx.on_emit::<AgentDisposed>(move |notice| s.forget(notice.agent.session().id()))?
        .detach();
    Ok(service)
}

fn apply(ctx: &Context) -> Result<(), BoxError> {
    let config: ContextConfig = ctx.settings_section(PLUGIN_ID)?;
    install(ctx, &config, Arc::new(SystemTime::now))?;
    Ok(())
}

dsh_kernel::plugin! {
    after = [
        dsh_system_prompt::PLUGIN,
        dsh_agent::PLUGIN,
    ],
    settings = ContextConfig,
    top_level = ["persona"],
    start = apply,
}
