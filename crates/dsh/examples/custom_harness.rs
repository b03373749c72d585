//! A minimal custom harness: the kernel, session, llm, agent loop, the DeepSeek provider and the
//! filesystem tools — nothing else. It runs one prompt against `DEEPSEEK_BASE_URL` (default the
//! official API) with `DEEPSEEK_API_KEY`, prints the answer, and exits.
//!
//! ```sh
//! cargo run -p dsh --example custom_harness -- "list the files you can read"
//! ```
//!
//! Assembling a harness is a `main.rs` that names the plugin crates it links (`use x as _;`):
//! a crate only listed in `Cargo.toml` is not linked and its registration silently vanishes.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example binary prints"
)]

use std::sync::Arc;

use dsh_agent::{AgentOptions, AgentRegistry, CreateAgentOptions};
use dsh_kernel::{Kernel, Settings};
use dsh_llm::Message;

// The plugin set of this harness.
use dsh_agent as _;
use dsh_agent_loop as _;
use dsh_llm as _;
use dsh_llm_deepseek as _;
use dsh_session as _;
use dsh_tool_fs as _;
use dsh_tools as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "Say hello.".to_owned());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kernel = Kernel::new();
    let base =
        std::env::var("DEEPSEEK_BASE_URL").unwrap_or_else(|_| "https://api.deepseek.com".into());
    kernel
        .root()
        .provide(Arc::new(Settings::new().with_section(
            "dsh-llm-deepseek",
            serde_json::json!({"official": {"base_url": base}}),
        )))?
        .detach();
    kernel.boot().await?;
    let ids: Vec<&str> = dsh_kernel::linked_plugins().iter().map(|d| d.id).collect();
    eprintln!("plugins: {}", ids.join(", "));
    let agents = kernel.root().require::<AgentRegistry>()?;
    let agent = agents
        .create(CreateAgentOptions {
            options: AgentOptions {
                provider: Some("deepseek".into()),
                model: Some("deepseek-v4-flash".into()),
                max_tokens: None,
            },
            cwd: Some(std::env::current_dir()?.display().to_string()),
            ..CreateAgentOptions::default()
        })
        .await?;
    agent.followup(Message::user_text(prompt))?;
    agent.when_idle().await;
    let answer = agent
        .session()
        .derive_messages()
        .last()
        .map(|m| m.text())
        .unwrap_or_default();
    println!("{answer}");
    agents.dispose_all().await;
    kernel.dispose().await;
    Ok(())
}
