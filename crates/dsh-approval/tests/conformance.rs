//! The typed `approval/*` declarations accept every approval event the upstream implementation
//! recorded in the session-log corpus (data read at run time from `shared/` beside the
//! repository; see `docs/upstream/approval.md`). Reported as skipped (`#[ignore]`) when the corpus
//! is absent, and failing when `CI` is set and it is absent.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;

/// The corpus folder; panics (a failure, not a pass) when missing — these tests are
/// `#[ignore]`d at build time when the corpus is absent and `CI` is unset (see
/// `dsh-shared-corpus`).
fn corpus_dir() -> PathBuf {
    dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "conformance/upstream-sessions")
}

#[test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
fn upstream_approval_events_validate_against_the_typed_declarations() {
    let dir = corpus_dir();
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
