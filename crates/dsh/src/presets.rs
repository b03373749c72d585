//! The default plugin set of the `dsh` binary, named once. Naming each plugin static here is
//! also what links its crate; the test below pins the exact id set.
//!
//! Adding a capability to the default binary (a tool family, a provider, a persistence backend)
//! is one line in [`DEFAULT`], the crate in `Cargo.toml`, and its id in the two pinned lists (the
//! test below and `tests/preset.rs`).

use crate::Harness;

dsh_kernel::preset! {
    /// Every plugin the default `dsh` binary boots (before `plugins.disable`).
    pub static DEFAULT = [
        dsh_agent::PLUGIN,
        dsh_agent_loop::PLUGIN,
        dsh_approval::PLUGIN,
        dsh_commands::PLUGIN,
        dsh_compaction_basic::PLUGIN,
        dsh_context::PLUGIN,
        dsh_hooks_claude_code::PLUGIN,
        dsh_hooks_codex::PLUGIN,
        dsh_llm::PLUGIN,
        dsh_llm_anthropic::PLUGIN,
        dsh_llm_deepseek::PLUGIN,
        dsh_llm_retry::PLUGIN,
        dsh_mcp::PLUGIN,
        dsh_permissions::PLUGIN,
        dsh_persistence::PLUGIN,
        dsh_persistence_jsonl::PLUGIN,
        dsh_persistence_sqlite::PLUGIN,
        dsh_sandbox::PLUGIN,
        dsh_sandbox_linux::PLUGIN,
        dsh_session::PLUGIN,
        dsh_skill_filesystem::PLUGIN,
        dsh_skills::PLUGIN,
        dsh_spill::PLUGIN,
        dsh_system_prompt::PLUGIN,
        dsh_tool_fs::PLUGIN,
        dsh_tool_search::PLUGIN,
        dsh_tool_shell::PLUGIN,
        dsh_tool_todo::PLUGIN,
        dsh_tools::PLUGIN,
    ]
}

/// The built-in settings of the default binary: the DeepSeek route and its fast model.
pub const DEFAULT_SETTINGS: &str = "provider = \"deepseek\"\nmodel = \"deepseek-v4-flash\"\n";

/// The default binary: [`DEFAULT`] with [`DEFAULT_SETTINGS`].
pub static DEFAULT_HARNESS: Harness = Harness {
    plugins: DEFAULT,
    defaults: DEFAULT_SETTINGS,
};

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_preset_is_exactly_this_set() {
        assert_eq!(
            dsh_kernel::preset_ids(super::DEFAULT),
            [
                "dsh-agent",
                "dsh-agent-loop",
                "dsh-approval",
                "dsh-commands",
                "dsh-compaction-basic",
                "dsh-context",
                "dsh-hooks-claude-code",
                "dsh-hooks-codex",
                "dsh-llm",
                "dsh-llm-anthropic",
                "dsh-llm-deepseek",
                "dsh-llm-retry",
                "dsh-mcp",
                "dsh-permissions",
                "dsh-persistence",
                "dsh-persistence-jsonl",
                "dsh-persistence-sqlite",
                "dsh-sandbox",
                "dsh-sandbox-linux",
                "dsh-session",
                "dsh-skill-filesystem",
                "dsh-skills",
                "dsh-spill",
                "dsh-system-prompt",
                "dsh-tool-fs",
                "dsh-tool-search",
                "dsh-tool-shell",
                "dsh-tool-todo",
                "dsh-tools",
            ]
        );
    }

    #[test]
    fn the_default_binary_links_no_plugin_outside_its_preset() {
        let linked: Vec<&str> = dsh_kernel::linked_plugins().iter().map(|d| d.id).collect();
        assert_eq!(linked, dsh_kernel::preset_ids(super::DEFAULT));
    }
}
