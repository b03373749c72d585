//! Integration tests of the system-prompt service: ordering, shadowing, duplicates, the
//! complete-section rule, the assemble waterfall, suppression, tool order, strict rendering
//! (every error case) and change notifications. Exact strings throughout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dsh_kernel::{Context, ErrorCode, Kernel, ScopeKey};
use dsh_llm::ToolSchema;
use dsh_system_prompt::*;

fn service(config: SystemPromptConfig) -> (Kernel, Context, Arc<SystemPrompt>) {
    let kernel = Kernel::new();
    let ctx = kernel.root().child("dsh-system-prompt").unwrap();
    let sp = SystemPrompt::new(ctx.clone(), &config).unwrap();
    (kernel, ctx, sp)
}

fn default_service() -> (Kernel, Context, Arc<SystemPrompt>) {
    service(SystemPromptConfig::default())
}

fn names(a: &PromptAssembly) -> Vec<&str> {
    a.sections.iter().map(|s| s.name.as_str()).collect()
}

fn assembly(sections: &[(&str, &str)], vars: &[(&str, Option<&str>)]) -> PromptAssembly {
    PromptAssembly {
        sections: sections
            .iter()
            .map(|(n, t)| AssembledSection::new(*n, *t))
            .collect(),
        contexts: Vec::new(),
        tools: Vec::new(),
        variables: vars
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.map(str::to_owned)))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn tool(name: &str) -> ToolSchema {
    ToolSchema {
        name: name.to_owned(),
        description: format!("{name} tool"),
        parameters: serde_json::json!({"type": "object"}),
    }
}

#[tokio::test]
async fn default_assembly_has_identity_and_empty_persona() {
    let (_k, _ctx, sp) = default_service();
    let a = sp.assemble(AssembleContext::default()).await.unwrap();
    assert_eq!(
        a.sections,
        vec![
            AssembledSection::new("harness:identity", "You are an AI agent powered by dsh."),
            AssembledSection::new("deployment:persona", ""),
        ]
    );
    assert_eq!(
        render_prompt(&a).unwrap(),
        "You are an AI agent powered by dsh."
    );
    assert!(a.contexts.is_empty());
    assert!(a.tools.is_empty());
    assert!(a.variables.is_empty());
}

#[tokio::test]
async fn config_persona_and_no_identity() {
    let (_k, ctx, sp) = service(SystemPromptConfig {
        include_harness_identity: false,
        persona: "You help {{user}}.".to_owned(),
        ..SystemPromptConfig::default()
    });
    sp.variable_value(&ctx, "user", "Ada").unwrap().detach();
    let a = sp.assemble(AssembleContext::default()).await.unwrap();
    assert_eq!(names(&a), vec!["deployment:persona"]);
    assert_eq!(render_prompt(&a).unwrap(), "You help Ada.");
}

#[tokio::test]
async fn sections_sort_by_order_stably_and_render_joined() {
    let (_k, ctx, sp) = default_service();
    sp.section(&ctx, PromptSection::new("tools:b", 150.0, "B guidance"))
        .unwrap()
        .detach();
    sp.section(&ctx, PromptSection::new("tools:a", 100.0, "A guidance"))
        .unwrap()
        .detach();
    sp.section(&ctx, PromptSection::new("tools:a2", 100.0, "A2 guidance"))
        .unwrap()
        .detach();
    sp.section(&ctx, PromptSection::new("pre", -50.5, "Before persona"))
        .unwrap()
        .detach();
    sp.section(
        &ctx,
        PromptSection::new(
            "dyn",
            200.0,
            PromptText::dynamic(|cx| format!("scoped={}", cx.scope.is_some())),
        ),
    )
    .unwrap()
    .detach();
    let a = sp.assemble(AssembleContext::default()).await.unwrap();
    assert_eq!(
        names(&a),
        vec![
            "harness:identity",
            "pre",
            "deployment:persona",
            "tools:a",
            "tools:a2",
            "tools:b",
            "dyn"
        ]
    );
    assert_eq!(
        render_prompt(&a).unwrap(),
        "You are an AI agent powered by dsh.\n\nBefore persona\n\nA guidance\n\nA2 guidance\n\nB guidance\n\nscoped=false"
    );
}

