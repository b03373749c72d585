//! `read` / `write` / `edit` through the dsh-tools pipeline (registry.execute) with a session
//! whose header `cwd` is a scratch workspace: exact model-facing texts, typed error codes,
//! meta diffs, parallel/exclusive modes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{Kernel, ScopeKey};
use dsh_llm::SessionId;
use dsh_session::{Session, SessionHeader};
use dsh_tool_fs as _;
use dsh_tools::{ExecutionMode, ToolCaller, ToolExecutionInput, ToolExecutionResult, ToolRegistry};
use serde_json::{Value, json};

struct H {
    _dir: tempfile::TempDir,
    root: PathBuf,
    kernel: Kernel,
    caller: ToolCaller,
    n: std::sync::atomic::AtomicU32,
}

async fn h() -> H {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap().join("ws");
    fs::create_dir(&root).unwrap();
    let kernel = Kernel::new();
    kernel.boot().await.unwrap();
    let mut header = SessionHeader::new("s-1", 0);
    header.cwd = Some(root.display().to_string());
    let session = Arc::new(Session::create("s-1", None, Some(header)).unwrap());
    let key = ScopeKey::new("agent");
    let actx = kernel.root().tagged(key.clone(), "agent").unwrap();
    let caller = ToolCaller::new(key, actx, session, SessionId::new("s-1"));
    H {
        _dir: dir,
        root,
        kernel,
        caller,
        n: std::sync::atomic::AtomicU32::new(0),
    }
}

