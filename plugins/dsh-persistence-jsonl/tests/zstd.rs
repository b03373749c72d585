//! The zstd-framed layout (`compression: zstd`, `session.jsonl.zstd`): one checksummed frame for
//! the header line and one per append batch; the decoded stream equals the plain log; a torn
//! final frame keeps its complete records; a damaged complete frame is corruption; a root is
//! single-encoding.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
#[path = "../../../crates/dsh-persistence/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;

use common::{Script, to_plain};
use dsh_persistence::{SessionHeader, SessionPersistence};
use dsh_persistence_jsonl::{Compression, JsonlConfig, jsonl_persistence};
use dsh_session::SessionEvent;

fn header(id: &str) -> SessionHeader {
    let mut h = SessionHeader::new(id, 7);
    h.cwd = Some("/z/proj".into());
    h
}

fn store(root: &Path, compression: Compression) -> Arc<dsh_persistence_jsonl::JsonlPersistence> {
    jsonl_persistence(JsonlConfig {
        root: root.to_path_buf(),
        pack_chunks: true,
        compression,
    })
}

fn zpath(root: &Path, id: &str) -> std::path::PathBuf {
    dsh_persistence_jsonl::session_dir(root, Some("/z/proj"), id)
        .unwrap()
        .join("session.jsonl.zstd")
}

fn frame_sizes(data: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let n = zstd::zstd_safe::find_frame_compressed_size(&data[pos..]).unwrap();
        out.push(n);
        pos += n;
    }
    out
}

fn script() -> Script {
    let mut s = Script::default();
    s.full_turn(1);
    s.full_turn(2);
    s.full_turn(3);
    s
}

#[test]
fn zstd_round_trip_frames_and_plain_equivalence() {
    let z = tempfile::tempdir().unwrap();
    let p = tempfile::tempdir().unwrap();
    let s = script();
    let (zs, ps) = (
        store(z.path(), Compression::Zstd),
        store(p.path(), Compression::None),
    );
    for st in [&zs, &ps] {
        st.create(header("s")).unwrap();
        st.append("s", &s.events[..10]).unwrap();
        st.append("s", &s.events[10..25]).unwrap();
        st.append("s", &s.events[25..]).unwrap();
    }
    let data = std::fs::read(zpath(z.path(), "s")).unwrap();
    assert_eq!(
        frame_sizes(&data).len(),
        4,
        "header frame + one frame per batch"
    );
    let plain =
        std::fs::read(dsh_persistence_jsonl::log_path(p.path(), Some("/z/proj"), "s").unwrap())
            .unwrap();
    assert_eq!(zstd::stream::decode_all(&data[..]).unwrap(), plain);
    let fresh = store(z.path(), Compression::Zstd);
    assert_eq!(fresh.inspect("s").unwrap().events, to_plain(&s.events));
    assert_eq!(
        fresh
            .list()
            .unwrap()
            .into_iter()
            .map(|h| h.id)
            .collect::<Vec<_>>(),
        vec!["s"]
    );
    assert_eq!(fresh.read_from("s", 30).unwrap(), to_plain(&s.events[30..]));
    // A root is single-encoding.
    let e = store(z.path(), Compression::None).load("s").unwrap_err();
    assert_eq!(e.code(), "SESSION_PERSISTENCE_BACKEND", "{e}");
}

#[test]
fn zstd_torn_final_frame_keeps_complete_records_and_repairs() {
    let dir = tempfile::tempdir().unwrap();
    let s = script();
    let zs = store(dir.path(), Compression::Zstd);
    zs.create(header("s")).unwrap();
    zs.append("s", &s.events[..20]).unwrap();
    zs.append("s", &s.events[20..]).unwrap();
    zs.release("s");
    let path = zpath(dir.path(), "s");
    let data = std::fs::read(&path).unwrap();
    let sizes = frame_sizes(&data);
    let last_start = sizes[0] + sizes[1];
    // Cut the last frame short (drop its checksum and some of its blocks' tail).
    let cut = last_start + (sizes[2] * 3) / 4;
    std::fs::write(&path, &data[..cut]).unwrap();
    let p = store(dir.path(), Compression::Zstd);
    let loaded = p.load("s").unwrap();
    assert!(loaded.repair.torn_tail_dropped);
    let stored = loaded.events.len() - loaded.repair.closers;
    assert!(stored >= 20, "{stored}");
    assert_eq!(loaded.events[..stored], to_plain(&s.events[..stored])[..]);
    // The repaired file is whole again and stable.
    let repaired = std::fs::read(&path).unwrap();
    assert!(zstd::stream::decode_all(&repaired[..]).is_ok());
    p.release("s");
    let again = store(dir.path(), Compression::Zstd).load("s").unwrap();
    assert_eq!(again.events, loaded.events);
    assert_eq!(again.repair, Default::default());
}

#[test]
fn zstd_damaged_complete_frame_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let s = script();
    let zs = store(dir.path(), Compression::Zstd);
    zs.create(header("s")).unwrap();
    zs.append("s", &s.events[..10]).unwrap();
    zs.append("s", &s.events[10..20]).unwrap();
    zs.append("s", &s.events[20..]).unwrap();
    zs.release("s");
    let path = zpath(dir.path(), "s");
    let mut data = std::fs::read(&path).unwrap();
    let sizes = frame_sizes(&data);
    // Flip the content checksum (last 4 bytes) of the middle batch frame.
    let end_of_frame2 = sizes[0] + sizes[1] + sizes[2];
    data[end_of_frame2 - 2] ^= 0xFF;
    std::fs::write(&path, &data).unwrap();
    let e = store(dir.path(), Compression::Zstd).load("s").unwrap_err();
    assert_eq!(e.code(), "SESSION_PERSISTENCE_CORRUPTION", "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), data, "nothing rewritten");
}

#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
#[test]
fn conformance_upstream_logs_round_trip_through_zstd() {
    let files = common::corpus_files();
    let mut checked = 0;
    for file in &files {
        let filled = common::load_corpus_file(file);
        if filled.records.is_empty() {
            continue;
        }
        let src = tempfile::tempdir().unwrap();
        let (id, _) = common::write_raw_log(src.path(), &filled, layout);
        let loaded = store(src.path(), Compression::None).inspect(&id).unwrap();
        let dst = tempfile::tempdir().unwrap();
        let z = store(dst.path(), Compression::Zstd);
        z.create(loaded.header.clone()).unwrap();
        let events: Vec<Arc<SessionEvent>> = loaded.events.iter().cloned().map(Arc::new).collect();
        z.append(&id, &events).unwrap();
        let back = store(dst.path(), Compression::Zstd).inspect(&id).unwrap();
        assert_eq!(back.events, loaded.events, "{}", file.display());
        checked += 1;
    }
    assert!(checked > 100, "{checked}");
}

fn layout(root: &std::path::Path, cwd: Option<&str>, id: &str) -> std::path::PathBuf {
    dsh_persistence_jsonl::log_path(root, cwd, id).unwrap()
}
