//! The typed `approval/*` declarations accept every approval event the upstream implementation
//! recorded (`../shared/conformance/upstream-sessions/*.jsonl`). Skipped, saying so, when the
//! shared folder is absent.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

fn corpus_dir() -> Option<PathBuf> {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    loop {
        let candidate = dir.join("shared/conformance/upstream-sessions");
        if candidate.is_dir() {
            return Some(candidate);
        }
        if !dir.pop() {
            return None;
        }
    }
}

#[test]
fn upstream_approval_events_validate_against_the_typed_declarations() {
    let Some(dir) = corpus_dir() else {
        eprintln!("shared/conformance is absent: approval conformance NOT run");
        return;
    };
    let decls = dsh_approval::declarations();
    let mut checked = std::collections::BTreeMap::<String, usize>::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let Some(kind) = v.get("type").and_then(|t| t.as_str()) else {
                continue;
            };
            let Some(decl) = decls.iter().find(|d| d.name == kind) else {
                continue;
            };
            let validate = decl.validate.as_ref().unwrap();
            if let Err(e) = validate(&v["data"]) {
                panic!("{}: {kind} {}: {e}", path.display(), v["data"]);
            }
            *checked.entry(kind.to_owned()).or_default() += 1;
        }
    }
    for kind in ["approval/asked", "approval/decided", "approval/policy"] {
        assert!(
            checked.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} in corpus: {checked:?}"
        );
    }
}
