//! The typed `hook/invoked` / `hook/result` declarations accept every hook record the upstream
//! implementation wrote in the session-log corpus (data read at run time from `shared/` beside
//! the repository; see docs/upstream/hooks.md, "Records"). Reported as skipped when the corpus
//! is absent, failing when `CI` is set and it is absent.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
fn upstream_hook_records_validate_against_the_typed_declarations() {
    let dir =
        dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "conformance/upstream-sessions");
    let decls = dsh_hooks::records::declarations();
    let mut checked = std::collections::BTreeMap::<String, usize>::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let Some(decl) = decls.iter().find(|d| v["type"] == d.name.as_str()) else {
                continue;
            };
            if let Err(e) = (decl.validate.as_ref().unwrap())(&v["data"]) {
                panic!("{}: {}: {e}", path.display(), v["data"]);
            }
            *checked.entry(decl.name.clone()).or_default() += 1;
        }
    }
    // 11 hook scenarios with records, plus packed-chunks.
    assert!(checked["hook/invoked"] >= 11, "{checked:?}");
    assert_eq!(
        checked["hook/invoked"], checked["hook/result"],
        "{checked:?}"
    );
}