#[tokio::test]
async fn non_finite_order_is_rejected() {
    let (_k, ctx, sp) = default_service();
    let e = sp
        .section(&ctx, PromptSection::new("x", f64::NAN, "t"))
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_PROMPT_ORDER");
    assert_eq!(
        e.to_string(),
        "prompt section \"x\" order must be a finite number"
    );
    let e = sp
        .context(&ctx, PromptContext::new("c", f64::INFINITY, "t"))
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_PROMPT_ORDER");
    assert_eq!(
        e.to_string(),
        "prompt context \"c\" order must be a finite number"
    );
}

#[tokio::test]
async fn duplicates_in_one_layer_are_errors_across_layers_shadow() {
    let (k, ctx, sp) = default_service();
    let e = sp
        .section(&ctx, PromptSection::new("deployment:persona", 0.0, "again"))
        .unwrap_err();
    assert_eq!(e.code(), "DUPLICATE_PROMPT_ENTRY");
    assert_eq!(
        e.to_string(),
        "prompt section \"deployment:persona\" is already registered in this global layer (register through the agent's scope for a per-agent override)"
    );
    sp.context(&ctx, PromptContext::new("c", 1.0, "x"))
        .unwrap()
        .detach();
    assert_eq!(
        sp.context(&ctx, PromptContext::new("c", 2.0, "y"))
            .unwrap_err()
            .code(),
        "DUPLICATE_PROMPT_ENTRY"
    );
    sp.variable_value(&ctx, "v", "1").unwrap().detach();
    assert_eq!(
        sp.variable_value(&ctx, "v", "2").unwrap_err().code(),
        "DUPLICATE_PROMPT_ENTRY"
    );

    // The same name in an agent scope shadows; twice in that scope is an error.
    let key = ScopeKey::new("agent-1");
    let agent = k.root().tagged(key.clone(), "agent-1").unwrap();
    sp.section(
        &agent,
        PromptSection::new("deployment:persona", 0.0, "Agent persona"),
    )
    .unwrap()
    .detach();
    let e = sp
        .section(
            &agent,
            PromptSection::new("deployment:persona", 0.0, "again"),
        )
        .unwrap_err();
    assert_eq!(e.code(), "DUPLICATE_PROMPT_ENTRY");
    assert_eq!(
        e.to_string(),
        "prompt section \"deployment:persona\" is already registered in this scope"
    );
}

#[tokio::test]
async fn scoped_entries_shadow_global_in_place_and_only_for_their_scope() {
    let (k, ctx, sp) = default_service();
    sp.section(&ctx, PromptSection::new("late", 0.0, "Global late"))
        .unwrap()
        .detach();
    sp.variable_value(&ctx, "model", "global-model")
        .unwrap()
        .detach();
    sp.section(&ctx, PromptSection::new("model", 10.0, "Model: {{model}}"))
        .unwrap()
        .detach();
    let key = ScopeKey::new("agent-1");
    let agent = k.root().tagged(key.clone(), "agent-1").unwrap();
    // Same order as `late`: the shadow keeps the global persona's place (before `late`).
    sp.section(
        &agent,
        PromptSection::new("deployment:persona", 0.0, "Agent persona"),
    )
    .unwrap()
    .detach();
    sp.section(&agent, PromptSection::new("agent-only", -1.0, "Agent only"))
        .unwrap()
        .detach();
    sp.variable_value(&agent, "model", "agent-model")
        .unwrap()
        .detach();

    let global = sp.assemble(AssembleContext::default()).await.unwrap();
    assert_eq!(
        render_prompt(&global).unwrap(),
        "You are an AI agent powered by dsh.\n\nGlobal late\n\nModel: global-model"
    );
    let scoped = sp
        .assemble(AssembleContext::for_scope(Some(key.clone())))
        .await
        .unwrap();
    assert_eq!(
        names(&scoped),
        vec![
            "harness:identity",
            "agent-only",
            "deployment:persona",
            "late",
            "model"
        ]
    );
    assert_eq!(
        render_prompt(&scoped).unwrap(),
        "You are an AI agent powered by dsh.\n\nAgent only\n\nAgent persona\n\nGlobal late\n\nModel: agent-model"
    );

    // A child key inherits the parent's layer; its own layer wins over it.
    let child_key = ScopeKey::new("sub-agent");
    child_key.bind_parent(&key).unwrap();
    let child = k.root().tagged(child_key.clone(), "sub-agent").unwrap();
    sp.section(
        &child,
        PromptSection::new("deployment:persona", 0.0, "Sub persona"),
    )
    .unwrap()
    .detach();
    let sub = sp
        .assemble(AssembleContext::for_scope(Some(child_key)))
        .await
        .unwrap();
    assert_eq!(
        render_prompt(&sub).unwrap(),
        "You are an AI agent powered by dsh.\n\nAgent only\n\nSub persona\n\nGlobal late\n\nModel: agent-model"
    );

    // Another agent sees only globals.
    let other = sp
        .assemble(AssembleContext::for_scope(Some(ScopeKey::new("agent-2"))))
        .await
        .unwrap();
    assert_eq!(
        render_prompt(&other).unwrap(),
        render_prompt(&global).unwrap()
    );
}

