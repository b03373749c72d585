//! With the real agent factory: the `AgentInfo` the loop publishes reaches dsh-context's
//! providers (workspace root, AGENTS.md, git), and the snapshot rule sends the contexts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_agent::CreateAgentOptions;
use dsh_agent_loop::AgentLoop;
use dsh_agent_loop::prompt::{RetainedSnapshot, assemble, snapshot_for};
use dsh_context::{DATE_CONTEXT, GIT_CONTEXT};
use dsh_kernel::{CancellationToken, Kernel, Settings};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn agent_loop_assembly_sees_the_agent_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(ws.join("AGENTS.md"), "Run `make check` before finishing.\n").unwrap();
    let home = ws.join("home");
    std::fs::create_dir(&home).unwrap();
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(Settings::new().with_section(
            "dsh-context",
            json!({"dsh_home": home.display().to_string()}),
        )))
        .unwrap()
        .detach();
    kernel.boot().await.unwrap();
    let factory = kernel.root().require::<AgentLoop>().unwrap();
    let agent = factory
        .create_agent(CreateAgentOptions {
            id: Some("a-1".into()),
            cwd: Some(ws.display().to_string()),
            ..Default::default()
        })
        .unwrap();
    let parts = assemble(kernel.root(), &agent, &CancellationToken::new())
        .await
        .unwrap();
    let system = parts.system.clone().unwrap();
    assert!(system.contains(&format!("- Working directory: {}\n", ws.display())));
    assert!(system.ends_with(&format!(
        "# AGENTS.md: {}\n\nRun `make check` before finishing.",
        ws.join("AGENTS.md").display()
    )));
    let names: Vec<&str> = parts.contexts.iter().map(|c| c.name.as_str()).collect();
    // The temp dir is not a git repository: no git context. The sandbox seam is linked, so its
    // policy and network notes are there.
    assert_eq!(
        names,
        vec![DATE_CONTEXT, "sandbox:policy", "sandbox:network"]
    );
    assert!(!names.contains(&GIT_CONTEXT));
    let snapshot = snapshot_for(&RetainedSnapshot::Never, &parts).unwrap();
    assert_eq!(snapshot.content.len(), 1);
}
