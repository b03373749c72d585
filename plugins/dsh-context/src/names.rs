//! The names and orders of the sections, variables and runtime contexts this plugin contributes.

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
/// The variable holding the agent's working directory (its session `cwd`).
pub const CWD_VARIABLE: &str = "cwd";
/// Date runtime-context name.
pub const DATE_CONTEXT: &str = "context:date";
/// Date runtime-context order.
pub const DATE_ORDER: f64 = 10.0;
/// Git runtime-context name.
pub const GIT_CONTEXT: &str = "context:git";
/// Git runtime-context order.
pub const GIT_ORDER: f64 = 20.0;