#[tokio::test]
async fn registrations_undo_on_drop_and_scope_dispose_and_emit_change() {
    let (k, ctx, sp) = default_service();
    let changes = Arc::new(AtomicUsize::new(0));
    let c = changes.clone();
    k.root()
        .on_emit::<SystemPromptChange>(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap()
        .detach();
    let reg = sp
        .section(&ctx, PromptSection::new("temp", 5.0, "Temporary"))
        .unwrap();
    assert_eq!(changes.load(Ordering::SeqCst), 1);
    assert_eq!(
        names(&sp.assemble(AssembleContext::default()).await.unwrap()),
        vec!["harness:identity", "deployment:persona", "temp"]
    );
    drop(reg);
    assert_eq!(changes.load(Ordering::SeqCst), 2);
    assert_eq!(
        names(&sp.assemble(AssembleContext::default()).await.unwrap()),
        vec!["harness:identity", "deployment:persona"]
    );

    let key = ScopeKey::new("agent");
    let agent = k.root().tagged(key.clone(), "agent").unwrap();
    sp.section(
        &agent,
        PromptSection::new("deployment:persona", 0.0, "Scoped"),
    )
    .unwrap()
    .detach();
    sp.context(&agent, PromptContext::new("ctx", 0.0, "Scoped ctx"))
        .unwrap()
        .detach();
    assert_eq!(changes.load(Ordering::SeqCst), 4);
    agent.dispose().await;
    assert_eq!(changes.load(Ordering::SeqCst), 6);
    let a = sp
        .assemble(AssembleContext::for_scope(Some(key)))
        .await
        .unwrap();
    assert_eq!(
        a.sections[1],
        AssembledSection::new("deployment:persona", "")
    );
    assert!(a.contexts.is_empty());
    // A disposed scope accepts no registration.
    let e = sp
        .section(&agent, PromptSection::new("x", 0.0, "x"))
        .unwrap_err();
    assert_eq!(e.code(), "INACTIVE_SCOPE");
}

#[tokio::test]
async fn complete_section_becomes_the_only_section() {
    let (k, ctx, sp) = default_service();
    sp.section(&ctx, PromptSection::new("extra", 5.0, "Extra"))
        .unwrap()
        .detach();
    sp.context(&ctx, PromptContext::new("c", 0.0, "Ctx"))
        .unwrap()
        .detach();
    let key = ScopeKey::new("agent");
    let agent = k.root().tagged(key.clone(), "agent").unwrap();
    sp.section(
        &agent,
        PromptSection::new("preset:prompt", 50.0, "Only this.").complete(),
    )
    .unwrap()
    .detach();
    // A listener that adds a section cannot escape the complete rule.
    let agent_for_listener = agent.clone();
    agent_for_listener
        .on_waterfall::<SystemPromptAssemble, _, _>(|mut req, next| async move {
            req.assembly
                .sections
                .push(AssembledSection::new("added", "Added"));
            next.run(req).await
        })
        .unwrap()
        .detach();
    let a = sp
        .assemble(AssembleContext::for_scope(Some(key.clone())))
        .await
        .unwrap();
    assert_eq!(
        a.sections,
        vec![AssembledSection::new("preset:prompt", "Only this.")]
    );
    assert_eq!(
        a.contexts,
        vec![AssembledSection::new("c", "Ctx")],
        "contexts survive a complete prompt"
    );
    assert_eq!(render_prompt(&a).unwrap(), "Only this.");

    // Two effective complete sections fail.
    sp.section(
        &agent,
        PromptSection::new("second", 60.0, "Also").complete(),
    )
    .unwrap()
    .detach();
    let e = sp
        .assemble(AssembleContext::for_scope(Some(key)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "MULTIPLE_COMPLETE_SECTIONS");
    assert_eq!(
        e.to_string(),
        "multiple complete prompt sections are active: preset:prompt, second"
    );
    // Globally nothing is complete.
    let g = sp.assemble(AssembleContext::default()).await.unwrap();
    assert_eq!(
        names(&g),
        vec!["harness:identity", "deployment:persona", "extra"]
    );
}

#[tokio::test]
async fn assemble_waterfall_is_authoritative_and_scope_filtered() {
    let (k, ctx, sp) = default_service();
    ctx.on_waterfall::<SystemPromptAssemble, _, _>(|req, next| async move {
        let mut out = next.run(req).await?;
        out.sections.push(AssembledSection::new(
            "global-listener",
            "From global listener",
        ));
        Ok(out)
    })
    .unwrap()
    .detach();
    let key = ScopeKey::new("agent");
    let agent = k.root().tagged(key.clone(), "agent").unwrap();
    agent
        .on_waterfall::<SystemPromptAssemble, _, _>(|req, _next| async move {
            // Short-circuit with a replacement.
            let mut a = req.assembly;
            a.sections.retain(|s| s.name != "harness:identity");
            a.variables.insert("x".to_owned(), Some("1".to_owned()));
            Ok(a)
        })
        .unwrap()
        .detach();
    let g = sp.assemble(AssembleContext::default()).await.unwrap();
    assert_eq!(
        render_prompt(&g).unwrap(),
        "You are an AI agent powered by dsh.\n\nFrom global listener"
    );
    let s = sp
        .assemble(AssembleContext::for_scope(Some(key)))
        .await
        .unwrap();
    assert_eq!(render_prompt(&s).unwrap(), "From global listener");
    assert_eq!(s.variables.get("x"), Some(&Some("1".to_owned())));

    // A failing listener fails the assembly.
    let failing = k.root().tagged(ScopeKey::new("bad"), "bad").unwrap();
    failing
        .on_waterfall::<SystemPromptAssemble, _, _>(|_req, _next| async move { Err("boom".into()) })
        .unwrap()
        .detach();
    let e = sp
        .assemble(AssembleContext::for_scope(failing.key().cloned()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "ASSEMBLE_LISTENER_FAILED");
    assert_eq!(
        e.to_string(),
        "system-prompt/assemble listener failed: boom"
    );
}

#[tokio::test]
async fn contexts_sort_render_and_suppress_per_scope() {
    let (k, ctx, sp) = default_service();
    sp.context(
        &ctx,
        PromptContext::new("sandbox:policy", 10.0, "Policy {{mode}}."),
    )
    .unwrap()
    .detach();
    sp.context(
        &ctx,
        PromptContext::new("approval:policy", 20.0, "Approval."),
    )
    .unwrap()
    .detach();
    sp.context(&ctx, PromptContext::new("empty", 5.0, ""))
        .unwrap()
        .detach();
    sp.variable_value(&ctx, "mode", "read-only")
        .unwrap()
        .detach();
    let a = sp.assemble(AssembleContext::default()).await.unwrap();
    assert_eq!(
        a.contexts,
        vec![
            AssembledSection::new("empty", ""),
            AssembledSection::new("sandbox:policy", "Policy {{mode}}."),
            AssembledSection::new("approval:policy", "Approval."),
        ]
    );
    let rendered = render_contexts(&a).unwrap();
    assert_eq!(
        rendered,
        vec![
            dsh_llm::ContextSection {
                name: "sandbox:policy".to_owned(),
                text: "Policy read-only.".to_owned()
            },
            dsh_llm::ContextSection {
                name: "approval:policy".to_owned(),
                text: "Approval.".to_owned()
            },
        ]
    );
    assert_eq!(
        join_context_sections(&rendered),
        "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\nPolicy read-only.\n\nApproval."
    );
    // Contexts never enter the system prompt.
    assert_eq!(
        render_prompt(&a).unwrap(),
        "You are an AI agent powered by dsh."
    );

    let key = ScopeKey::new("agent");
    let agent = k.root().tagged(key.clone(), "agent").unwrap();
    let sup = sp.suppress_runtime_context(&agent).unwrap();
    assert!(
        sp.assemble(AssembleContext::for_scope(Some(key.clone())))
            .await
            .unwrap()
            .contexts
            .is_empty()
    );
    assert_eq!(
        sp.assemble(AssembleContext::default())
            .await
            .unwrap()
            .contexts
            .len(),
        3
    );
    drop(sup);
    assert_eq!(
        sp.assemble(AssembleContext::for_scope(Some(key)))
            .await
            .unwrap()
            .contexts
            .len(),
        3
    );

    let (_k2, ctx2, sp2) = service(SystemPromptConfig {
        include_runtime_context: false,
        ..SystemPromptConfig::default()
    });
    sp2.context(&ctx2, PromptContext::new("c", 0.0, "x"))
        .unwrap()
        .detach();
    assert!(
        sp2.assemble(AssembleContext::default())
            .await
            .unwrap()
            .contexts
            .is_empty()
    );
}

#[tokio::test]
async fn variables_scoped_shadow_and_unset_values() {
    let (k, ctx, sp) = default_service();
    sp.variable(&ctx, "cwd", |_| None).unwrap().detach();
    sp.variable(&ctx, "provider", |cx| {
        Some(
            if cx.scope.is_some() {
                "scoped"
            } else {
                "global"
            }
            .to_owned(),
        )
    })
    .unwrap()
    .detach();
    let e = sp.variable_value(&ctx, "Bad", "x").unwrap_err();
    assert_eq!(e.code(), "INVALID_VARIABLE_NAME");
    assert_eq!(
        e.to_string(),
        "invalid prompt variable name \"Bad\" (must match [a-z][a-z0-9_]*)"
    );
    let key = ScopeKey::new("agent");
    let agent = k.root().tagged(key.clone(), "agent").unwrap();
    sp.variable_value(&agent, "cwd", "/work").unwrap().detach();
    let g = sp.assemble(AssembleContext::default()).await.unwrap();
    assert_eq!(
        g.variables,
        BTreeMap::from([
            ("cwd".to_owned(), None),
            ("provider".to_owned(), Some("global".to_owned())),
        ])
    );
    let s = sp
        .assemble(AssembleContext::for_scope(Some(key)))
        .await
        .unwrap();
    assert_eq!(
        s.variables,
        BTreeMap::from([
            ("cwd".to_owned(), Some("/work".to_owned())),
            ("provider".to_owned(), Some("scoped".to_owned())),
        ])
    );
}

#[test]
fn strict_rendering_cases() {
    let vars: &[(&str, Option<&str>)] = &[
        ("name", Some("Ada")),
        ("empty", None),
        ("x", Some("{{name}}")),
    ];
    let ok = |t: &str| render_prompt(&assembly(&[("s", t)], vars)).unwrap();
    let err = |t: &str| render_prompt(&assembly(&[("s", t)], vars)).unwrap_err();

    assert_eq!(ok("Hello {{name}}!"), "Hello Ada!");
    assert_eq!(ok("{{name}}{{name}}"), "AdaAda");
    // Substituted values are not re-scanned.
    assert_eq!(ok("v={{x}}"), "v={{name}}");
    // A lone `{{` with no later `}}` is literal.
    assert_eq!(ok("a {{ b"), "a {{ b");
    assert_eq!(ok("a {{name}} then {{ open"), "a Ada then {{ open");
    assert_eq!(ok("a {{b}"), "a {{b}");
    assert_eq!(ok("just }} here"), "just }} here");

    let e = err("Hi {{nobody}}");
    assert_eq!(e.code(), "UNKNOWN_PROMPT_VARIABLE");
    assert_eq!(
        e.to_string(),
        "unknown prompt variable \"{{nobody}}\" in section \"s\"; registered variables: empty, name, x"
    );
    let e = err("Hi {{empty}}");
    assert_eq!(e.code(), "PROMPT_VARIABLE_UNSET");
    assert_eq!(
        e.to_string(),
        "prompt variable \"{{empty}}\" has no value for this assembly (section \"s\")"
    );
    for bad in [
        "{{Name}}",
        "{{ name }}",
        "{{}}",
        "{{1a}}",
        "{{na-me}}",
        "{{{name}}}",
        "{{a {{name}}",
        "{{ open }} later",
    ] {
        let e = err(bad);
        assert_eq!(e.code(), "MALFORMED_PROMPT_VARIABLE", "case {bad:?}");
    }
    assert_eq!(
        err("x {{na-me}} y").to_string(),
        "malformed prompt variable reference at \"{{na-me}} y\" in section \"s\" (references are complete simple {{name}} groups)"
    );
    // `{{` then a brace-broken group with a later `}}`.
    assert_eq!(err("{{a}b}}").code(), "MALFORMED_PROMPT_VARIABLE");

    // Empty sections are dropped; all empty ⇒ "".
    assert_eq!(
        render_prompt(&assembly(
            &[("a", ""), ("b", "B"), ("c", ""), ("d", "D")],
            vars
        ))
        .unwrap(),
        "B\n\nD"
    );
    assert_eq!(render_prompt(&assembly(&[("a", "")], vars)).unwrap(), "");
    // A section that renders empty only after substitution is dropped too.
    assert_eq!(
        render_prompt(&assembly(
            &[("a", "{{blank}}"), ("b", "B")],
            &[("blank", Some(""))]
        ))
        .unwrap(),
        "B"
    );
    // Context errors name the context.
    let mut a = assembly(&[], vars);
    a.contexts.push(AssembledSection::new("ctx:x", "{{nope}}"));
    assert_eq!(
        render_contexts(&a).unwrap_err().to_string(),
        "unknown prompt variable \"{{nope}}\" in context \"ctx:x\"; registered variables: empty, name, x"
    );
}

#[tokio::test]
async fn tools_lexicographic_and_tool_order() {
    let (k, ctx, sp) = default_service();
    sp.tools(&ctx, |_| ToolProviderResult {
        schemas: vec![tool("write"), tool("bash"), tool("read")],
        known_names: None,
    })
    .unwrap()
    .detach();
    let key = ScopeKey::new("agent");
    let agent = k.root().tagged(key.clone(), "agent").unwrap();
    sp.tools(&agent, |_| ToolProviderResult {
        schemas: vec![tool("agent_tool")],
        known_names: None,
    })
    .unwrap()
    .detach();
    let g = sp.assemble(AssembleContext::default()).await.unwrap();
    let tool_names =
        |a: &PromptAssembly| a.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(tool_names(&g), vec!["bash", "read", "write"]);
    let s = sp
        .assemble(AssembleContext::for_scope(Some(key)))
        .await
        .unwrap();
    assert_eq!(tool_names(&s), vec!["agent_tool", "bash", "read", "write"]);

    let (_k2, ctx2, sp2) = service(SystemPromptConfig {
        tool_order: Some(vec![
            "read".to_owned(),
            "<unlisted-tools>".to_owned(),
            "hidden".to_owned(),
            "bash".to_owned(),
        ]),
        ..SystemPromptConfig::default()
    });
    sp2.tools(&ctx2, |_| ToolProviderResult {
        schemas: vec![tool("write"), tool("bash"), tool("read"), tool("edit")],
        known_names: Some(vec![
            "write".to_owned(),
            "bash".to_owned(),
            "read".to_owned(),
            "edit".to_owned(),
            "hidden".to_owned(),
        ]),
    })
    .unwrap()
    .detach();
    let a = sp2.assemble(AssembleContext::default()).await.unwrap();
    assert_eq!(tool_names(&a), vec!["read", "edit", "write", "bash"]);

    // Unknown names in tool_order fail at assembly.
    let (_k3, ctx3, sp3) = service(SystemPromptConfig {
        tool_order: Some(vec!["ghost".to_owned(), "<unlisted-tools>".to_owned()]),
        ..SystemPromptConfig::default()
    });
    sp3.tools(&ctx3, |_| ToolProviderResult {
        schemas: vec![tool("bash")],
        known_names: None,
    })
    .unwrap()
    .detach();
    let e = sp3.assemble(AssembleContext::default()).await.unwrap_err();
    assert_eq!(e.code(), "UNKNOWN_TOOL_IN_ORDER");
    assert_eq!(
        e.to_string(),
        "tool_order lists unregistered tool(s) ghost; known tools: bash"
    );
    // A provider returning the reserved name fails.
    sp.tools(&ctx, |_| ToolProviderResult {
        schemas: vec![tool("<unlisted-tools>")],
        known_names: None,
    })
    .unwrap()
    .detach();
    assert_eq!(
        sp.assemble(AssembleContext::default())
            .await
            .unwrap_err()
            .code(),
        "RESERVED_TOOL_NAME"
    );
}

#[test]
fn invalid_tool_order_config() {
    let kernel = Kernel::new();
    let ctx = kernel.root().child("sp").unwrap();
    let e = SystemPrompt::new(
        ctx.clone(),
        &SystemPromptConfig {
            tool_order: Some(vec!["a".to_owned()]),
            ..SystemPromptConfig::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.code(), "INVALID_TOOL_ORDER");
    assert_eq!(
        e.to_string(),
        "invalid tool_order: the \"<unlisted-tools>\" rest entry is missing"
    );
    let e = SystemPrompt::new(
        ctx,
        &SystemPromptConfig {
            tool_order: Some(vec![
                "a".to_owned(),
                "<unlisted-tools>".to_owned(),
                "a".to_owned(),
            ]),
            ..SystemPromptConfig::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid tool_order: \"a\" is listed more than once"
    );
}

#[test]
fn settings_section_shape() {
    let c: SystemPromptConfig = serde_json::from_value(serde_json::json!({
        "persona": "P",
        "include_runtime_context": false
    }))
    .unwrap();
    assert_eq!(
        c,
        SystemPromptConfig {
            include_harness_identity: true,
            include_runtime_context: false,
            persona: "P".to_owned(),
            tool_order: None,
        }
    );
    assert!(
        serde_json::from_value::<SystemPromptConfig>(serde_json::json!({"personaa": "x"})).is_err()
    );
}

#[tokio::test]
async fn plugin_provides_the_service_from_settings() {
    use dsh_kernel::Settings;
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(Settings::new().with_section(
            "dsh-system-prompt",
            serde_json::json!({"persona": "Deployment persona."}),
        )))
        .unwrap()
        .detach();
    let descs: Vec<_> = dsh_kernel::linked_plugins()
        .into_iter()
        .filter(|d| d.id == "dsh-system-prompt")
        .collect();
    assert_eq!(descs.len(), 1);
    kernel.boot_with(&descs).await.unwrap();
    let sp = kernel.root().require::<SystemPrompt>().unwrap();
    let a = sp.assemble(AssembleContext::default()).await.unwrap();
    assert_eq!(
        render_prompt(&a).unwrap(),
        "You are an AI agent powered by dsh.\n\nDeployment persona."
    );
}

#[tokio::test]
async fn prepare_step_renders_system_and_contexts() {
    let (_k, ctx, sp) = service(SystemPromptConfig {
        include_harness_identity: false,
        ..SystemPromptConfig::default()
    });
    let empty = sp.prepare_step(AssembleContext::default()).await.unwrap();
    assert_eq!(empty.system, None);
    assert!(empty.contexts.is_empty());
    sp.section(&ctx, PromptSection::new("a", 1.0, "Work in {{cwd}}."))
        .unwrap()
        .detach();
    sp.context(&ctx, PromptContext::new("c", 1.0, "Mode {{cwd}}."))
        .unwrap()
        .detach();
    sp.variable_value(&ctx, "cwd", "/w").unwrap().detach();
    let step = sp.prepare_step(AssembleContext::default()).await.unwrap();
    assert_eq!(step.system.as_deref(), Some("Work in /w."));
    assert_eq!(
        step.contexts,
        vec![dsh_llm::ContextSection {
            name: "c".to_owned(),
            text: "Mode /w.".to_owned()
        }]
    );
    sp.section(&ctx, PromptSection::new("bad", 2.0, "{{nope}}"))
        .unwrap()
        .detach();
    assert_eq!(
        sp.prepare_step(AssembleContext::default())
            .await
            .unwrap_err()
            .code(),
        "UNKNOWN_PROMPT_VARIABLE"
    );
}
