//! Registry: global vs scoped registration, shadowing, duplicates, unregistration, deterministic
//! schema order, restrictions, `tools/change`, execution mode, plugin provision.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use dsh_kernel::ErrorCode;
mod common;

use std::sync::Arc;

use common::*;
use dsh_tools::*;
use serde_json::json;

fn names(reg: &ToolRegistry, key: Option<&dsh_kernel::ScopeKey>) -> Vec<String> {
    reg.schemas(key).into_iter().map(|s| s.name).collect()
}

#[tokio::test]
async fn schemas_are_lexicographic_and_project_only_the_model_fields() {
    let f = setup();
    for n in ["zeta", "alpha", "Mid", "beta"] {
        f.reg.register(&f.root, echo(n)).unwrap().detach();
    }
    assert_eq!(names(&f.reg, None), ["Mid", "alpha", "beta", "zeta"]);
    let s = &f.reg.schemas(None)[1];
    assert_eq!(
        serde_json::to_value(s).unwrap(),
        json!({"name": "alpha", "description": "Echo the text.", "parameters": {
            "type": "object", "additionalProperties": false, "required": ["text"],
            "properties": {"text": {"type": "string"}}}})
    );
}

#[tokio::test]
async fn scoped_shadows_global_and_duplicates_per_layer_fail() {
    let f = setup();
    let a = agent(&f.root, "a", true);
    let b = agent(&f.root, "b", true);
    f.reg.register(&f.root, echo("echo")).unwrap().detach();
    let scoped = failing("echo", ToolFailure::message("scoped"));
    f.reg.register(&a.ctx, scoped.clone()).unwrap().detach();
    assert!(Arc::ptr_eq(
        &f.reg.get("echo", Some(&a.key)).unwrap(),
        &scoped
    ));
    assert!(!Arc::ptr_eq(
        &f.reg.get("echo", Some(&b.key)).unwrap(),
        &scoped
    ));
    assert!(!Arc::ptr_eq(&f.reg.get("echo", None).unwrap(), &scoped));
    let r = f
        .reg
        .execute(
            ToolExecutionInput::new("c", "echo", json!({"text": "x"}))
                .with_caller(a.caller.clone()),
        )
        .await;
    assert_eq!(r.error_message(), Some("scoped"));

    let e = f.reg.register(&f.root, echo("echo")).unwrap_err();
    assert_eq!(
        e,
        ToolsError::DuplicateTool {
            name: "echo".into()
        }
    );
    assert_eq!(e.code(), "DUPLICATE_TOOL");
    let e = f.reg.register(&a.ctx, echo("echo")).unwrap_err();
    assert_eq!(e.code(), "DUPLICATE_TOOL");
    // Another agent's layer is separate.
    f.reg.register(&b.ctx, echo("echo")).unwrap().detach();
}

#[tokio::test]
async fn scoped_tools_are_invisible_to_others_and_unknown_at_dispatch() {
    let f = setup();
    let a = agent(&f.root, "a", true);
    let b = agent(&f.root, "b", true);
    f.reg.register(&a.ctx, echo("mine")).unwrap().detach();
    assert_eq!(names(&f.reg, Some(&a.key)), ["mine"]);
    assert!(names(&f.reg, Some(&b.key)).is_empty());
    let r = f
        .reg
        .execute(
            ToolExecutionInput::new("c", "mine", json!({"text": "x"}))
                .with_caller(b.caller.clone()),
        )
        .await;
    assert_eq!(r.error_info().unwrap().code, "UNKNOWN_TOOL");
}

#[tokio::test]
async fn child_agent_keys_see_ancestor_scoped_tools() {
    let f = setup();
    let parent = agent(&f.root, "parent", true);
    let child = agent(&f.root, "child", true);
    child.key.bind_parent(&parent.key).unwrap();
    f.reg
        .register(&parent.ctx, echo("inherited"))
        .unwrap()
        .detach();
    assert_eq!(names(&f.reg, Some(&child.key)), ["inherited"]);
}

#[tokio::test]
async fn dropping_a_registration_or_disposing_the_scope_unregisters() {
    let f = setup();
    let changes = Trace::default();
    let c = changes.clone();
    f.root
        .on_emit::<ToolsChange>(move |ch| c.push(format!("{}:{}", ch.kind, ch.names.join(","))))
        .unwrap()
        .detach();
    let reg = f.reg.register(&f.root, echo("tmp")).unwrap();
    assert_eq!(names(&f.reg, None), ["tmp"]);
    drop(reg);
    assert!(names(&f.reg, None).is_empty());
    let a = agent(&f.root, "a", true);
    f.reg.register(&a.ctx, echo("scoped")).unwrap().detach();
    assert_eq!(names(&f.reg, Some(&a.key)), ["scoped"]);
    a.ctx.dispose().await;
    assert!(names(&f.reg, Some(&a.key)).is_empty());
    assert_eq!(
        changes.take(),
        [
            "registered:tmp",
            "unregistered:tmp",
            "registered:scoped",
            "unregistered:scoped"
        ]
    );
}