impl H {
    async fn call(&self, name: &str, args: Value) -> Arc<ToolExecutionResult> {
        let reg = self.kernel.root().require::<ToolRegistry>().unwrap();
        let n = self.n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        reg.execute(
            ToolExecutionInput::new(format!("call-{n}"), name, args)
                .with_caller(self.caller.clone()),
        )
        .await
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
    fn d(&self, rel: &str) -> String {
        self.p(rel).display().to_string()
    }
}

fn text(r: &ToolExecutionResult) -> String {
    r.content()
        .iter()
        .filter_map(|b| b.as_text())
        .collect::<Vec<_>>()
        .join("")
}

fn code(r: &ToolExecutionResult) -> Option<String> {
    r.error_info().map(|i| i.code.clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn read_renders_upstream_envelope_with_meta() {
    let h = h().await;
    fs::write(h.p("a.txt"), "one\n\ttwo\nthree\n").unwrap();
    let r = h
        .call(
            "read",
            json!({"file_path": "a.txt", "offset": 2, "limit": 1}),
        )
        .await;
    assert!(!r.is_error());
    assert_eq!(
        text(&r),
        format!(
            "<path>{}</path>\n<type>file</type>\n<content>\n2: \ttwo\n\n(Showing lines 2-2 of 3. Use offset=3 to continue.)\n</content>",
            h.d("a.txt")
        )
    );
    assert_eq!(
        r.meta().cloned(),
        Some(
            json!({"path": h.d("a.txt"), "offset": 2, "lines": [{"number": 2, "text": "\ttwo"}], "totalLines": 3})
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn read_is_parallel_write_and_edit_exclusive() {
    let h = h().await;
    let reg = h.kernel.root().require::<ToolRegistry>().unwrap();
    let key = Some(&h.caller.key);
    assert_eq!(
        reg.execution_mode("read", &json!({"file_path": "a"}), key),
        ExecutionMode::Parallel
    );
    assert_eq!(
        reg.execution_mode("write", &json!({"file_path": "a", "content": ""}), key),
        ExecutionMode::Exclusive
    );
    assert_eq!(
        reg.execution_mode(
            "edit",
            &json!({"file_path": "a", "old_string": "x", "new_string": "y"}),
            key
        ),
        ExecutionMode::Exclusive
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn write_without_read_is_not_observed_then_read_write_ok() {
    let h = h().await;
    fs::write(h.p("a.txt"), "old\n").unwrap();
    let r = h
        .call("write", json!({"file_path": "a.txt", "content": "new\n"}))
        .await;
    assert_eq!(code(&r).as_deref(), Some("FS_NOT_OBSERVED"));
    assert_eq!(
        text(&r),
        format!(
            "Error: cannot write \"{}\": the file exists and has not been read in this session; read the file, then retry",
            h.d("a.txt")
        )
    );
    assert_eq!(r.error_info().unwrap().name, "FsError");
    assert_eq!(fs::read(h.p("a.txt")).unwrap(), b"old\n");
    h.call("read", json!({"file_path": "a.txt"})).await;
    let r = h
        .call("write", json!({"file_path": "a.txt", "content": "new\n"}))
        .await;
    assert!(!r.is_error(), "{}", text(&r));
    assert_eq!(
        text(&r),
        format!(
            "<path>{}</path>\n<type>file</type>\n<content>\nUpdated file\n</content>",
            h.d("a.txt")
        )
    );
    let d = h.d("a.txt");
    assert_eq!(
        r.meta().cloned(),
        Some(
            json!({"path": d, "operation": "update", "diff": format!("--- a/{d}\n+++ b/{d}\n@@ -1 +1 @@\n-old\n+new\n")})
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn create_new_file_without_read_ok() {
    let h = h().await;
    let r = h
        .call(
            "write",
            json!({"file_path": "new/b.txt", "content": "hi\n"}),
        )
        .await;
    assert_eq!(
        text(&r),
        format!(
            "<path>{}</path>\n<type>file</type>\n<content>\nCreated file\n</content>",
            h.d("new/b.txt")
        )
    );
    assert_eq!(fs::read(h.p("new/b.txt")).unwrap(), b"hi\n");
    assert_eq!(
        r.meta().cloned(),
        Some(json!({"path": h.d("new/b.txt"), "operation": "create", "diff": ""}))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn edit_flow_texts_codes_and_diff_meta() {
    let h = h().await;
    let cfg = "timeout = 30\ndef a():\n    retry = 3\ndef b():\n    retry = 3\n";
    fs::write(h.p("cfg.py"), cfg).unwrap();
    // edit before read
    let r = h.call("edit", json!({"file_path": "cfg.py", "old_string": "timeout = 30", "new_string": "timeout = 31"})).await;
    assert_eq!(code(&r).as_deref(), Some("FS_NOT_OBSERVED"));
    h.call("read", json!({"file_path": "cfg.py"})).await;
    // ambiguous
    let r = h.call("edit", json!({"file_path": "cfg.py", "old_string": "    retry = 3", "new_string": "    retry = 5"})).await;
    assert_eq!(code(&r).as_deref(), Some("FS_AMBIGUOUS_EDIT"));
    assert_eq!(
        text(&r),
        format!(
            "Error: old_string matched 2 times in \"{}\" (at lines 3, 5); provide a more specific old_string or set replace_all to true\n3:     retry = 3\n5:     retry = 3",
            h.d("cfg.py")
        )
    );
    assert_eq!(fs::read_to_string(h.p("cfg.py")).unwrap(), cfg);
    // not found
    let r = h
        .call(
            "edit",
            json!({"file_path": "cfg.py", "old_string": "retry = 4", "new_string": "x"}),
        )
        .await;
    assert_eq!(code(&r).as_deref(), Some("FS_EDIT_NOT_FOUND"));
    // empty old_string
    let r = h
        .call(
            "edit",
            json!({"file_path": "cfg.py", "old_string": "", "new_string": "x"}),
        )
        .await;
    assert_eq!(code(&r).as_deref(), Some("FS_INVALID_ARGS"));
    // replace_all
    let r = h.call("edit", json!({"file_path": "cfg.py", "old_string": "    retry = 3", "new_string": "    retry = 5", "replace_all": true})).await;
    assert!(!r.is_error(), "{}", text(&r));
    assert_eq!(
        text(&r),
        format!(
            "The file {} has been updated. All 2 occurrences were successfully replaced.",
            h.d("cfg.py")
        )
    );
    let d = h.d("cfg.py");
    assert_eq!(
        r.meta().cloned(),
        Some(
            json!({"path": d, "replacements": 2, "diff": format!("--- a/{d}\n+++ b/{d}\n@@ -1,5 +1,5 @@\n timeout = 30\n def a():\n-    retry = 3\n+    retry = 5\n def b():\n-    retry = 3\n+    retry = 5\n")})
        )
    );
    // a second edit without re-reading works (own write refreshed the observation)
    let r = h.call("edit", json!({"file_path": "cfg.py", "old_string": "timeout = 30", "new_string": "timeout = 31"})).await;
    assert_eq!(
        text(&r),
        format!("The file {} has been updated successfully.", h.d("cfg.py"))
    );
    // external change → stale, with re-read instruction
    fs::write(h.p("cfg.py"), "changed\n").unwrap();
    let r = h
        .call(
            "edit",
            json!({"file_path": "cfg.py", "old_string": "changed", "new_string": "x"}),
        )
        .await;
    assert_eq!(code(&r).as_deref(), Some("FS_STALE_VERSION"));
    assert!(text(&r).starts_with(&format!(
        "Error: \"{}\" changed on disk since it was last read in this session; re-read the file, then retry\nChange since last read:\n",
        h.d("cfg.py")
    )));
    assert_eq!(fs::read_to_string(h.p("cfg.py")).unwrap(), "changed\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn crlf_bom_edit_through_tool_keeps_every_other_byte() {
    let h = h().await;
    fs::write(h.p("win.txt"), b"\xEF\xBB\xBFalpha\r\nbeta\r\ngamma\r\n").unwrap();
    let r = h.call("read", json!({"file_path": "win.txt"})).await;
    assert!(text(&r).contains("\n1: alpha\n2: beta\n3: gamma\n"));
    let r = h.call("edit", json!({"file_path": "win.txt", "old_string": "alpha\nbeta", "new_string": "alpha\nBETA\nbeta2"})).await;
    assert!(!r.is_error(), "{}", text(&r));
    assert_eq!(
        fs::read(h.p("win.txt")).unwrap(),
        b"\xEF\xBB\xBFalpha\r\nBETA\r\nbeta2\r\ngamma\r\n".to_vec()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn binary_read_is_refused_with_short_description() {
    let h = h().await;
    let mut elf = b"\x7fELF".to_vec();
    elf.extend(std::iter::repeat_n(0xAB_u8, 1000));
    fs::write(h.p("tool.bin"), &elf).unwrap();
    let r = h.call("read", json!({"file_path": "tool.bin"})).await;
    assert_eq!(code(&r).as_deref(), Some("FS_NOT_TEXT"));
    assert_eq!(
        text(&r),
        format!(
            "Error: cannot read \"{}\": binary file (ELF executable, 1004 bytes)",
            h.d("tool.bin")
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn path_escapes_refused_through_tools() {
    let h = h().await;
    fs::write(h.root.parent().unwrap().join("x"), "secret").unwrap();
    std::os::unix::fs::symlink("/etc", h.p("etc")).unwrap();
    for (tool, args) in [
        ("read", json!({"file_path": "../x"})),
        ("read", json!({"file_path": "/etc/passwd"})),
        ("read", json!({"file_path": "etc/passwd"})),
        ("write", json!({"file_path": "../x", "content": "pwned"})),
        (
            "edit",
            json!({"file_path": "../x", "old_string": "secret", "new_string": "pwned"}),
        ),
    ] {
        let r = h.call(tool, args.clone()).await;
        assert_eq!(
            code(&r).as_deref(),
            Some("FS_OUTSIDE_WORKSPACE"),
            "{tool} {args}"
        );
    }
    assert_eq!(
        fs::read_to_string(h.root.parent().unwrap().join("x")).unwrap(),
        "secret"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn permissions_preserved_through_write_tool() {
    let h = h().await;
    fs::write(h.p("run.sh"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(h.p("run.sh"), fs::Permissions::from_mode(0o700)).unwrap();
    h.call("read", json!({"file_path": "run.sh"})).await;
    let r = h
        .call(
            "write",
            json!({"file_path": "run.sh", "content": "#!/bin/sh\nexit 0\n"}),
        )
        .await;
    assert!(!r.is_error(), "{}", text(&r));
    assert_eq!(
        fs::metadata(h.p("run.sh")).unwrap().permissions().mode() & 0o7777,
        0o700
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn read_limit_above_cap_is_invalid_args() {
    let h = h().await;
    fs::write(h.p("a.txt"), "a\n").unwrap();
    let r = h
        .call("read", json!({"file_path": "a.txt", "limit": 2001}))
        .await;
    assert_eq!(code(&r).as_deref(), Some("INVALID_ARGS"));
    assert_eq!(
        text(&r),
        "Error: invalid arguments for tool \"read\": limit must be less than or equal to 2000"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn disposed_session_forgets_its_observations() {
    let h = h().await;
    fs::write(h.p("a.txt"), "a\n").unwrap();
    h.call("read", json!({"file_path": "a.txt"})).await;
    let obs = h.kernel.root().require::<dsh_fs::Observations>().unwrap();
    let fs_svc = h.kernel.root().require::<dsh_fs::FsService>().unwrap();
    let t = fs_svc
        .resolve("a.txt", &h.root, dsh_fs::Access::Read)
        .unwrap();
    assert!(obs.get("s-1", &t).is_some());
    h.kernel
        .root()
        .emit::<dsh_session::SessionDisposed>(&dsh_session::SessionNotice {
            session: h.caller.session.clone(),
            owner: None,
        });
    assert_eq!(obs.get("s-1", &t), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn present_call_intents_and_lang() {
    let h = h().await;
    let reg = h.kernel.root().require::<ToolRegistry>().unwrap();
    let read = reg.get("read", None).unwrap();
    assert_eq!(
        read.present_call(&json!({"file_path": "src/a.rs", "offset": 5, "limit": 4})),
        Some(
            json!({"card": "generic", "title": "Read src/a.rs (5 - 8)", "kind": "read", "locations": [{"path": "src/a.rs", "line": 5}]})
        )
    );
    let edit = reg.get("edit", None).unwrap();
    assert_eq!(
        edit.present_call(&json!({"file_path": "a.rs", "old_string": "x", "new_string": "y"})),
        Some(
            json!({"card": "diff", "title": "Edit a.rs", "diffs": [{"path": "a.rs", "oldText": "x", "newText": "y"}], "locations": [{"path": "a.rs"}]})
        )
    );
    assert_eq!(dsh_tool_fs::lang_from_path("/x/Main.RS"), Some("rs"));
    assert_eq!(dsh_tool_fs::lang_from_path("/x/.gitignore"), None);
    fs::write(h.p("m.py"), "x = 1\n").unwrap();
    let r = h.call("read", json!({"file_path": "m.py"})).await;
    assert_eq!(r.meta().unwrap()["lang"], json!("py"));
}

#[tokio::test(flavor = "multi_thread")]
async fn declared_effects_and_snake_case_settings() {
    use dsh_tool_fs::FsToolsConfig;
    use dsh_tools::ToolEffects;
    let h = h().await;
    let reg = h.kernel.root().require::<ToolRegistry>().unwrap();
    assert_eq!(
        reg.effects("read", None),
        Some(ToolEffects::READ_ONLY.parallel_safe().target("file_path"))
    );
    for tool in ["write", "edit"] {
        assert_eq!(
            reg.effects(tool, None),
            Some(ToolEffects::WRITES_FILES.target("file_path")),
            "{tool}"
        );
    }
    // The keys crates/dsh writes.
    let c: FsToolsConfig = serde_json::from_value(
        json!({"allow_outside_workspace": true, "allow_read_outside_workspace": true, "read_limit": 10}),
    )
    .unwrap();
    assert_eq!(
        c,
        FsToolsConfig {
            allow_outside_workspace: true,
            allow_read_outside_workspace: true,
            read_limit: 10,
            ..FsToolsConfig::default()
        }
    );
    let e = serde_json::from_value::<FsToolsConfig>(json!({"allowOutsideWorkspace": true}))
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("unknown field `allowOutsideWorkspace`"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn overwriting_a_9000_byte_file_stores_a_bounded_meta() {
    let h = h().await;
    let old: String = (0..1_000).map(|i| format!("row {i:04}\n")).collect();
    assert_eq!(old.len(), 9_000);
    fs::write(h.p("big.txt"), &old).unwrap();
    let d = h.d("big.txt");

    // Every line replaced: the 20 KB diff would be one more copy of the content; a summary.
    h.call("read", json!({"file_path": "big.txt"})).await;
    let new: String = (0..1_000).map(|i| format!("ROW {i:04}\n")).collect();
    let r = h
        .call("write", json!({"file_path": "big.txt", "content": new}))
        .await;
    assert!(!r.is_error(), "{}", text(&r));
    assert_eq!(fs::read_to_string(h.p("big.txt")).unwrap(), new);
    // headers (`--- a/<d>`, `+++ b/<d>`), one hunk header, 1,000 `-` and 1,000 `+` lines
    let diff_bytes = 2 * (6 + d.len() + 1) + "@@ -1,1000 +1,1000 @@\n".len() + 2 * 10_000;
    assert!(diff_bytes > dsh_tool_fs::WRITE_DIFF_MAX_BYTES);
    let meta = r.meta().cloned().unwrap();
    assert_eq!(
        meta,
        json!({"path": d, "operation": "update", "diffStat": {"addedLines": 1000, "removedLines": 1000, "diffBytes": diff_bytes}})
    );
    assert!(meta.to_string().len() < 200 + d.len(), "{meta}");

    // One line changed: the diff is small and stored whole.
    h.call("read", json!({"file_path": "big.txt"})).await;
    let edited = new.replace("ROW 0499\n", "ROW 0499 changed\n");
    let r = h
        .call("write", json!({"file_path": "big.txt", "content": edited}))
        .await;
    assert!(!r.is_error(), "{}", text(&r));
    assert_eq!(
        r.meta().cloned(),
        Some(json!({"path": d, "operation": "update", "diff": format!(
            "--- a/{d}\n+++ b/{d}\n@@ -497,7 +497,7 @@\n ROW 0496\n ROW 0497\n ROW 0498\n-ROW 0499\n+ROW 0499 changed\n ROW 0500\n ROW 0501\n ROW 0502\n"
        )}))
    );
}
