//! The search tools of dsh: `grep` (regex over file contents) and `glob` (file discovery by
//! path pattern), built on the ripgrep crates (`ignore`, `globset`, `grep-regex`,
//! `grep-searcher`) with parallel directory walking. Both are read-only and parallel-safe;
//! paths resolve against the workspace root and may not escape it.
//!
//! Behaviour notes and upstream sources (parameters, caps, output wording): `docs/tools.md`
//! ("Search tools").

mod error;
pub mod glob;
pub mod grep;
pub mod paths;
pub mod tools;

pub use error::SearchError;
pub use glob::{GlobOptions, GlobOutput, GlobRequest};
pub use grep::{GrepMatch, GrepOptions, GrepOutput, GrepRequest};
pub use tools::SearchConfig;

/// Plugin entry: reads settings section `dsh-tool-search` ([`SearchConfig`]) and registers
/// `grep` and `glob` (global) with the [`dsh_tools::ToolRegistry`].
///
/// # Errors
/// A malformed settings section; no `ToolRegistry` (the `dsh-tools` plugin is not linked); a
/// registration error.
pub fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    let cfg: SearchConfig = ctx.settings_section("dsh-tool-search")?;
    let registry = ctx.require::<dsh_tools::ToolRegistry>()?;
    for reg in tools::register_tools(ctx, &registry, cfg)? {
        reg.detach();
    }
    Ok(())
}

dsh_kernel::plugin! { after = [dsh_tools::PLUGIN], settings = SearchConfig, start = apply }
