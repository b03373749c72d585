//! The crate's link-time plugin provides `Arc<LlmService>` in the kernel.
//! See docs/upstream/llm.md (Runtime and adapter seam).

// Test helpers outside #[test] fns may unwrap too (clippy.toml only covers #[test] bodies).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::Kernel;
use dsh_llm as _;
use dsh_llm::LlmService;

#[tokio::test]
async fn plugin_provides_the_service() {
    let kernel = Kernel::new();
    let descs: Vec<_> = dsh_kernel::linked_plugins()
        .into_iter()
        .filter(|d| d.id == "dsh-llm")
        .collect();
    assert_eq!(descs.len(), 1);
    let report = kernel.boot_with(&descs).await.unwrap();
    assert_eq!(report.applied, vec!["dsh-llm"]);
    let service = kernel.root().get::<LlmService>().expect("service provided");
    assert_eq!(service.list_providers(), Vec::new());
    kernel.dispose().await;
    assert!(kernel.root().get::<LlmService>().is_none());
}
