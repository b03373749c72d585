//! Link-time plugin discovery: the two test plugin crates beside this file are linked by name,
//! discovered through the kernel's registry, booted in key order, and beta's failure is reported
//! by id while alpha stays applied.

use std::sync::{Arc, Mutex};

use dsh_kernel::{Kernel, linked_plugins};
use dsh_testplugin_alpha::AlphaMarker;
use dsh_testplugin_beta::BetaService;

#[test]
fn the_linked_plugin_set_is_exactly_the_two_test_plugins() {
    let ids: Vec<&str> = linked_plugins().iter().map(|d| d.id).collect();
    assert_eq!(ids, vec!["dsh-testplugin-alpha", "dsh-testplugin-beta"]);
}

#[tokio::test]
async fn boot_orders_by_keys_and_reports_the_failing_plugin_by_id() {
    let kernel = Kernel::new();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    kernel
        .root()
        .provide_named("boot-log", log.clone())
        .unwrap()
        .detach();
    let err = kernel.boot().await.unwrap_err();
    assert_eq!(err.code(), "PLUGIN_FAILED");
    assert_eq!(
        err.to_string(),
        "1 plugin(s) failed to apply: dsh-testplugin-beta: beta refuses to start: missing widget"
    );
    // `after = ["dsh-testplugin-beta"]` puts beta first although alpha sorts first by id.
    assert_eq!(
        *log.lock().unwrap(),
        vec!["dsh-testplugin-beta", "dsh-testplugin-alpha"]
    );
    assert_eq!(kernel.applied(), vec!["dsh-testplugin-alpha"]);
    assert!(kernel.root().get::<AlphaMarker>().is_some());
    assert!(
        kernel.root().get::<BetaService>().is_none(),
        "a failed plugin's registrations are disposed"
    );
    kernel.dispose().await;
    assert!(kernel.root().get::<AlphaMarker>().is_none());
}
