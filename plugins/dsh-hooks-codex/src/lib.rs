//! dsh-hooks-codex: Codex command hooks, run unchanged.
//!
//! Reads the hook files named by `[hooks] codex = ["<path>", …]` (Codex's `hooks.json` shape,
//! or a settings file with a `hooks` key). Their SessionStart, UserPromptSubmit, PreToolUse,
//! PostToolUse and Stop hooks run on the loop's and the tool pipeline's extension points
//! (`dsh_hooks::bridge`); Codex hooks cannot ask for approval. `[hooks] max_stop_blocks`
//! (default 8) caps consecutive Stop blocks per turn. The file key is restricted: a project's
//! own `.dsh/settings.toml` cannot name hooks to run. Behaviour notes: docs/upstream/hooks.md.

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-hooks-codex";

fn start(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    dsh_hooks::start_codex(ctx, PLUGIN_ID)
}

dsh_kernel::plugin! {
    after = [dsh_tools::PLUGIN, dsh_agent::PLUGIN],
    settings = dsh_hooks::CodexSettings,
    aliases = ["hooks"],
    restricted = ["codex"],
    start = start,
}
