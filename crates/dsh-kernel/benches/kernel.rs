//! Kernel micro-benchmarks: emit to 0/1/8 listeners, serial/parallel/waterfall over 8
//! listeners, service lookup, scope create+dispose. Figures go to `docs/benchmarks.md`.

#![allow(missing_docs, reason = "criterion bench harness")]
#![allow(clippy::unwrap_used, reason = "benchmark setup may panic on failure")]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_kernel::{Kernel, event};

event! {
    /// Emit bench event.
    pub struct E: emit("bench/e") => u64;
}
event! {
    /// Serial bench event.
    pub struct S: serial("bench/s") => u64, u64;
}
event! {
    /// Parallel bench event.
    pub struct P: parallel("bench/p") => u64;
}
event! {
    /// Waterfall bench event.
    pub struct W: waterfall("bench/w") => u64, u64;
}

#[derive(Debug)]
struct Svc(u64);

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    for n in [0usize, 1, 8] {
        let k = Kernel::new();
        let ctx = k.root().child("bench").unwrap();
        let sink = Arc::new(AtomicU64::new(0));
        for _ in 0..n {
            let s = sink.clone();
            ctx.on_emit::<E>(move |v| {
                s.fetch_add(*v, Ordering::Relaxed);
            })
            .unwrap()
            .detach();
        }
        c.bench_function(&format!("kernel/emit/{n}_listeners"), |b| {
            b.iter(|| k.root().emit::<E>(black_box(&1)))
        });
    }

    let k = Kernel::new();
    let ctx = k.root().child("bench").unwrap();
    for _ in 0..8 {
        ctx.on_serial::<S, _, _>(|v| async move { Ok((v == u64::MAX).then_some(v)) })
            .unwrap()
            .detach();
        ctx.on_parallel::<P, _, _>(|_| async move { Ok(()) })
            .unwrap()
            .detach();
        ctx.on_waterfall::<W, _, _>(|v, next| async move { next.run(v + 1).await })
            .unwrap()
            .detach();
    }
    c.bench_function("kernel/serial/8_listeners", |b| {
        b.iter(|| rt.block_on(k.root().serial::<S>(black_box(1))).unwrap())
    });
    c.bench_function("kernel/parallel/8_listeners", |b| {
        b.iter(|| rt.block_on(k.root().parallel::<P>(black_box(1))).unwrap())
    });
    c.bench_function("kernel/waterfall/8_listeners", |b| {
        b.iter(|| {
            rt.block_on(
                k.root()
                    .waterfall::<W, _, _>(black_box(0), |v| async move { v }),
            )
        })
    });

    let k = Kernel::new();
    k.root().provide(Arc::new(Svc(7))).unwrap().detach();
    let agent = k.root().child("plugin").unwrap().isolated("agent").unwrap();
    c.bench_function("kernel/service_lookup/depth_2_layers", |b| {
        b.iter(|| black_box(agent.get::<Svc>()).map(|s| s.0))
    });

    let k = Kernel::new();
    c.bench_function("kernel/scope_create_dispose", |b| {
        b.iter(|| {
            rt.block_on(async {
                let s = k.root().child("s").unwrap();
                s.dispose().await;
            })
        })
    });
}

criterion_group!(kernel, benches);
criterion_main!(kernel);
