//! A harness built from the default preset minus one plugin boots exactly the pinned rest, and
//! the left-out capability is gone (not merely unused).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

use std::sync::Arc;

use dsh_kernel::{Kernel, Settings};

#[tokio::test]
async fn the_default_preset_minus_the_todo_plugin_boots_without_todo_write() {
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(
            Settings::new().with_fact("ephemeral", true.into()),
        ))
        .unwrap()
        .detach();
    let report = kernel
        .boot_preset(dsh::presets::DEFAULT, &["dsh-tool-todo".to_owned()])
        .await
        .unwrap();
    let mut booted = report.applied.clone();
    booted.sort_unstable();
    assert_eq!(
        booted,
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
            "dsh-tools",
        ]
    );
    let tools = kernel.root().require::<dsh_tools::ToolRegistry>().unwrap();
    let mut names: Vec<String> = tools.schemas(None).into_iter().map(|s| s.name).collect();
    names.sort();
    assert!(!names.iter().any(|n| n == "todo_write"), "{names:?}");
    assert!(names.iter().any(|n| n == "read"), "{names:?}");
    kernel.dispose().await;
}
