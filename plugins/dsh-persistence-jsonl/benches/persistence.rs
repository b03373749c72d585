//! Criterion benchmarks of the JSONL backend (BC-27): append throughput through the write
//! coordinator (200 ms batching window, drained by flush), load of a 100k-event / ~100 MB log
//! (target ≤ 1 s), and listing 10,000 session headers (target ≤ 100 ms).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_persistence::{SessionHeader, SessionPersistence, WriteCoordinator};
use dsh_persistence_jsonl::{JsonlConfig, jsonl_persistence};
use dsh_session::SessionEvent;
use serde_json::{Value, json};

fn event(seq: u64, payload: &str) -> Arc<SessionEvent> {
    // A balanced pattern: every 4 events form turn/start, user/message, tool-ish opaque, turn/end.
    let turn = seq / 4 + 1;
    let v = match seq % 4 {
        0 => json!({"type":"turn/start","seq":seq,"time":seq,"data":{"turn":turn}}),
        1 => {
            json!({"type":"user/message","seq":seq,"time":seq,"data":{"id":format!("u{seq}"),"role":"user","content":[{"type":"text","text":payload}],"source":{"kind":"user"}},"surfaceOp":"append"})
        }
        2 => json!({"type":"session/title","seq":seq,"time":seq,"data":{"title":payload}}),
        _ => {
            json!({"type":"turn/end","seq":seq,"time":seq,"data":{"turn":turn,"reason":{"kind":"completed"}}})
        }
    };
    Arc::new(SessionEvent::from_value(v).unwrap())
}

fn events(n: u64, payload_bytes: usize) -> Vec<Arc<SessionEvent>> {
    let payload = "x".repeat(payload_bytes);
    (0..n).map(|s| event(s, &payload)).collect()
}

fn header(id: &str) -> SessionHeader {
    let mut h = SessionHeader::new(id, 1);
    h.cwd = Some("/bench/proj".into());
    h
}

fn append_throughput(c: &mut Criterion) {
    let evs = events(10_000, 200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("append");
    g.throughput(Throughput::Elements(evs.len() as u64));
    g.sample_size(10);
    g.bench_function("coordinator_10k_events_200ms_window_then_flush", |b| {
        b.iter(|| {
            let dir = tempfile::tempdir().unwrap();
            let p = jsonl_persistence(JsonlConfig {
                root: dir.path().to_path_buf(),
                pack_chunks: true,
                compression: Default::default(),
            });
            rt.block_on(async {
                let coord = WriteCoordinator::new(p, Duration::from_millis(200));
                let h = header("s");
                for e in &evs {
                    coord.admit(&h, e);
                }
                coord.flush("s").await.unwrap();
            });
        });
    });
    g.bench_function("seam_append_batches_of_100_fsync_each", |b| {
        b.iter(|| {
            let dir = tempfile::tempdir().unwrap();
            let p = jsonl_persistence(JsonlConfig {
                root: dir.path().to_path_buf(),
                pack_chunks: true,
                compression: Default::default(),
            });
            p.create(header("s")).unwrap();
            for chunk in evs[..2_000].chunks(100) {
                p.append("s", chunk).unwrap();
            }
        });
    });
    g.finish();
}

fn load_100mb(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let p = jsonl_persistence(JsonlConfig {
        root: dir.path().to_path_buf(),
        pack_chunks: true,
        compression: Default::default(),
    });
    let evs = events(100_000, 1_900);
    p.create(header("big")).unwrap();
    for chunk in evs.chunks(10_000) {
        p.append("big", chunk).unwrap();
    }
    drop(evs);
    let path = dsh_persistence_jsonl::log_path(dir.path(), Some("/bench/proj"), "big").unwrap();
    let bytes = std::fs::metadata(&path).unwrap().len();
    eprintln!("load bench log: {bytes} bytes, 100000 events");
    let mut g = c.benchmark_group("load");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("inspect_100k_events_100mb", |b| {
        b.iter(|| {
            let loaded = p.inspect("big").unwrap();
            assert_eq!(loaded.events.len(), 100_000);
        });
    });
    g.finish();
}

fn list_10k(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..10_000u32 {
        let id = format!("session-{i:05}");
        let cwd = format!("/bench/proj{}", i % 20);
        let path = dsh_persistence_jsonl::log_path(dir.path(), Some(&cwd), &id).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut h = SessionHeader::new(id.clone(), 1);
        h.cwd = Some(cwd);
        let mut text = dsh_persistence::header_to_line(&h);
        text.push('\n');
        let ev: Value = event(0, "").to_value();
        text.push_str(&ev.to_string());
        text.push('\n');
        std::fs::write(&path, text).unwrap();
    }
    let p = jsonl_persistence(JsonlConfig {
        root: dir.path().to_path_buf(),
        pack_chunks: true,
        compression: Default::default(),
    });
    let mut g = c.benchmark_group("list");
    g.sample_size(10);
    g.bench_function("list_10000_headers", |b| {
        b.iter(|| assert_eq!(p.list().unwrap().len(), 10_000));
    });
    g.finish();
}

criterion_group!(benches, append_throughput, load_100mb, list_10k);
criterion_main!(benches);
