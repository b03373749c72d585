//! Spill store and policy: a 10 MB single-line tool output is replaced by a head/tail preview
//! plus a locator; the locator file holds the full text (0600 in a 0700 directory) and is
//! readable through the filesystem service only thanks to spill's read grant.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_fs::{Access, FsService, WindowCaps};
use dsh_kernel::{Kernel, ScopeKey, Settings};
use dsh_llm::SessionId;
use dsh_session::{Session, SessionHeader};
use dsh_spill::{LocalSpillStore, SaveTextSpill, SpillSource, encode_segment, policy, session_dir};
use dsh_tools::{ToolCaller, ToolExecutionInput, ToolExecutionResult, ToolRegistry, define_tool};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, schemars::JsonSchema)]
struct FloodArgs {
    /// Bytes of `x` between the markers.
    n: usize,
}

struct H {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    spill_root: PathBuf,
    kernel: Kernel,
    caller: ToolCaller,
}

async fn h(spill: Value) -> H {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let ws = base.join("ws");
    fs::create_dir(&ws).unwrap();
    let spill_root = base.join("spill");
    let mut section = json!({"root": spill_root});
    if let (Some(s), Some(extra)) = (section.as_object_mut(), spill.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(Settings::new().with_section("dsh-spill", section)))
        .unwrap()
        .detach();
    kernel
        .root()
        .provide(Arc::new(FsService::default()))
        .unwrap()
        .detach();
    kernel.boot().await.unwrap();
    let reg = kernel.root().require::<ToolRegistry>().unwrap();
    for name in ["flood", "read"] {
        let tool = define_tool::<FloodArgs, String>(name, "Prints HEAD, n x's, TAIL on one line.")
            .execute(|a: FloodArgs, _cx| async move { Ok(format!("HEAD{}TAIL", "x".repeat(a.n))) })
            .unwrap();
        reg.register(kernel.root(), tool).unwrap().detach();
    }
    let mut header = SessionHeader::new("s-1", 0);
    header.cwd = Some(ws.display().to_string());
    let session = Arc::new(Session::create("s-1", None, Some(header)).unwrap());
    let key = ScopeKey::new("agent");
    let actx = kernel.root().tagged(key.clone(), "agent").unwrap();
    let caller = ToolCaller::new(key, actx, session, SessionId::new("s-1"));
    H {
        _dir: dir,
        ws,
        spill_root,
        kernel,
        caller,
    }
}

impl H {
    async fn call(&self, name: &str, n: usize) -> Arc<ToolExecutionResult> {
        let reg = self.kernel.root().require::<ToolRegistry>().unwrap();
        reg.execute(
            ToolExecutionInput::new("call-1", name, json!({"n": n}))
                .with_caller(self.caller.clone()),
        )
        .await
    }
}

fn text(r: &ToolExecutionResult) -> String {
    r.content().iter().filter_map(|b| b.as_text()).collect()
}

