//! The `Tool` trait: schemas, typed args validation (same errors as `define_tool`), render,
//! meta, state on `self`, declared effects through the registry, parallel-safety.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use dsh_kernel::ErrorCode;
mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::setup;
use dsh_llm::ContentBlock;
use dsh_tools::{
    ExecutionMode, Tool, ToolEffects, ToolExecutionInput, ToolFailure, ToolRunContext,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct CountArgs {
    /// Amount to add.
    by: u64,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct CountOut {
    total: u64,
}

/// State on `self`: a counter shared by every call.
struct Counter {
    total: AtomicU64,
}

impl Tool for Counter {
    const NAME: &'static str = "count";
    type Args = CountArgs;
    type Output = CountOut;

    fn description(&self) -> String {
        "Adds to a counter.".into()
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::WRITES_FILES.target("path")
    }

    async fn call(&self, args: CountArgs, _cx: ToolRunContext) -> Result<CountOut, ToolFailure> {
        if args.by == 0 {
            return Err(ToolFailure::message("by must be positive"));
        }
        let total = self.total.fetch_add(args.by, Ordering::SeqCst) + args.by;
        Ok(CountOut { total })
    }

    fn render(&self, args: &CountArgs, out: &CountOut) -> Vec<ContentBlock> {
        vec![ContentBlock::text(format!("+{} = {}", args.by, out.total))]
    }

    fn meta(&self, _args: &CountArgs, out: &CountOut) -> Option<Value> {
        Some(json!({"total": out.total}))
    }

    fn concurrency_safe(&self, args: &CountArgs) -> bool {
        args.by == 1
    }
}

struct Plain;

impl Tool for Plain {
    const NAME: &'static str = "plain";
    type Args = CountArgs;
    type Output = CountOut;

    fn description(&self) -> String {
        "Default rendering.".into()
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::READ_ONLY.parallel_safe()
    }

    async fn call(&self, args: CountArgs, _cx: ToolRunContext) -> Result<CountOut, ToolFailure> {
        Ok(CountOut { total: args.by })
    }
}

fn counter() -> Counter {
    Counter {
        total: AtomicU64::new(0),
    }
}

#[tokio::test]
async fn trait_tool_runs_with_state_render_and_meta() {
    let f = setup();
    f.reg.register_tool(&f.root, counter()).unwrap().detach();
    let schema = &f.reg.schemas(None)[0];
    assert_eq!(schema.name, "count");
    assert_eq!(schema.description, "Adds to a counter.");
    assert_eq!(
        schema.parameters,
        json!({"type": "object", "properties": {"by": {"type": "integer", "description": "Amount to add."}},
               "required": ["by"], "additionalProperties": false})
    );
    let r = f
        .reg
        .execute(ToolExecutionInput::new("c1", "count", json!({"by": 2})))
        .await;
    assert_eq!(
        r.to_json(),
        json!({"isError": false, "value": {"total": 2}, "meta": {"total": 2},
               "content": [{"type": "text", "text": "+2 = 2"}]})
    );
    let r = f
        .reg
        .execute(ToolExecutionInput::new("c2", "count", json!({"by": 3})))
        .await;
    assert_eq!(r.value(), Some(&json!({"total": 5})));
    let r = f
        .reg
        .execute(ToolExecutionInput::new("c3", "count", json!({"by": 0})))
        .await;
    assert_eq!(
        r.to_json(),
        json!({"isError": true, "error": {"message": "by must be positive"},
               "content": [{"type": "text", "text": "Error: by must be positive"}]})
    );
}

#[tokio::test]
async fn trait_tool_args_errors_name_the_path() {
    let f = setup();
    f.reg.register_tool(&f.root, counter()).unwrap().detach();
    let r = f
        .reg
        .execute(ToolExecutionInput::new("c1", "count", json!({"by": "x"})))
        .await;
    assert_eq!(
        r.to_json(),
        json!({"isError": true,
               "error": {"message": "invalid arguments for tool \"count\": at `by`: invalid type: string \"x\", expected u64",
                         "info": {"name": "ToolArgsError", "code": "INVALID_ARGS"}},
               "content": [{"type": "text", "text": "Error: invalid arguments for tool \"count\": at `by`: invalid type: string \"x\", expected u64"}]})
    );
}

#[tokio::test]
async fn default_render_effects_and_parallel_safety() {
    let f = setup();
    dsh_tools::register(&f.root, Plain).unwrap_err(); // no ToolRegistry service provided
    f.reg.register_tool(&f.root, Plain).unwrap().detach();
    f.reg.register_tool(&f.root, counter()).unwrap().detach();
    let r = f
        .reg
        .execute(ToolExecutionInput::new("c1", "plain", json!({"by": 7})))
        .await;
    assert_eq!(r.content(), &[ContentBlock::text("{\"total\":7}")]);
    assert_eq!(
        f.reg.effects("plain", None),
        Some(ToolEffects::READ_ONLY.parallel_safe())
    );
    assert_eq!(
        f.reg.effects("count", None),
        Some(ToolEffects::WRITES_FILES.target("path"))
    );
    assert_eq!(f.reg.effects("missing", None), None);
    let mode = |name: &str, args: Value| f.reg.execution_mode(name, &args, None);
    assert_eq!(mode("plain", json!({"by": 1})), ExecutionMode::Parallel);
    assert_eq!(mode("count", json!({"by": 1})), ExecutionMode::Parallel);
    assert_eq!(mode("count", json!({"by": 2})), ExecutionMode::Exclusive);
    assert_eq!(mode("count", json!({})), ExecutionMode::Exclusive);
}

#[test]
fn bad_name_is_rejected() {
    struct Bad;
    impl Tool for Bad {
        const NAME: &'static str = "no spaces";
        type Args = CountArgs;
        type Output = CountOut;
        fn description(&self) -> String {
            String::new()
        }
        fn effects(&self) -> ToolEffects {
            ToolEffects::READ_ONLY
        }
        async fn call(&self, a: CountArgs, _cx: ToolRunContext) -> Result<CountOut, ToolFailure> {
            Ok(CountOut { total: a.by })
        }
    }
    let e = dsh_tools::into_definition(Bad).err().unwrap();
    assert_eq!(e.code(), "INVALID_TOOL_NAME");
}
