//! The sample tool plugin boots, its tool runs through the pipeline with the declared effects,
//! and its `src/` stays within the 25-line authoring target.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::Kernel;
use dsh_tools::{ExecutionMode, ToolEffects, ToolExecutionInput, ToolRegistry};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn word_count_is_registered_by_the_plugin_and_runs() {
    let _ = dsh_testplugin_tool::WordCount;
    let kernel = Kernel::new();
    kernel.boot().await.unwrap();
    let reg = kernel.root().require::<ToolRegistry>().unwrap();
    let schemas = reg.schemas(None);
    let ours: Vec<_> = schemas.iter().filter(|s| s.name == "word_count").collect();
    assert_eq!(ours.len(), 1);
    assert_eq!(
        ours[0].parameters,
        json!({"type": "object", "description": "Arguments of `word_count`.",
               "properties": {"text": {"type": "string", "description": "The text whose words are counted."}},
               "required": ["text"]})
    );
    assert_eq!(
        reg.effects("word_count", None),
        Some(ToolEffects::READ_ONLY.parallel_safe())
    );
    assert_eq!(
        reg.execution_mode("word_count", &json!({"text": ""}), None),
        ExecutionMode::Parallel
    );
    let r = reg
        .execute(ToolExecutionInput::new(
            "c1",
            "word_count",
            json!({"text": "one two  three\nfour"}),
        ))
        .await;
    assert_eq!(
        r.to_json(),
        json!({"isError": false, "value": 4, "content": [{"type": "text", "text": "4"}]})
    );
}

/// Non-blank lines of `src/` that are not `//` comments (doc comments included).
#[test]
fn src_is_at_most_25_code_lines() {
    let src = include_str!("../src/lib.rs");
    let code = src
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count();
    assert_eq!(code, 21, "the authoring target is at most 25");
}
