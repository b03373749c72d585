//! Conformance: every upstream v0 log of the conformance corpus (`docs/persistence.md`,
//! "Conformance corpus"; templates filled and `seq`/`time` restored) loads through the JSONL backend, and
//! re-writing the loaded events through a fresh backend gives records equal as JSON values to the
//! input (header too); re-writing dsh's own output is byte-stable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
#[path = "../../../crates/dsh-persistence/tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use dsh_persistence::SessionPersistence;
use dsh_persistence_jsonl::{JsonlConfig, jsonl_persistence};
use dsh_session::{SessionEvent, json_equiv};
use serde_json::Value;

#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
#[test]
fn conformance_upstream_logs_load_and_rewrite_equal() {
    let files = common::corpus_files();
    assert!(files.len() >= 100, "corpus has {} files", files.len());
    let mut failures = Vec::new();
    let mut total_events = 0usize;
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let filled = common::load_corpus_file(file);
        let src = tempfile::tempdir().unwrap();
        let (id, _) = common::write_raw_log(src.path(), &filled, layout);
        let p = jsonl_persistence(JsonlConfig {
            root: src.path().to_path_buf(),
            pack_chunks: true,
            compression: Default::default(),
        });
        let loaded = match p.inspect(&id) {
            Ok(l) => l,
            Err(e) => {
                failures.push(format!("{name}: load: {} {e}", e.code()));
                continue;
            }
        };
        // The corpus logs are balanced: no repair.
        if loaded.repair != Default::default() {
            failures.push(format!("{name}: unexpected repair {:?}", loaded.repair));
            continue;
        }
        total_events += loaded.events.len();
        if loaded.events.is_empty() {
            // Header-only log: dsh materialises a session only with its first append.
            assert!(filled.records.is_empty());
            continue;
        }
        // Re-write through a fresh backend in one batch.
        let dst = tempfile::tempdir().unwrap();
        let q = jsonl_persistence(JsonlConfig {
            root: dst.path().to_path_buf(),
            pack_chunks: true,
            compression: Default::default(),
        });
        q.create(loaded.header.clone()).unwrap();
        let events: Vec<Arc<SessionEvent>> = loaded.events.iter().cloned().map(Arc::new).collect();
        q.append(&id, &events).unwrap();
        let out_path = q.locate(&loaded.header).unwrap().path;
        let out = std::fs::read_to_string(&out_path).unwrap();
        let mut lines = out.lines();
        let header_out: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        let mut header_in = filled.header.clone();
        if header_in.get("delegationDepth").is_none() {
            header_in["delegationDepth"] = Value::from(0);
        }
        if !json_equiv(&header_out, &header_in) {
            failures.push(format!("{name}: header {header_out} != {header_in}"));
        }
        let records_out: Vec<Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
        if records_out.len() != filled.records.len() {
            failures.push(format!(
                "{name}: {} records written, {} read",
                records_out.len(),
                filled.records.len()
            ));
            continue;
        }
        for (i, (a, b)) in records_out.iter().zip(&filled.records).enumerate() {
            if !json_equiv(a, b) {
                failures.push(format!("{name}: record {i} differs:\n  out {a}\n  in  {b}"));
                break;
            }
        }
        // dsh's own output is byte-stable on re-write.
        let reloaded = q.inspect(&id).unwrap();
        assert_eq!(reloaded.events, loaded.events, "{name}");
        let again = tempfile::tempdir().unwrap();
        let r = jsonl_persistence(JsonlConfig {
            root: again.path().to_path_buf(),
            pack_chunks: true,
            compression: Default::default(),
        });
        r.create(reloaded.header.clone()).unwrap();
        let events: Vec<Arc<SessionEvent>> = reloaded.events.into_iter().map(Arc::new).collect();
        r.append(&id, &events).unwrap();
        let out2 = std::fs::read_to_string(r.locate(&reloaded.header).unwrap().path).unwrap();
        if out2 != out {
            failures.push(format!("{name}: dsh output not byte-stable on re-write"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} files failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    assert!(total_events > 1000, "{total_events}");
}

#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
#[test]
fn conformance_listing_reads_every_corpus_header() {
    let files = common::corpus_files();
    // Distinct ids only: several corpus files share an id.
    let root = tempfile::tempdir().unwrap();
    let mut ids = std::collections::BTreeSet::new();
    for file in &files {
        let filled = common::load_corpus_file(file);
        let id = filled.header["id"].as_str().unwrap().to_owned();
        if ids.insert(id) {
            common::write_raw_log(root.path(), &filled, layout);
        }
    }
    let p = jsonl_persistence(JsonlConfig {
        root: root.path().to_path_buf(),
        pack_chunks: true,
        compression: Default::default(),
    });
    let listed: std::collections::BTreeSet<String> =
        p.list().unwrap().into_iter().map(|h| h.id).collect();
    assert_eq!(listed, ids);
}

fn layout(root: &std::path::Path, cwd: Option<&str>, id: &str) -> std::path::PathBuf {
    dsh_persistence_jsonl::log_path(root, cwd, id).unwrap()
}