fn mode(p: &std::path::Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_mb_single_line_is_spilled_with_head_tail_preview_and_read_back_via_grant() {
    let h = h(json!({})).await;
    let n = 10 * 1024 * 1024;
    let r = h.call("flood", n).await;
    assert!(!r.is_error());
    let full = format!("HEAD{}TAIL", "x".repeat(n));
    let out = text(&r);
    assert!(out.len() <= 50 * 1024, "{}", out.len());
    // the value is untouched (only the model-facing content is replaced)
    assert_eq!(r.value(), Some(&Value::String(full.clone())));

    let dir = session_dir(&h.spill_root, "s-1");
    let entries: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1);
    let file = &entries[0];
    let fname = file.file_name().unwrap().to_str().unwrap().to_owned();
    assert_eq!(fname.len(), 12 + 1 + "flood.txt".len());
    assert!(fname.ends_with("-flood.txt"));
    assert_eq!(fs::read_to_string(file).unwrap(), full);
    assert_eq!(mode(file), 0o600);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(
        dir.file_name().unwrap().to_str().unwrap(),
        "session-6a840baf5d8c" // first 12 hex of sha256("s-1")
    );

    // exact shape: head, gap marker, tail, notice
    let locator = file.display().to_string();
    let notice_reserve = format!(
        "(Omitted {} bytes. Full formatted result stored at: {locator}. Use read with offset/limit, or grep this path to search within it.)",
        full.len()
    )
    .len()
        + 2
        + format!("\n[... {} bytes omitted ...]\n", full.len()).len();
    let budget = 50 * 1024 - notice_reserve;
    let head = &full[..budget.div_ceil(2)];
    let tail = &full[full.len() - budget / 2..];
    let omitted = full.len() - head.len() - tail.len();
    assert_eq!(
        out,
        format!(
            "{head}\n[... {omitted} bytes omitted ...]\n{tail}\n\n(Omitted {omitted} bytes. Full formatted result stored at: {locator}. Use read with offset/limit, or grep this path to search within it.)"
        )
    );
    assert!(out.starts_with("HEADxxx"));
    assert!(out.contains("xxxTAIL\n\n(Omitted "));

    // read back through the fs service the read tool uses: allowed only via spill's grant
    let fs_svc = h.kernel.root().require::<FsService>().unwrap();
    let t = fs_svc.resolve(&locator, &h.ws, Access::Read).unwrap();
    let back = fs_svc
        .read_text(
            &t,
            WindowCaps {
                offset: 1,
                limit: 2000,
                max_line_chars: 2000,
                max_bytes: 50 * 1024,
            },
        )
        .unwrap();
    assert_eq!(back.window.total_lines, 1);
    assert_eq!(
        back.window.lines[0].text,
        format!("HEAD{}... (line truncated to 2000 chars)", "x".repeat(1996))
    );
    assert_eq!(
        back.observed.version,
        dsh_fs::FsVersion::of(full.as_bytes())
    );
    // a service without the grant refuses the same path
    let other = FsService::default();
    assert_eq!(
        other
            .resolve(&locator, &h.ws, Access::Read)
            .unwrap_err()
            .code(),
        "FS_OUTSIDE_WORKSPACE"
    );
    // and writes are never granted
    assert_eq!(
        fs_svc
            .resolve(&locator, &h.ws, Access::Write)
            .unwrap_err()
            .code(),
        "FS_OUTSIDE_WORKSPACE"
    );
    // disposing the kernel drops the grant
    h.kernel.dispose().await;
    assert!(fs_svc.read_roots().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn small_results_and_read_results_are_untouched() {
    let h = h(json!({"max_inline_bytes": 100})).await;
    let r = h.call("flood", 10).await;
    assert_eq!(text(&r), format!("HEAD{}TAIL", "x".repeat(10)));
    let r = h.call("read", 1000).await;
    assert_eq!(text(&r), format!("HEAD{}TAIL", "x".repeat(1000)));
    assert!(!session_dir(&h.spill_root, "s-1").exists());
}

/// The value of a tool that cut its output itself and stored the whole of it (as `bash` does).
#[derive(serde::Serialize, Deserialize, schemars::JsonSchema)]
struct SelfStored {
    stdout: StoredStream,
}

#[derive(serde::Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
struct StoredStream {
    text: String,
    output_file: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_whose_tool_stored_its_whole_output_is_not_cut_again() {
    let h = h(json!({"max_inline_bytes": 1000})).await;
    // the folder service gives the session's spill folder, created 0700 and readable
    let folders = h
        .kernel
        .root()
        .require::<dsh_tools::OutputFolders>()
        .unwrap();
    let folder = folders.folder_for(h.caller.session.header()).unwrap();
    assert_eq!(folder, session_dir(&h.spill_root, "s-1"));
    assert_eq!(mode(&folder), 0o700);
    let stored = folder.join("own-bash-stdout.txt");
    fs::write(&stored, "x".repeat(1000)).unwrap();
    let fs_svc = h.kernel.root().require::<FsService>().unwrap();
    assert!(
        fs_svc
            .resolve(&stored.display().to_string(), &h.ws, Access::Read)
            .is_ok()
    );

    let reg = h.kernel.root().require::<ToolRegistry>().unwrap();
    let path = stored.display().to_string();
    let body_path = path.clone();
    let tool = define_tool::<FloodArgs, SelfStored>("own", "Stores its own output.")
        .execute(move |a: FloodArgs, _cx| {
            let output_file = body_path.clone();
            async move {
                Ok(SelfStored {
                    stdout: StoredStream {
                        text: "y".repeat(a.n),
                        output_file,
                    },
                })
            }
        })
        .unwrap();
    reg.register(h.kernel.root(), tool).unwrap().detach();
    let r = h.call("own", 2000).await;
    assert!(!r.is_error());
    // the content is the tool's own rendering, uncut, and no second copy was written
    assert_eq!(
        text(&r),
        json!({"stdout": {"text": "y".repeat(2000), "outputFile": path}}).to_string()
    );
    assert_eq!(fs::read_dir(&folder).unwrap().count(), 1);
    // a result of the same size without the declaration is spilled as before
    let r = h.call("flood", 2000).await;
    assert!(
        text(&r).contains("Full formatted result stored at: "),
        "{}",
        text(&r)
    );
    assert_eq!(fs::read_dir(&folder).unwrap().count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn save_failure_keeps_the_original() {
    let h = h(json!({"max_inline_bytes": 1000})).await;
    // make the spill root unusable: a regular file where the directory should be
    fs::write(&h.spill_root, "not a dir").unwrap();
    let r = h.call("flood", 5000).await;
    assert!(!r.is_error());
    assert_eq!(text(&r), format!("HEAD{}TAIL", "x".repeat(5000)));
}

#[tokio::test(flavor = "multi_thread")]
async fn cap_smaller_than_notice_keeps_the_original() {
    let h = h(json!({"max_inline_bytes": 20})).await;
    let r = h.call("flood", 100).await;
    assert_eq!(text(&r), format!("HEAD{}TAIL", "x".repeat(100)));
}

#[test]
fn store_modes_exclusive_names_and_unsafe_dir() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let kernel = Kernel::new();
    let store = LocalSpillStore::new(kernel.root().clone(), Some(root.clone()));
    let req = SaveTextSpill {
        session_id: "../evil".into(),
        header: None,
        source: SpillSource {
            tool_name: "bash".into(),
            call_id: "c1".into(),
            label: "result".into(),
        },
        suggested_name: "../../etc/passwd".into(),
        content: "full text".into(),
    };
    let a = store.save_text(&req).unwrap();
    let b = store.save_text(&req).unwrap();
    assert_ne!(a.locator, b.locator);
    assert_eq!(a.bytes, 9);
    let pa = PathBuf::from(&a.locator);
    assert_eq!(pa.parent().unwrap(), session_dir(&root, "../evil"));
    assert!(
        a.locator.ends_with("-..~002F..~002Fetc~002Fpasswd"),
        "{}",
        a.locator
    );
    assert_eq!(fs::read_to_string(&pa).unwrap(), "full text");
    assert_eq!(mode(&pa), 0o600);
    assert_eq!(mode(pa.parent().unwrap()), 0o700);
    assert_eq!(
        a.retrieval_hint,
        "Use read with offset/limit, or grep this path to search within it."
    );
    // a planted symlink as a session directory is refused
    let target = dir.path().join("elsewhere");
    fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, session_dir(&root, "s-2")).unwrap();
    let err = store
        .save_text(&SaveTextSpill {
            session_id: "s-2".into(),
            header: None,
            ..req
        })
        .unwrap_err();
    assert_eq!(err.code(), "SPILL_UNSAFE_PATH");
    assert_eq!(fs::read_dir(&target).unwrap().count(), 0);
}

#[test]
fn encode_segment_is_injective_and_safe() {
    assert_eq!(encode_segment(""), "~");
    assert_eq!(encode_segment("."), "~002E");
    assert_eq!(encode_segment(".."), "~002E~002E");
    assert_eq!(encode_segment("bash.txt"), "bash.txt");
    assert_eq!(encode_segment("a/b~c"), "a~002Fb~007Ec");
    assert_eq!(encode_segment("é"), "~00E9");
    assert_eq!(encode_segment("😀"), "~D83D~DE00");
}

#[test]
fn head_tail_respects_utf8_boundaries() {
    let s = "ééééé"; // 10 bytes
    assert_eq!(policy::head_tail(s, 5), ("é", "é", 6));
    assert_eq!(policy::head_tail(s, 8), ("éé", "éé", 2));
    assert_eq!(policy::head_tail(s, 10), (s, "", 0));
}

#[test]
fn settings_take_snake_case_keys_and_reject_unknown_ones() {
    use dsh_spill::SpillConfig;
    let c: SpillConfig =
        serde_json::from_value(json!({"max_inline_bytes": 100, "enabled": false})).unwrap();
    assert_eq!(
        c,
        SpillConfig {
            enabled: false,
            max_inline_bytes: 100,
            root: None
        }
    );
    assert!(serde_json::from_value::<SpillConfig>(json!({"maxInlineBytes": 100})).is_err());
}

#[test]
fn a_tool_that_capped_its_own_output_is_counted_in_the_notice() {
    // bash's value: one `omittedBytes` per stream
    let value = json!({"stdout": {"omittedBytes": 1000}, "stderr": {"omittedBytes": 20}, "timedOut": false});
    assert_eq!(policy::tool_omitted_bytes(Some(&value)), 1020);
    assert_eq!(
        policy::tool_omitted_bytes(Some(&json!({"omittedBytes": 7}))),
        7
    );
    assert_eq!(policy::tool_omitted_bytes(Some(&json!("text"))), 0);
    assert_eq!(policy::tool_omitted_bytes(None), 0);

    let text = "a".repeat(300);
    let out = policy::replacement(&text, 250, "/s/f.txt", "Hint.", 1020).unwrap();
    assert!(out.len() <= 250, "{}", out.len());
    let n = omitted_of(&out);
    assert!(out.ends_with(&format!(
        "(Omitted {} bytes: 1020 by the tool's own output cap and {n} in this preview. The result as the tool kept it is stored at: /s/f.txt. Hint.)",
        1020 + n
    )), "{out}");
    let preview = &out[..out.rfind("\n\n(Omitted").unwrap()];
    assert_eq!(preview.matches('a').count() + n, 300);
    // without a prior cap the upstream wording stays
    let out = policy::replacement(&text, 250, "/s/f.txt", "Hint.", 0).unwrap();
    let n = omitted_of(&out);
    assert!(out.ends_with(&format!(
        "(Omitted {n} bytes. Full formatted result stored at: /s/f.txt. Hint.)"
    )));
}

/// The count in the gap marker `[... N bytes omitted ...]` of a replacement.
fn omitted_of(out: &str) -> usize {
    let from = out.find("[... ").unwrap() + 5;
    out[from..from + out[from..].find(' ').unwrap()]
        .parse()
        .unwrap()
}
