//! Boot: with `dsh-llm`, this plugin registers the built-in routes and every
//! `format = "anthropic"` route of the `[providers]` table, and a call through the service
//! reaches the replay server in Anthropic mode.

use std::sync::Arc;

use dsh_kernel::{Kernel, Settings};
use dsh_llm::{BlockAssembler, GenerateOptions, LlmCallConfig, LlmService, Message};
use dsh_llm_anthropic as _;
use dsh_test_support::{ReplayServer, ScriptResponse};
use futures::StreamExt;
use serde_json::json;

#[tokio::test]
async fn boot_registers_builtin_and_table_routes() {
    let server = ReplayServer::with_responses(vec![ScriptResponse::text("via the service")])
        .await
        .unwrap();
    let kernel = Kernel::new();
    let settings = Settings::new().with_section(
        dsh_llm_http::PROVIDERS_SECTION,
        json!({
            "gateway": {"format": "anthropic", "base_url": server.base_url(),
                        "models": [{"id": "gw-model", "context_window": 5000}]},
            "local": {"base_url": "http://127.0.0.1:9/v1"},
            "deepseek-anthropic": {"enabled": false}
        }),
    );
    kernel.root().provide(Arc::new(settings)).unwrap().detach();
    kernel.boot().await.unwrap();
    let llm = kernel.root().require::<LlmService>().unwrap();
    let ids: Vec<String> = llm.list_providers().into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["anthropic", "gateway"]);
    assert_eq!(
        llm.resolve_model("gateway", "gw-model")
            .unwrap()
            .context_window,
        Some(5000)
    );
    assert_eq!(
        llm.resolve_model("anthropic", "claude-opus-4-5")
            .unwrap()
            .context_window,
        Some(200_000)
    );
    let o = GenerateOptions::new(
        &LlmCallConfig::new("gateway", "gw-model"),
        vec![Arc::new(Message::user_text("hi"))],
    );
    let mut s = llm.stream(o);
    let mut asm = BlockAssembler::new();
    while let Some(c) = s.next().await {
        asm.push(&c.unwrap());
    }
    assert_eq!(
        asm.message("gateway", "gw-model").unwrap().text(),
        "via the service"
    );
    assert_eq!(server.messages_bodies().len(), 1);
    kernel.dispose().await;
}
