//! dsh-hooks-claude-code: Claude Code command hooks, run unchanged.
//!
//! Reads the hook files named by `[hooks] claude_code = ["<path>", …]` (a Claude Code settings
//! file with a `hooks` key, or the bare hook map) and, with `[hooks] discover = true`, Claude
//! Code's own `~/.claude/settings.json`, `<workspace>/.claude/settings.json` and
//! `<workspace>/.claude/settings.local.json` first. Their SessionStart, UserPromptSubmit,
//! PreToolUse, PostToolUse and Stop hooks run on the loop's and the tool pipeline's extension
//! points (`dsh_hooks::bridge`); `[hooks] max_stop_blocks` (default 8) caps consecutive Stop
//! blocks per turn. The file keys are restricted: a project's own `.dsh/settings.toml` cannot
//! name hooks to run. Behaviour notes: docs/upstream/hooks.md.

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-hooks-claude-code";

fn start(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    dsh_hooks::start_claude_code(ctx, PLUGIN_ID)
}

dsh_kernel::plugin! {
    after = [dsh_tools::PLUGIN, dsh_agent::PLUGIN],
    settings = dsh_hooks::ClaudeCodeSettings,
    aliases = ["hooks"],
    restricted = ["claude_code", "discover"],
    start = start,
}
