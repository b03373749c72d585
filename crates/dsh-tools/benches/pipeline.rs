//! Pipeline overhead for a no-op tool with every `tools/*` waterfall empty (target ≤ 2 µs per
//! call), plus the same through the scheduler, and with one pass-through listener per stage.
//!
//! Behaviour notes: `docs/tools.md` ("Pipeline"). Each measurement runs `iters` calls inside one
//! `block_on` (current-thread runtime) and reports time per call, so runtime entry cost is not
//! counted. Benchmarks named `…/cpu` report the benchmark thread's on-CPU time (Linux
//! `/proc/thread-self/schedstat`, ns resolution; wall time where unavailable), which stays
//! meaningful on a shared, overloaded machine; the others report wall time.

#![allow(missing_docs, reason = "criterion bench harness")]
#![allow(clippy::unwrap_used, reason = "benchmark setup may panic on failure")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_kernel::Kernel;
use dsh_tools::scheduler::{NoHooks, SchedulerConfig, ToolCallRequest, run_tool_calls};
use dsh_tools::{
    ToolDefinition, ToolExecutionInput, ToolOutput, ToolRegistry, ToolRunContext, ToolsExecute,
    ToolsPostExecute, ToolsPreExecute, define_tool,
};
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, schemars::JsonSchema)]
struct NoArgs {}

struct RawNoop(dsh_llm::ToolSchema);

impl ToolDefinition for RawNoop {
    fn schema(&self) -> &dsh_llm::ToolSchema {
        &self.0
    }
    fn execute(
        &self,
        _args: &Value,
        _cx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, dsh_tools::ToolFailure>> {
        Box::pin(std::future::ready(Ok(ToolOutput {
            value: Value::Null,
            content: Some(Vec::new()),
            meta: None,
        })))
    }
}

fn registry(kernel: &Kernel) -> ToolRegistry {
    let reg = ToolRegistry::new(kernel.root().clone());
    let typed = define_tool::<NoArgs, ()>("noop", "Does nothing.")
        .execute(|_, _| async { Ok(()) })
        .unwrap();
    reg.register(kernel.root(), typed).unwrap().detach();
    let raw: Arc<dyn ToolDefinition> = Arc::new(RawNoop(dsh_llm::ToolSchema {
        name: "raw".into(),
        description: "Does nothing.".into(),
        parameters: json!({"type": "object"}),
    }));
    reg.register(kernel.root(), raw).unwrap().detach();
    reg
}

/// On-CPU nanoseconds of the current thread, if the kernel exposes them.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn per_call(rt: &tokio::runtime::Runtime, iters: u64, reg: &ToolRegistry, name: &str) -> Duration {
    per_call_with(rt, iters, reg, name, false)
}

fn per_call_cpu(
    rt: &tokio::runtime::Runtime,
    iters: u64,
    reg: &ToolRegistry,
    name: &str,
) -> Duration {
    per_call_with(rt, iters, reg, name, true)
}

fn per_call_with(
    rt: &tokio::runtime::Runtime,
    iters: u64,
    reg: &ToolRegistry,
    name: &str,
    cpu: bool,
) -> Duration {
    rt.block_on(async {
        let cpu0 = if cpu { thread_cpu_ns() } else { None };
        let start = Instant::now();
        for _ in 0..iters {
            let r = reg
                .execute(ToolExecutionInput::new("call_1", name, json!({})))
                .await;
            std::hint::black_box(r);
        }
        let wall = start.elapsed();
        match (cpu0, if cpu { thread_cpu_ns() } else { None }) {
            (Some(a), Some(b)) => Duration::from_nanos(b.saturating_sub(a)),
            _ => wall,
        }
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let kernel = Kernel::new();
    let reg = registry(&kernel);
    c.bench_function("pipeline/noop-typed/empty-waterfalls", |b| {
        b.iter_custom(|iters| per_call(&rt, iters, &reg, "noop"))
    });
    {
        // On-CPU time: flat sampling with long samples, so the scheduler-tick granularity of
        // the thread's CPU clock stays far below the sample length.
        let mut g = c.benchmark_group("pipeline-cpu");
        g.sampling_mode(criterion::SamplingMode::Flat)
            .sample_size(20)
            .measurement_time(Duration::from_secs(10));
        g.bench_function("noop-typed/empty-waterfalls/cpu", |b| {
            b.iter_custom(|iters| per_call_cpu(&rt, iters, &reg, "noop"))
        });
        g.bench_function("noop-raw/empty-waterfalls/cpu", |b| {
            b.iter_custom(|iters| per_call_cpu(&rt, iters, &reg, "raw"))
        });
        g.finish();
    }
    c.bench_function("pipeline/noop-raw/empty-waterfalls", |b| {
        b.iter_custom(|iters| per_call(&rt, iters, &reg, "raw"))
    });
    c.bench_function("pipeline/unknown-tool/empty-waterfalls", |b| {
        b.iter_custom(|iters| per_call(&rt, iters, &reg, "missing"))
    });
    c.bench_function("scheduler/one-noop-call", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let out = run_tool_calls(
                        &reg,
                        None,
                        vec![ToolCallRequest::new("call_1", "raw", "{}")],
                        tokio_util::sync::CancellationToken::new(),
                        &NoHooks,
                        SchedulerConfig::default(),
                    )
                    .await
                    .unwrap();
                    std::hint::black_box(out);
                }
                start.elapsed()
            })
        })
    });

    // One pass-through listener per waterfall.
    let kernel2 = Kernel::new();
    let reg2 = registry(&kernel2);
    let root = kernel2.root();
    root.on_waterfall::<ToolsPreExecute, _, _>(|e, next| next.run(e))
        .unwrap()
        .detach();
    root.on_waterfall::<ToolsExecute, _, _>(|d, next| next.run(d))
        .unwrap()
        .detach();
    root.on_waterfall::<ToolsPostExecute, _, _>(|p, next| next.run(p))
        .unwrap()
        .detach();
    c.bench_function("pipeline/noop-raw/one-listener-per-waterfall", |b| {
        b.iter_custom(|iters| per_call(&rt, iters, &reg2, "raw"))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
