//! The default plugin set of the `dsh` binary. Each crate is named here so the linker keeps its
//! link-time registration (a crate only listed in `Cargo.toml` would silently vanish);
//! `default_plugin_ids` pins the expected set and a test checks it against the linked registry.

use dsh_agent as _;
use dsh_agent_loop as _;
use dsh_approval as _;
use dsh_context as _;
use dsh_kernel as _;
use dsh_llm as _;
use dsh_llm_deepseek as _;
use dsh_llm_retry as _;
use dsh_permissions as _;
use dsh_persistence as _;
use dsh_persistence_jsonl as _;
use dsh_persistence_sqlite as _;
use dsh_session as _;
use dsh_spill as _;
use dsh_system_prompt as _;
use dsh_tool_fs as _;
use dsh_tool_search as _;
use dsh_tool_shell as _;
use dsh_tool_todo as _;
use dsh_tools as _;

/// The exact plugin ids the default binary registers, sorted.
#[cfg_attr(not(test), allow(dead_code, reason = "pinned by the test below"))]
pub const DEFAULT_PLUGIN_IDS: &[&str] = &[
    "dsh-agent",
    "dsh-agent-loop",
    "dsh-approval",
    "dsh-context",
    "dsh-llm",
    "dsh-llm-deepseek",
    "dsh-llm-retry",
    "dsh-permissions",
    "dsh-persistence",
    "dsh-persistence-jsonl",
    "dsh-persistence-sqlite",
    "dsh-session",
    "dsh-spill",
    "dsh-system-prompt",
    "dsh-tool-fs",
    "dsh-tool-search",
    "dsh-tool-shell",
    "dsh-tool-todo",
    "dsh-tools",
];

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_binary_links_exactly_the_default_plugin_set() {
        let ids: Vec<&str> = dsh_kernel::linked_plugins().iter().map(|d| d.id).collect();
        assert_eq!(ids, super::DEFAULT_PLUGIN_IDS);
    }
}
