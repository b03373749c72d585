//! dsh-fs micro-benchmarks: the literal edit on a 1 MiB CRLF text (match + line-ending-aware
//! rewrite, no I/O), and a streamed read window of a 10 MiB single-line file and of a 10 MiB
//! file of short lines (hashing, UTF-8 validation, window building, disk cache warm).

#![allow(missing_docs, reason = "criterion bench harness")]
#![allow(clippy::unwrap_used, reason = "benchmark setup may panic on failure")]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_fs::{Access, FsService, WindowCaps, text};

fn benches(c: &mut Criterion) {
    let mut raw = String::new();
    let mut i = 0;
    while raw.len() < 1024 * 1024 {
        raw.push_str(&format!("\tline {i} = value;\r\n"));
        i += 1;
    }
    raw.push_str("\tUNIQUE MARKER\r\n");
    c.bench_function("apply_edit 1MiB crlf", |b| {
        b.iter(|| {
            text::apply_edit(
                black_box(&raw),
                "\tUNIQUE MARKER\n",
                "\tREPLACED\n\tSECOND\n",
                false,
                "f",
            )
            .unwrap()
        })
    });

    let dir = tempfile::tempdir().unwrap();
    let fs = FsService::default();
    std::fs::write(dir.path().join("one.txt"), "x".repeat(10 * 1024 * 1024)).unwrap();
    let many: String = (0..1_000_000).map(|i| format!("row {i:05}\n")).collect();
    std::fs::write(dir.path().join("many.txt"), many).unwrap();
    let caps = WindowCaps {
        offset: 1,
        limit: 2000,
        max_line_chars: 2000,
        max_bytes: 50 * 1024,
    };
    let mut g = c.benchmark_group("read_text 10MiB");
    g.sample_size(20);
    for name in ["one.txt", "many.txt"] {
        let t = fs.resolve(name, dir.path(), Access::Read).unwrap();
        g.bench_function(name, |b| {
            b.iter(|| fs.read_text(black_box(&t), caps).unwrap())
        });
    }
    g.finish();
}

criterion_group!(group, benches);
criterion_main!(group);
