//! `grep` and `glob` through the `dsh-tools` registry pipeline: the caller's session cwd is the
//! workspace root, rendered content is exact, escapes fail with a typed code, both tools are
//! parallel-safe, and the plugin registers them at boot.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{Context, Kernel, ScopeKey};
use dsh_llm::SessionId;
use dsh_session::{Session, SessionHeader};
use dsh_tool_search::SearchConfig;
use dsh_tool_search::tools::register_tools;
use dsh_tools::{ExecutionMode, ToolCaller, ToolExecutionInput, ToolExecutionResult, ToolRegistry};
use serde_json::{Value, json};

use dsh_approval as _;
use dsh_tools as _;

fn caller(root: &Context, cwd: &Path) -> ToolCaller {
    let key = ScopeKey::new("a");
    let ctx = root.tagged(key.clone(), "a").unwrap();
    let mut header = SessionHeader::new("a", 1);
    header.cwd = Some(cwd.to_string_lossy().into_owned());
    let session = Arc::new(Session::create("a", None, Some(header)).unwrap());
    ToolCaller::new(key, ctx, session, SessionId::new("a"))
}

async fn call(
    reg: &ToolRegistry,
    who: &ToolCaller,
    name: &str,
    args: Value,
) -> Arc<ToolExecutionResult> {
    let mut input = ToolExecutionInput::new("c1", name, args);
    input.caller = Some(who.clone());
    tokio::time::timeout(Duration::from_secs(30), reg.execute(input))
        .await
        .expect("hung")
}

fn text(r: &ToolExecutionResult) -> String {
    r.content()
        .iter()
        .filter_map(dsh_llm::ContentBlock::as_text)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_and_glob_through_the_pipeline() {
    let kernel = Kernel::new();
    let root = kernel.root().child("t").unwrap();
    let reg = ToolRegistry::new(root.clone());
    for r in register_tools(&root, &reg, SearchConfig::default()).unwrap() {
        r.detach();
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join(".git")).unwrap();
    std::fs::write(d.path().join(".gitignore"), "skip.rs\n").unwrap();
    std::fs::write(d.path().join("skip.rs"), "needle\n").unwrap();
    std::fs::create_dir_all(d.path().join("src")).unwrap();
    std::fs::write(d.path().join("src/lib.rs"), "// needle here\n").unwrap();
    let a = caller(&root, d.path());
    let r = call(&reg, &a, "grep", json!({"pattern": "needle"})).await;
    assert_eq!(
        text(&r),
        "Found 1 match\n\nsrc/lib.rs\nLine 1: // needle here"
    );
    assert_eq!(
        r.value().unwrap(),
        &json!({"matches": [{"path": "src/lib.rs", "lineNumber": 1, "line": "// needle here"}], "totalMatches": 1, "truncated": false})
    );
    let r = call(&reg, &a, "glob", json!({"pattern": "*.rs"})).await;
    assert_eq!(r.value().unwrap()["totalPaths"], 2);
    let r = call(&reg, &a, "grep", json!({"pattern": "x", "path": "../"})).await;
    assert!(r.is_error());
    assert_eq!(
        r.error_info().unwrap().code,
        "SEARCH_PATH_OUTSIDE_WORKSPACE"
    );
    assert_eq!(text(&r), "Error: path ../ is outside the workspace");
    let r = call(&reg, &a, "glob", json!({"pattern": "["})).await;
    assert_eq!(r.error_info().unwrap().code, "SEARCH_INVALID_PATTERN");
    assert_eq!(
        reg.execution_mode("grep", &json!({"pattern": "x"}), None),
        ExecutionMode::Parallel
    );
    assert_eq!(
        reg.execution_mode("glob", &json!({"pattern": "x"}), None),
        ExecutionMode::Parallel
    );
    let schemas = reg.schemas(None);
    let grep = schemas.iter().find(|s| s.name == "grep").unwrap();
    assert_eq!(grep.parameters["required"], json!(["pattern"]));
    let props: Vec<&String> = grep.parameters["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(props, ["pattern", "path", "include"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_boot_registers_grep_and_glob() {
    let kernel = Kernel::new();
    kernel.boot().await.unwrap();
    let reg = kernel.root().get::<ToolRegistry>().expect("registry");
    let names: Vec<String> = reg.schemas(None).into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"grep".to_string()) && names.contains(&"glob".to_string()),
        "{names:?}"
    );
    kernel.dispose().await;
}

#[test]
fn declared_effects_and_snake_case_settings() {
    use dsh_tools::ToolEffects;
    let kernel = Kernel::new();
    let reg = ToolRegistry::new(kernel.root().clone());
    for r in register_tools(kernel.root(), &reg, SearchConfig::default()).unwrap() {
        r.detach();
    }
    for tool in ["grep", "glob"] {
        assert_eq!(
            reg.effects(tool, None),
            Some(ToolEffects::READ_ONLY.parallel_safe()),
            "{tool}"
        );
    }
    let c: SearchConfig = serde_json::from_value(json!({"grep_max_matches": 5})).unwrap();
    assert_eq!(c.grep_max_matches, 5);
    assert_eq!(c.glob_max_results, SearchConfig::default().glob_max_results);
    assert!(serde_json::from_value::<SearchConfig>(json!({"grepMaxMatches": 5})).is_err());
}
