//! End to end across plugins: a tool prints a 10 MB single line; `dsh-spill` replaces the
//! result with a head/tail preview plus a locator in its private session directory; the model's
//! next `read` of that locator (a path outside the workspace) succeeds through `dsh-tool-fs`
//! only because spill granted the fs service read access to its directory (the `dsh-fs` seam).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::sync::Arc;

use dsh_kernel::{Kernel, ScopeKey, Settings};
use dsh_llm::SessionId;
use dsh_session::{Session, SessionHeader};
use dsh_spill as _;
use dsh_tool_fs as _;
use dsh_tools::{ToolCaller, ToolExecutionInput, ToolExecutionResult, ToolRegistry, define_tool};
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct FloodArgs {
    /// Bytes of `x` between the markers.
    n: usize,
}

fn text(r: &ToolExecutionResult) -> String {
    r.content().iter().filter_map(|b| b.as_text()).collect()
}

#[tokio::test]
async fn ten_mb_output_spilled_then_read_back_with_the_read_tool() {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let ws = base.join("ws");
    fs::create_dir(&ws).unwrap();
    let spill_root = base.join("spill");
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(
            Settings::new().with_section("dsh-spill", json!({"root": spill_root})),
        ))
        .unwrap()
        .detach();
    kernel.boot().await.unwrap();
    let reg = kernel.root().require::<ToolRegistry>().unwrap();
    let flood = define_tool::<FloodArgs, String>("flood", "Prints HEAD, n x's, TAIL.")
        .execute(|a: FloodArgs, _cx| async move { Ok(format!("HEAD{}TAIL", "x".repeat(a.n))) })
        .unwrap();
    reg.register(kernel.root(), flood).unwrap().detach();

    let mut header = SessionHeader::new("s-1", 0);
    header.cwd = Some(ws.display().to_string());
    let session = Arc::new(Session::create("s-1", None, Some(header)).unwrap());
    let key = ScopeKey::new("agent");
    let actx = kernel.root().tagged(key.clone(), "agent").unwrap();
    let caller = ToolCaller::new(key, actx, session, SessionId::new("s-1"));
    let call = |name: &str, args: Value| {
        let reg = reg.clone();
        let input = ToolExecutionInput::new("c", name, args).with_caller(caller.clone());
        async move { reg.execute(input).await }
    };

    // before any spill, the spill root is outside the workspace and not granted
    fs::create_dir_all(&spill_root).unwrap();
    fs::write(spill_root.join("probe.txt"), "probe\n").unwrap();
    let r = call("read", json!({"file_path": spill_root.join("probe.txt")})).await;
    assert_eq!(r.error_info().unwrap().code, "FS_OUTSIDE_WORKSPACE");

    let n = 10 * 1024 * 1024;
    let r = call("flood", json!({"n": n})).await;
    let preview = text(&r);
    assert!(preview.len() <= 50 * 1024);
    assert!(preview.starts_with("HEADxxxx"));
    let marker = "Full formatted result stored at: ";
    let at = preview.find(marker).unwrap() + marker.len();
    let rest = &preview[at..];
    let locator = &rest[..rest.find(". Use read with offset/limit").unwrap()];
    assert!(preview.contains("xxxxTAIL\n\n(Omitted "));
    assert_eq!(
        fs::read_to_string(locator).unwrap(),
        format!("HEAD{}TAIL", "x".repeat(n))
    );

    let r = call("read", json!({"file_path": locator})).await;
    assert!(!r.is_error(), "{}", text(&r));
    assert_eq!(
        text(&r),
        format!(
            "<path>{locator}</path>\n<type>file</type>\n<content>\n1: HEAD{}... (line truncated to 2000 chars)\n\n(End of file - total 1 lines)\n</content>",
            "x".repeat(1996)
        )
    );
    // the grant covers the session directory only, not the whole spill root
    let r = call("read", json!({"file_path": spill_root.join("probe.txt")})).await;
    assert_eq!(r.error_info().unwrap().code, "FS_OUTSIDE_WORKSPACE");
    // writes are never granted
    let r = call("write", json!({"file_path": locator, "content": "x"})).await;
    assert_eq!(r.error_info().unwrap().code, "FS_OUTSIDE_WORKSPACE");
    kernel.dispose().await;
}
