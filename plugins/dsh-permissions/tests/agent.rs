//! `permission/preset` is logged at agent creation (`agent/session-start`) through the real
//! agent factory, before any tool call.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_agent::CreateAgentOptions;
use dsh_agent_loop::AgentLoop;
use dsh_kernel::{Kernel, Settings};
use dsh_permissions as _;
use dsh_session::EventData;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn preset_is_logged_when_the_agent_is_created() {
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(Settings::new().with_section(
            "dsh-permissions",
            json!({"mode": "danger-full-access"}),
        )))
        .unwrap()
        .detach();
    kernel.boot().await.unwrap();
    let factory = kernel.root().require::<AgentLoop>().unwrap();
    let agent = factory
        .create_agent(CreateAgentOptions {
            id: Some("a-1".into()),
            cwd: Some("/tmp".into()),
            ..Default::default()
        })
        .unwrap();
    let kinds: Vec<(String, serde_json::Value)> = agent
        .session()
        .events()
        .iter()
        .map(|e| {
            let data = match &e.data {
                EventData::Opaque(v) => v.clone(),
                _ => serde_json::Value::Null,
            };
            (e.kind.as_str().to_owned(), data)
        })
        .collect();
    let presets: Vec<_> = kinds
        .iter()
        .filter(|(k, _)| k == "permission/preset")
        .map(|(_, d)| d.clone())
        .collect();
    assert_eq!(presets, vec![json!({"preset": "danger-full-access"})]);
}
