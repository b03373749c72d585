//! Per-step cost of the system prompt: [`dsh_system_prompt::SystemPrompt::assemble`] over a
//! realistic registry (identity, persona, 30 guidance sections, 5 contexts, 3 variables, an
//! agent-scope shadow) and [`dsh_system_prompt::render_prompt`] of the result. The loop pays
//! both once per step, so each should stay well under 100 µs.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_kernel::{Kernel, ScopeKey};
use dsh_system_prompt::{
    AssembleContext, PromptContext, PromptSection, SystemPrompt, SystemPromptConfig,
    render_contexts, render_prompt,
};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let kernel = Kernel::new();
    let ctx = kernel
        .root()
        .child("dsh-system-prompt")
        .unwrap_or_else(|e| panic!("{e}"));
    let config = SystemPromptConfig {
        persona: "You are a careful coding agent working in {{cwd}} with {{model}}.".to_owned(),
        ..SystemPromptConfig::default()
    };
    let sp = SystemPrompt::new(ctx.clone(), &config).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..30 {
        let text = format!("Guidance {i}: {}", "use the tools precisely. ".repeat(20));
        sp.section(
            &ctx,
            PromptSection::new(format!("tools:{i}"), 100.0 + f64::from(i), text),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .detach();
    }
    for i in 0..5 {
        sp.context(
            &ctx,
            PromptContext::new(
                format!("ctx:{i}"),
                f64::from(i),
                format!("Policy {i} for {{{{provider}}}}."),
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .detach();
    }
    for (n, v) in [
        ("cwd", "/work/project"),
        ("model", "deepseek-v4"),
        ("provider", "deepseek"),
    ] {
        sp.variable_value(&ctx, n, v)
            .unwrap_or_else(|e| panic!("{e}"))
            .detach();
    }
    let key = ScopeKey::new("agent");
    let agent = kernel
        .root()
        .tagged(key.clone(), "agent")
        .unwrap_or_else(|e| panic!("{e}"));
    sp.section(
        &agent,
        PromptSection::new("deployment:persona", 0.0, "Agent persona in {{cwd}}."),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .detach();
    let cx = AssembleContext::for_scope(Some(key));

    c.bench_function("assemble_scoped_37_sections", |b| {
        b.iter(|| rt.block_on(sp.assemble(black_box(cx.clone()))))
    });
    let assembly = rt
        .block_on(sp.assemble(cx.clone()))
        .unwrap_or_else(|e| panic!("{e}"));
    c.bench_function("render_prompt_37_sections", |b| {
        b.iter(|| render_prompt(black_box(&assembly)))
    });
    c.bench_function("render_contexts_5", |b| {
        b.iter(|| render_contexts(black_box(&assembly)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
