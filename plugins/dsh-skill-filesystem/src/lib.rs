//! dsh-skill-filesystem: skills from the filesystem, the `skill` tool, the catalog message and
//! `/name` user invocation.
//!
//! - [`FsSkillProvider`] lists `<name>/SKILL.md` and `<name>.md` one level under each root,
//!   by rank (lower wins a duplicate name): 100 `<project>/.dsh/skills`, 200
//!   `<project>/.agents/skills`, 250 `<project>/.claude/skills` (dsh addition), 300 each of
//!   `[skills] dirs`, 400 `$DSH_HOME/skills`, 500 `$DSH_AGENTS_HOME/skills` (default
//!   `~/.agents/skills`), 550 `~/.claude/skills` (dsh addition), 600
//!   `$DSH_BUNDLED_SKILL_DIR`. The project root is the agent's workspace root
//!   ([`scope::scope_of`]). An invalid file is warned about once (stderr) and skipped.
//! - [`tool::SkillTool`] (`skill {name}`) loads a model-invocable skill.
//! - [`catalog::install`] adds the catalog message before a step when the `skill` tool is
//!   visible and the catalog's digest differs from the newest one on the surface, and a
//!   `<skill_content>` message for each `/name` of a user-invocable skill in a user prompt.
//!
//! Settings `[skills]` (or `[plugins.dsh-skill-filesystem]`): [`SkillsConfig`].
//! Behaviour and its upstream source: docs/upstream/skills.md.

pub mod catalog;
pub mod provider;
pub mod scope;
pub mod tool;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_kernel::{BoxError, Context};
use dsh_skills::{SkillError, Skills};

pub use provider::{FsSkillProvider, Homes, PROVIDER_ID, SKILL_FILE, SkillRoot, WarnSink};

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-skill-filesystem";

/// Settings of the plugin: `[skills]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SkillsConfig {
    /// More skill roots (rank 300, after the project's own and before the user's): `~/`
    /// expands to the home directory, a relative path resolves against the project root.
    pub dirs: Vec<String>,
}

fn env_dir(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The user-level roots from the run's facts and the environment: `dsh_home` (the settings
/// fact, else `$DSH_HOME`, else `~/.dsh`), `$DSH_AGENTS_HOME` (else `~/.agents`), the home
/// directory, `$DSH_BUNDLED_SKILL_DIR`.
pub fn homes(dsh_home: Option<&str>) -> Homes {
    let home = dirs::home_dir();
    Homes {
        dsh_home: dsh_home
            .map(PathBuf::from)
            .or_else(|| env_dir("DSH_HOME"))
            .or_else(|| home.as_ref().map(|h| h.join(".dsh"))),
        agents_home: env_dir("DSH_AGENTS_HOME")
            .or_else(|| home.as_ref().map(|h| h.join(".agents"))),
        home,
        bundled: env_dir("DSH_BUNDLED_SKILL_DIR"),
    }
}

/// The default warning sink: one `tracing` warning (shown on stderr by the binary).
pub fn warn_sink() -> WarnSink {
    Arc::new(|path: &Path, err: &SkillError| {
        tracing::warn!(target: "dsh_skill_filesystem", "skipping invalid skill file {}: {err}", path.display());
    })
}

fn start(ctx: &Context) -> Result<(), BoxError> {
    let config: SkillsConfig = ctx.settings_section(PLUGIN_ID)?;
    let skills = ctx
        .get::<Skills>()
        .ok_or("dsh-skill-filesystem needs the Skills service (link dsh-skills)")?;
    let settings = ctx.settings();
    let provider = FsSkillProvider::new(
        config.dirs,
        homes(settings.fact_str("dsh_home")),
        warn_sink(),
    );
    skills.add_provider(Arc::new(provider));
    dsh_tools::register(
        ctx,
        tool::SkillTool {
            skills: skills.clone(),
        },
    )?;
    catalog::install(ctx, skills)?.detach();
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_skills::PLUGIN, dsh_tools::PLUGIN, dsh_agent::PLUGIN],
    settings = SkillsConfig,
    aliases = ["skills"],
    start = start,
}