#[tokio::test]
async fn restrictions_intersect_and_exempt_own_scoped_tools() {
    let f = setup();
    for n in ["read", "write", "shell", "search"] {
        f.reg.register(&f.root, echo(n)).unwrap().detach();
    }
    let a = agent(&f.root, "a", true);
    f.reg.register(&a.ctx, echo("own")).unwrap().detach();
    let r1 = f
        .reg
        .restrict(
            &a.ctx,
            ToolRestriction {
                allow: Some(vec!["read".into(), "search".into(), "write".into()]),
                deny: None,
            },
        )
        .unwrap();
    assert_eq!(
        names(&f.reg, Some(&a.key)),
        ["own", "read", "search", "write"]
    );
    let r2 = f
        .reg
        .restrict(
            &a.ctx,
            ToolRestriction {
                allow: None,
                deny: Some(vec!["write".into()]),
            },
        )
        .unwrap();
    assert_eq!(names(&f.reg, Some(&a.key)), ["own", "read", "search"]);
    // Global view is unaffected.
    assert_eq!(names(&f.reg, None), ["read", "search", "shell", "write"]);
    // A restricted-out tool is unknown at dispatch.
    let r = f
        .reg
        .execute(
            ToolExecutionInput::new("c", "shell", json!({"text": "x"}))
                .with_caller(a.caller.clone()),
        )
        .await;
    assert_eq!(r.error_info().unwrap().code, "UNKNOWN_TOOL");
    drop(r2);
    assert_eq!(
        names(&f.reg, Some(&a.key)),
        ["own", "read", "search", "write"]
    );
    drop(r1);
    assert_eq!(
        names(&f.reg, Some(&a.key)),
        ["own", "read", "search", "shell", "write"]
    );
}

#[tokio::test]
async fn invalid_restrictions_are_refused() {
    let f = setup();
    f.reg.register(&f.root, echo("read")).unwrap().detach();
    let a = agent(&f.root, "a", true);
    let cases = [
        (
            &f.root,
            ToolRestriction {
                allow: Some(vec!["read".into()]),
                deny: None,
            },
            "invalid tool restriction: restrict() needs an agent (tagged) scope",
        ),
        (
            &a.ctx,
            ToolRestriction::default(),
            "invalid tool restriction: allow and deny are both empty",
        ),
        (
            &a.ctx,
            ToolRestriction {
                allow: Some(vec![]),
                deny: Some(vec![]),
            },
            "invalid tool restriction: allow and deny are both empty",
        ),
        (
            &a.ctx,
            ToolRestriction {
                allow: Some(vec!["".into()]),
                deny: None,
            },
            "invalid tool restriction: a tool name is empty",
        ),
        (
            &a.ctx,
            ToolRestriction {
                allow: None,
                deny: Some(vec!["nope".into()]),
            },
            "invalid tool restriction: unknown tool \"nope\"",
        ),
    ];
    for (ctx, r, msg) in cases {
        let e = f.reg.restrict(ctx, r).unwrap_err();
        assert_eq!(e.code(), "INVALID_RESTRICTION");
        assert_eq!(e.to_string(), msg);
    }
}

#[tokio::test]
async fn register_rejects_unsupported_hand_written_schemas() {
    struct Raw(dsh_llm::ToolSchema);
    impl ToolDefinition for Raw {
        fn schema(&self) -> &dsh_llm::ToolSchema {
            &self.0
        }
        fn execute(
            &self,
            _args: &serde_json::Value,
            _cx: ToolRunContext,
        ) -> futures::future::BoxFuture<'static, Result<ToolOutput, ToolFailure>> {
            Box::pin(async { Ok(ToolOutput::value(json!(null))) })
        }
    }
    let f = setup();
    let bad = Arc::new(Raw(dsh_llm::ToolSchema {
        name: "raw".into(),
        description: "d".into(),
        parameters: json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}}),
    }));
    let e = f.reg.register(&f.root, bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        "tool \"raw\": unsupported schema at /properties/n: keyword `maximum` is not supported"
    );
    let good = Arc::new(Raw(dsh_llm::ToolSchema {
        name: "raw".into(),
        description: "d".into(),
        parameters: json!({"type": "object"}),
    }));
    f.reg.register(&f.root, good).unwrap().detach();
    let r = f
        .reg
        .execute(ToolExecutionInput::new("c", "raw", json!({})))
        .await;
    assert_eq!(
        r.to_json(),
        json!({"isError": false, "value": null, "content": [{"type": "text", "text": "null"}]})
    );
}

#[tokio::test]
async fn execution_mode_is_parallel_only_for_exact_true() {
    let f = setup();
    f.reg.register(&f.root, echo("par")).unwrap().detach();
    f.reg
        .register(&f.root, failing("ex", ToolFailure::message("x")))
        .unwrap()
        .detach();
    let args = json!({"text": "x"});
    assert_eq!(
        f.reg.execution_mode("par", &args, None),
        ExecutionMode::Parallel
    );
    assert_eq!(
        f.reg.execution_mode("ex", &args, None),
        ExecutionMode::Exclusive
    );
    assert_eq!(
        f.reg.execution_mode("nope", &args, None),
        ExecutionMode::Exclusive
    );
    // Arguments that do not parse ⇒ exclusive.
    assert_eq!(
        f.reg.execution_mode("par", &json!("{bad"), None),
        ExecutionMode::Exclusive
    );
}

#[tokio::test]
async fn plugin_provides_the_registry() {
    use dsh_tools as _;
    let kernel = dsh_kernel::Kernel::new();
    kernel.boot().await.unwrap();
    let reg = kernel.root().get::<ToolRegistry>().unwrap();
    assert!(reg.schemas(None).is_empty());
    assert!(
        kernel
            .root()
            .get::<dsh_approval::ApprovalService>()
            .is_some()
    );
}

#[tokio::test]
async fn run_code_is_reserved() {
    let f = setup();
    let e = f.reg.register(&f.root, echo("run_code")).unwrap_err();
    assert_eq!(e.code(), "RESERVED_TOOL_NAME");
    assert_eq!(e.to_string(), "tool name \"run_code\" is reserved");
}
