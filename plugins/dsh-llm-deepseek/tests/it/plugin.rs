//! Link-time registration: booting the kernel with `dsh-llm` and this plugin registers the
//! configured routes with `LlmService`, and a call through the service reaches the replay server.

use std::sync::Arc;

use dsh_kernel::{Kernel, Settings};
use dsh_llm::{BlockAssembler, GenerateOptions, LlmCallConfig, LlmService, Message};
use dsh_llm_deepseek as _;
use dsh_test_support::{ReplayServer, ScriptResponse};
use futures::StreamExt;
use serde_json::json;

#[tokio::test]
async fn boot_registers_routes_and_streams_through_the_service() {
    let server = ReplayServer::with_responses(vec![ScriptResponse::text("via the service")])
        .await
        .unwrap();
    let kernel = Kernel::new();
    let settings = Settings::new().with_section(
        "dsh-llm-deepseek",
        json!({"replay": {"base_url": server.base_url(),
                          "models": [{"id": "replay-model", "context_window": 1000}]}}),
    );
    kernel.root().provide(Arc::new(settings)).unwrap().detach();
    kernel.boot().await.unwrap();
    let llm = kernel.root().require::<LlmService>().unwrap();
    let ids: Vec<String> = llm.list_providers().into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["deepseek", "deepseek-official", "replay"]);
    assert!(llm.has_provider("deepseek-official"));
    assert_eq!(
        llm.resolve_model("replay", "replay-model")
            .unwrap()
            .context_window,
        Some(1000)
    );
    let o = GenerateOptions::new(
        &LlmCallConfig::new("replay", "replay-model"),
        vec![Arc::new(Message::user_text("hi"))],
    );
    let mut s = llm.stream(o);
    let mut asm = BlockAssembler::new();
    while let Some(c) = s.next().await {
        asm.push(&c.unwrap());
    }
    let m = asm.message("replay", "replay-model").unwrap();
    assert_eq!(m.text(), "via the service");
    kernel.dispose().await;
}
