//! Service-level tests of `dsh-fs`: the edit and fs bug-case families (BC-10, BC-11, BC-12,
//! BC-15, BC-16), containment, grants, atomic writes and the read window.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use dsh_fs::{
    Access, EditRequest, FsConfig, FsError, FsService, FsTarget, Observation, Observations,
    WindowCaps, WriteIntent, WriteOperation, text,
};

const OWNER: &str = "session-1";

fn caps() -> WindowCaps {
    WindowCaps {
        offset: 1,
        limit: 2000,
        max_line_chars: 2000,
        max_bytes: 50 * 1024,
    }
}

struct Ws {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    fs: FsService,
    obs: Observations,
}

fn ws() -> Ws {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    fs::create_dir(&root).unwrap();
    Ws {
        _dir: dir,
        root,
        fs: FsService::default(),
        obs: Observations::new(),
    }
}

impl Ws {
    fn target(&self, p: &str, a: Access) -> FsTarget {
        self.fs.resolve(p, &self.root, a).unwrap()
    }
    /// What the `read` tool does: read and record the observation.
    fn read(&self, p: &str) -> String {
        let t = self.target(p, Access::Read);
        let out = self.fs.read_text(&t, caps()).unwrap();
        self.obs
            .record(OWNER, &t, Observation::Present(out.observed.clone()));
        text::format_read(&t.display_path, &out.window)
    }
    /// What the `edit` tool does: guard from the observations, edit, record.
    fn edit(&self, p: &str, old: &str, new: &str, all: bool) -> Result<usize, FsError> {
        let t = self.target(p, Access::Write);
        let guard = self.obs.edit_guard(OWNER, &t)?;
        let out = self.fs.edit_text(
            &t,
            &EditRequest {
                old_string: old.into(),
                new_string: new.into(),
                replace_all: all,
            },
            Some(&guard),
        )?;
        self.obs.record(
            OWNER,
            &t,
            Observation::Present(dsh_fs::Observed {
                version: out.version,
                snapshot: Some(Arc::from(out.after.as_str())),
            }),
        );
        Ok(out.replacements)
    }
    fn write(&self, p: &str, content: &str) -> Result<WriteOperation, FsError> {
        let t = self.target(p, Access::Write);
        let intent = self.obs.write_intent(OWNER, &t);
        let out = self.fs.write_text(&t, content, &intent)?;
        self.obs.record(
            OWNER,
            &t,
            Observation::Present(dsh_fs::Observed {
                version: out.version,
                snapshot: None,
            }),
        );
        Ok(out.operation)
    }
    fn path(&self, p: &str) -> std::path::PathBuf {
        self.root.join(p)
    }
    fn put(&self, p: &str, bytes: &[u8]) {
        fs::write(self.path(p), bytes).unwrap();
    }
    fn get(&self, p: &str) -> Vec<u8> {
        fs::read(self.path(p)).unwrap()
    }
}

const CFG: &str = "timeout = 30\ndef a():\n    retry = 3\ndef b():\n    retry = 3\n";

#[test]
fn bc10_ambiguous_edit_fails_with_count_lines_previews_and_untouched_file() {
    let w = ws();
    w.put("cfg.py", CFG.as_bytes());
    let mtime = fs::metadata(w.path("cfg.py")).unwrap().modified().unwrap();
    w.read("cfg.py");
    let err = w
        .edit("cfg.py", "    retry = 3", "    retry = 5", false)
        .unwrap_err();
    assert_eq!(err.code(), "FS_AMBIGUOUS_EDIT");
    let d = w.path("cfg.py").display().to_string();
    assert_eq!(
        err.to_string(),
        format!(
            "old_string matched 2 times in \"{d}\" (at lines 3, 5); provide a more specific old_string or set replace_all to true\n3:     retry = 3\n5:     retry = 3"
        )
    );
    assert_eq!(w.get("cfg.py"), CFG.as_bytes());
    assert_eq!(
        fs::metadata(w.path("cfg.py")).unwrap().modified().unwrap(),
        mtime
    );
}

#[test]
fn bc10_not_found_edit_leaves_file_unchanged() {
    let w = ws();
    w.put("cfg.py", CFG.as_bytes());
    w.read("cfg.py");
    let err = w.edit("cfg.py", "retry = 4", "x", false).unwrap_err();
    assert_eq!(err.code(), "FS_EDIT_NOT_FOUND");
    let d = w.path("cfg.py").display().to_string();
    assert_eq!(
        err.to_string(),
        format!("old_string was not found in \"{d}\"")
    );
    assert_eq!(w.get("cfg.py"), CFG.as_bytes());
}

#[test]
fn bc10_replace_all_reports_two_replacements() {
    let w = ws();
    w.put("cfg.py", CFG.as_bytes());
    w.read("cfg.py");
    assert_eq!(
        w.edit("cfg.py", "    retry = 3", "    retry = 5", true),
        Ok(2)
    );
    assert_eq!(
        w.get("cfg.py"),
        b"timeout = 30\ndef a():\n    retry = 5\ndef b():\n    retry = 5\n"
    );
}

#[test]
fn bc10_overlapping_occurrences_are_ambiguous() {
    let w = ws();
    w.put("a.txt", b"aaaa");
    w.read("a.txt");
    let err = w.edit("a.txt", "aaa", "b", false).unwrap_err();
    assert_eq!(err.code(), "FS_AMBIGUOUS_EDIT");
    assert!(
        err.to_string()
            .starts_with("old_string matched 2 times in ")
    );
    assert_eq!(w.get("a.txt"), b"aaaa");
}

#[test]
fn bc10_empty_old_string_is_rejected() {
    let w = ws();
    w.put("cfg.py", CFG.as_bytes());
    w.read("cfg.py");
    let err = w.edit("cfg.py", "", "x", false).unwrap_err();
    assert_eq!(err.code(), "FS_INVALID_ARGS");
    assert_eq!(err.to_string(), "old_string must be a non-empty string");
    assert_eq!(w.get("cfg.py"), CFG.as_bytes());
}

#[test]
fn bc10_failed_edit_leaves_no_temp_files() {
    let w = ws();
    w.put("cfg.py", CFG.as_bytes());
    w.read("cfg.py");
    let _ = w.edit("cfg.py", "    retry = 3", "    retry = 5", false);
    w.edit("cfg.py", "timeout = 30", "timeout = 31", false)
        .unwrap();
    let names: Vec<String> = fs::read_dir(&w.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["cfg.py".to_owned()]);
}

#[test]
fn bc11_crlf_bom_file_edited_with_lf_strings_stays_crlf_with_bom() {
    let w = ws();
    w.put("win.txt", b"\xEF\xBB\xBFalpha\r\nbeta\r\ngamma\r\n");
    // read shows no BOM and no \r
    let shown = w.read("win.txt");
    let d = w.path("win.txt").display().to_string();
    assert_eq!(
        shown,
        format!(
            "<path>{d}</path>\n<type>file</type>\n<content>\n1: alpha\n2: beta\n3: gamma\n\n(End of file - total 3 lines)\n</content>"
        )
    );
    assert_eq!(
        w.edit("win.txt", "alpha\nbeta", "alpha\nBETA\nbeta2", false),
        Ok(1)
    );
    assert_eq!(
        w.get("win.txt"),
        b"\xEF\xBB\xBFalpha\r\nBETA\r\nbeta2\r\ngamma\r\n".to_vec()
    );
}

#[test]
fn bc11_model_sending_crlf_matches_too() {
    let w = ws();
    w.put("win.txt", b"alpha\r\nbeta\r\ngamma\r\n");
    w.read("win.txt");
    assert_eq!(w.edit("win.txt", "beta\r\ngamma", "B\r\nG", false), Ok(1));
    assert_eq!(w.get("win.txt"), b"alpha\r\nB\r\nG\r\n".to_vec());
}

#[test]
fn bc11_lf_copy_stays_lf() {
    let w = ws();
    w.put("lf.txt", b"alpha\nbeta\ngamma\n");
    w.read("lf.txt");
    w.edit("lf.txt", "alpha\nbeta", "alpha\nBETA\nbeta2", false)
        .unwrap();
    assert_eq!(w.get("lf.txt"), b"alpha\nBETA\nbeta2\ngamma\n".to_vec());
}

#[test]
fn bc11_escaped_backslash_r_text_is_treated_as_lf() {
    let w = ws();
    w.put("esc.txt", b"a\\r\\nb\nc\n");
    w.read("esc.txt");
    w.edit("esc.txt", "b\nc", "b\nX\nc", false).unwrap();
    assert_eq!(w.get("esc.txt"), b"a\\r\\nb\nX\nc\n".to_vec());
}

#[test]
fn bc11_mixed_file_new_lines_take_dominant_ending_untouched_keep_theirs() {
    let w = ws();
    // three CRLF lines and one LF line
    w.put("mixed.txt", b"one\r\ntwo\r\nthree\nfour\r\n");
    w.read("mixed.txt");
    w.edit("mixed.txt", "one\ntwo", "one\nONE-B\ntwo", false)
        .unwrap();
    assert_eq!(
        w.get("mixed.txt"),
        b"one\r\nONE-B\r\ntwo\r\nthree\nfour\r\n".to_vec()
    );
}

const MAKEFILE: &[u8] = b"build:\n\tgo build ./...\ntest:\n\tgo test ./...\n";

#[test]
fn bc12_tab_indented_file_read_verbatim_and_edited() {
    let w = ws();
    w.put("Makefile", MAKEFILE);
    let shown = w.read("Makefile");
    assert!(shown.contains("\n2: \tgo build ./...\n"));
    w.edit(
        "Makefile",
        "\tgo test ./...",
        "\tgo test -race ./...",
        false,
    )
    .unwrap();
    assert_eq!(
        w.get("Makefile"),
        b"build:\n\tgo build ./...\ntest:\n\tgo test -race ./...\n".to_vec()
    );
    assert_eq!(w.get("Makefile")[7], 0x09);
}

#[test]
fn bc12_spaces_for_tabs_fails_with_tab_hint() {
    let w = ws();
    w.put("Makefile", MAKEFILE);
    w.read("Makefile");
    let err = w
        .edit("Makefile", "    go test ./...", "    go vet ./...", false)
        .unwrap_err();
    assert_eq!(err.code(), "FS_EDIT_NOT_FOUND");
    let d = w.path("Makefile").display().to_string();
    assert_eq!(
        err.to_string(),
        format!(
            "old_string was not found in \"{d}\"\nHint: line 4 matches only if whitespace is ignored: the file indents it with tabs, old_string uses spaces. read shows whitespace verbatim after the \"N: \" prefix; copy it exactly."
        )
    );
    assert_eq!(w.get("Makefile"), MAKEFILE.to_vec());
}

#[test]
fn bc15_own_edits_refresh_the_snapshot() {
    let w = ws();
    w.put("a.py", b"x = 1\ny = 2\n");
    w.read("a.py");
    w.edit("a.py", "x = 1", "x = 10", false).unwrap();
    w.edit("a.py", "y = 2", "y = 20", false).unwrap();
    assert_eq!(w.get("a.py"), b"x = 10\ny = 20\n".to_vec());
}

#[test]
fn bc15_external_rewrite_is_stale_with_diff_and_keeps_external_content() {
    let w = ws();
    w.put("a.py", b"x = 1\ny = 2\n");
    w.read("a.py");
    w.put("a.py", b"x = 1\ny = 3\n");
    let err = w.edit("a.py", "x = 1", "x = 10", false).unwrap_err();
    assert_eq!(err.code(), "FS_STALE_VERSION");
    let d = w.path("a.py").display().to_string();
    assert_eq!(
        err.to_string(),
        format!(
            "\"{d}\" changed on disk since it was last read in this session; re-read the file, then retry\nChange since last read:\n--- a/{d}\n+++ b/{d}\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3"
        )
    );
    assert_eq!(w.get("a.py"), b"x = 1\ny = 3\n".to_vec());
    // re-reading recovers
    w.read("a.py");
    w.edit("a.py", "x = 1", "x = 10", false).unwrap();
    assert_eq!(w.get("a.py"), b"x = 10\ny = 3\n".to_vec());
}

#[test]
fn bc15_touch_without_content_change_is_not_stale() {
    let w = ws();
    w.put("a.py", b"x = 1\n");
    w.read("a.py");
    let f = fs::File::options()
        .write(true)
        .open(w.path("a.py"))
        .unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
        .unwrap();
    drop(f);
    assert_eq!(w.edit("a.py", "x = 1", "x = 2", false), Ok(1));
}

#[test]
fn bc15_non_overlapping_append_is_still_stale() {
    let w = ws();
    w.put("a.py", b"x = 1\n");
    w.read("a.py");
    w.put("a.py", b"x = 1\nz = 9\n");
    let err = w.edit("a.py", "x = 1", "x = 2", false).unwrap_err();
    assert_eq!(err.code(), "FS_STALE_VERSION");
    assert!(
        err.to_string().ends_with("@@ -1 +1,2 @@\n x = 1\n+z = 9"),
        "{err}"
    );
    assert_eq!(w.get("a.py"), b"x = 1\nz = 9\n".to_vec());
}

#[test]
fn bc15_deleted_file_is_stale() {
    let w = ws();
    w.put("a.py", b"x = 1\n");
    w.read("a.py");
    fs::remove_file(w.path("a.py")).unwrap();
    let err = w.edit("a.py", "x = 1", "x = 2", false).unwrap_err();
    assert_eq!(err.code(), "FS_STALE_VERSION");
}

fn elf() -> Vec<u8> {
    let mut v = b"\x7fELF\x02\x01\x01\0".to_vec();
    let mut x: u32 = 12345;
    for _ in 0..65536 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        v.push((x >> 16) as u8);
    }
    v
}

#[test]
fn bc16_binary_files_are_refused_without_raw_bytes() {
    let w = ws();
    w.put("tool.bin", &elf());
    w.put("logo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    w.put("noext", &elf());
    let d = |p: &str| w.path(p).display().to_string();
    for (p, kind, size) in [
        ("tool.bin", "ELF executable", 65544),
        ("logo.png", "PNG image", 16),
        ("noext", "ELF executable", 65544),
    ] {
        let t = w.target(p, Access::Read);
        let err = w.fs.read_text(&t, caps()).unwrap_err();
        assert_eq!(err.code(), "FS_NOT_TEXT");
        assert_eq!(
            err.to_string(),
            format!(
                "cannot read \"{}\": binary file ({kind}, {size} bytes)",
                d(p)
            )
        );
    }
    // edit and write on a binary target are refused too
    let t = w.target("tool.bin", Access::Write);
    let req = EditRequest {
        old_string: "ELF".into(),
        new_string: "FLE".into(),
        replace_all: false,
    };
    assert_eq!(
        w.fs.edit_text(&t, &req, None).unwrap_err().code(),
        "FS_NOT_TEXT"
    );
    assert_eq!(
        w.fs.write_text(&t, "x", &WriteIntent::Unconditional)
            .unwrap_err()
            .code(),
        "FS_NOT_TEXT"
    );
    assert_eq!(w.get("tool.bin"), elf());
}

#[test]
fn bc16_utf8_chinese_reads_normally_empty_file_is_empty_text_invalid_utf8_refused() {
    let w = ws();
    w.put("ctrl.v", "// 控制模块\nmodule ctrl;\n".as_bytes());
    w.put("empty.txt", b"");
    w.put("latin1.txt", b"caf\xe9\n");
    let d = |p: &str| w.path(p).display().to_string();
    assert_eq!(
        w.read("ctrl.v"),
        format!(
            "<path>{}</path>\n<type>file</type>\n<content>\n1: // 控制模块\n2: module ctrl;\n\n(End of file - total 2 lines)\n</content>",
            d("ctrl.v")
        )
    );
    assert_eq!(
        w.read("empty.txt"),
        format!(
            "<path>{}</path>\n<type>file</type>\n<content>\n(End of file - total 0 lines)\n</content>",
            d("empty.txt")
        )
    );
    let t = w.target("latin1.txt", Access::Read);
    let err = w.fs.read_text(&t, caps()).unwrap_err();
    assert_eq!(err.code(), "FS_NOT_TEXT");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read \"{}\": not valid UTF-8 text (5 bytes)",
            d("latin1.txt")
        )
    );
}

#[test]
fn write_without_read_of_existing_file_is_not_observed() {
    let w = ws();
    w.put("a.txt", b"old\n");
    let err = w.write("a.txt", "new\n").unwrap_err();
    assert_eq!(err.code(), "FS_NOT_OBSERVED");
    let d = w.path("a.txt").display().to_string();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot write \"{d}\": the file exists and has not been read in this session; read the file, then retry"
        )
    );
    assert_eq!(w.get("a.txt"), b"old\n".to_vec());
    // edit without read
    let err = w.edit("a.txt", "old", "new", false).unwrap_err();
    assert_eq!(err.code(), "FS_NOT_OBSERVED");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot edit \"{d}\": the file has not been read in this session; read the file, then retry"
        )
    );
}

#[test]
fn create_new_file_without_read_is_ok_and_creates_parents() {
    let w = ws();
    assert_eq!(
        w.write("sub/dir/new.txt", "hello\n"),
        Ok(WriteOperation::Create)
    );
    assert_eq!(w.get("sub/dir/new.txt"), b"hello\n".to_vec());
    // and the session may now overwrite it (own write refreshed the observation)
    assert_eq!(
        w.write("sub/dir/new.txt", "bye\n"),
        Ok(WriteOperation::Update)
    );
    assert_eq!(w.get("sub/dir/new.txt"), b"bye\n".to_vec());
}

#[test]
fn overwrite_after_read_then_external_change_is_stale() {
    let w = ws();
    w.put("a.txt", b"one\n");
    w.read("a.txt");
    w.put("a.txt", b"two\n");
    assert_eq!(
        w.write("a.txt", "three\n").unwrap_err().code(),
        "FS_STALE_VERSION"
    );
    assert_eq!(w.get("a.txt"), b"two\n".to_vec());
}

#[test]
fn overwrite_keeps_bom_and_crlf_of_existing_file() {
    let w = ws();
    w.put("w.txt", b"\xEF\xBB\xBFa\r\nb\r\n");
    w.read("w.txt");
    w.write("w.txt", "x\ny\n").unwrap();
    assert_eq!(w.get("w.txt"), b"\xEF\xBB\xBFx\r\ny\r\n".to_vec());
}

#[test]
fn permissions_preserved_after_atomic_write_and_edit() {
    let w = ws();
    w.put("run.sh", b"#!/bin/sh\necho hi\n");
    fs::set_permissions(w.path("run.sh"), fs::Permissions::from_mode(0o750)).unwrap();
    w.read("run.sh");
    w.edit("run.sh", "echo hi", "echo bye", false).unwrap();
    assert_eq!(
        fs::metadata(w.path("run.sh")).unwrap().permissions().mode() & 0o7777,
        0o750
    );
    w.write("run.sh", "#!/bin/sh\nexit 0\n").unwrap();
    assert_eq!(
        fs::metadata(w.path("run.sh")).unwrap().permissions().mode() & 0o7777,
        0o750
    );
    assert_eq!(w.get("run.sh"), b"#!/bin/sh\nexit 0\n".to_vec());
}

#[test]
fn edit_through_symlink_inside_workspace_keeps_the_link() {
    let w = ws();
    w.put("real.txt", b"a\n");
    std::os::unix::fs::symlink("real.txt", w.path("link.txt")).unwrap();
    w.read("link.txt");
    w.edit("link.txt", "a", "b", false).unwrap();
    assert!(
        fs::symlink_metadata(w.path("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(w.get("real.txt"), b"b\n".to_vec());
}

#[test]
fn path_escapes_are_refused_with_typed_code() {
    let w = ws();
    fs::write(w.root.parent().unwrap().join("x"), b"secret").unwrap();
    std::os::unix::fs::symlink("/etc", w.path("etc-link")).unwrap();
    std::os::unix::fs::symlink(w.root.parent().unwrap().join("x"), w.path("x-link")).unwrap();
    let root = fs::canonicalize(&w.root).unwrap();
    for (p, access) in [
        ("../x", Access::Read),
        ("../x", Access::Write),
        ("/etc/passwd", Access::Read),
        ("etc-link/passwd", Access::Read),
        ("x-link", Access::Read),
        ("x-link", Access::Write),
        ("sub/../../x", Access::Read),
    ] {
        let err = w.fs.resolve(p, &w.root, access).unwrap_err();
        assert_eq!(err.code(), "FS_OUTSIDE_WORKSPACE", "{p}");
        assert!(
            err.to_string().ends_with(&format!(
                "is outside the workspace \"{}\" and is refused by the filesystem policy",
                root.display()
            )),
            "{err}"
        );
    }
    let err = w.fs.resolve("x-link", &w.root, Access::Read).unwrap_err();
    let outside = fs::canonicalize(w.root.parent().unwrap().join("x")).unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read \"{}\" (it resolves to \"{}\"): the path is outside the workspace \"{}\" and is refused by the filesystem policy",
            w.path("x-link").display(),
            outside.display(),
            root.display()
        )
    );
    assert_eq!(
        w.fs.resolve("/etc/passwd", &w.root, Access::Read)
            .unwrap_err()
            .to_string(),
        format!(
            "cannot read \"/etc/passwd\": the path is outside the workspace \"{}\" and is refused by the filesystem policy",
            root.display()
        )
    );
    // `..` that stays inside is fine
    fs::create_dir(w.path("sub")).unwrap();
    w.put("in.txt", b"ok\n");
    assert_eq!(
        w.fs.resolve("sub/../in.txt", &w.root, Access::Read)
            .unwrap()
            .key,
        root.join("in.txt")
    );
}

#[test]
fn policy_may_allow_outside_reads() {
    let w = ws();
    let fs2 = FsService::new(FsConfig {
        allow_read_outside_workspace: true,
        ..FsConfig::default()
    });
    assert!(fs2.resolve("/etc/passwd", &w.root, Access::Read).is_ok());
    assert_eq!(
        fs2.resolve("/etc/passwd", &w.root, Access::Write)
            .unwrap_err()
            .code(),
        "FS_OUTSIDE_WORKSPACE"
    );
}

#[test]
fn read_grant_allows_reads_not_writes_and_ends_with_its_registration() {
    let w = ws();
    let extra = w.root.parent().unwrap().join("spill");
    fs::create_dir(&extra).unwrap();
    fs::write(extra.join("f.txt"), b"spilled\n").unwrap();
    let p = extra.join("f.txt").display().to_string();
    assert_eq!(
        w.fs.resolve(&p, &w.root, Access::Read).unwrap_err().code(),
        "FS_OUTSIDE_WORKSPACE"
    );
    let kernel = dsh_kernel::Kernel::new();
    let ctx = kernel.root().child("spill").unwrap();
    let reg = w.fs.grant_read_root(&ctx, &extra).unwrap();
    let t = w.fs.resolve(&p, &w.root, Access::Read).unwrap();
    assert_eq!(
        w.fs.read_text(&t, caps()).unwrap().window.lines[0].text,
        "spilled"
    );
    assert_eq!(
        w.fs.resolve(&p, &w.root, Access::Write).unwrap_err().code(),
        "FS_OUTSIDE_WORKSPACE"
    );
    drop(reg);
    assert_eq!(
        w.fs.resolve(&p, &w.root, Access::Read).unwrap_err().code(),
        "FS_OUTSIDE_WORKSPACE"
    );
}

#[test]
fn read_window_offset_limit_and_caps() {
    let w = ws();
    let body: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    w.put("ten.txt", body.as_bytes());
    let t = w.target("ten.txt", Access::Read);
    let d = t.display_path.clone();
    let out =
        w.fs.read_text(
            &t,
            WindowCaps {
                offset: 3,
                limit: 2,
                ..caps()
            },
        )
        .unwrap();
    assert_eq!(
        text::format_read(&d, &out.window),
        format!(
            "<path>{d}</path>\n<type>file</type>\n<content>\n3: line 3\n4: line 4\n\n(Showing lines 3-4 of 10. Use offset=5 to continue.)\n</content>"
        )
    );
    let out =
        w.fs.read_text(
            &t,
            WindowCaps {
                max_bytes: 12,
                ..caps()
            },
        )
        .unwrap();
    assert_eq!(
        text::format_read(&d, &out.window),
        format!(
            "<path>{d}</path>\n<type>file</type>\n<content>\n1: line 1\n\n(Output capped. Showing lines 1-1. Use offset=2 to continue.)\n</content>"
        )
    );
    let err =
        w.fs.read_text(
            &t,
            WindowCaps {
                offset: 11,
                ..caps()
            },
        )
        .unwrap_err();
    assert_eq!(err.code(), "FS_NOT_FOUND");
    assert_eq!(
        err.to_string(),
        format!("offset 11 is out of range for \"{d}\" (10 lines)")
    );
}

#[test]
fn read_errors_not_found_directory_too_large() {
    let w = ws();
    fs::create_dir(w.path("dir")).unwrap();
    let t = w.target("missing.txt", Access::Read);
    assert_eq!(
        w.fs.read_text(&t, caps()).unwrap_err().code(),
        "FS_NOT_FOUND"
    );
    let t = w.target("dir", Access::Read);
    assert_eq!(
        w.fs.read_text(&t, caps()).unwrap_err().code(),
        "FS_NOT_REGULAR_FILE"
    );
    let small = FsService::new(FsConfig {
        max_read_file_bytes: 4,
        max_edit_file_bytes: 4,
        ..FsConfig::default()
    });
    w.put("big.txt", b"12345");
    let t = small.resolve("big.txt", &w.root, Access::Read).unwrap();
    let err = small.read_text(&t, caps()).unwrap_err();
    assert_eq!(err.code(), "FS_TOO_LARGE");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read \"{}\": 5 bytes exceeds the 4-byte limit",
            t.display_path
        )
    );
    assert_eq!(
        small
            .write_text(&t, "123456", &WriteIntent::Unconditional)
            .unwrap_err()
            .code(),
        "FS_TOO_LARGE"
    );
}

#[test]
fn huge_single_line_read_is_bounded_and_streamed() {
    let w = ws();
    let mut s = "x".repeat(3 * 1024 * 1024);
    s.push_str("END");
    w.put("one.txt", s.as_bytes());
    let t = w.target("one.txt", Access::Read);
    let out = w.fs.read_text(&t, caps()).unwrap();
    assert_eq!(out.window.total_lines, 1);
    assert_eq!(
        out.window.lines[0].text,
        format!("{}... (line truncated to 2000 chars)", "x".repeat(2000))
    );
    assert_eq!(out.observed.version, dsh_fs::FsVersion::of(s.as_bytes()));
    assert_eq!(out.observed.snapshot, None);
}

#[test]
fn multibyte_chars_split_across_chunks_decode() {
    let w = ws();
    // 'é' (2 bytes) straddles the 8 KiB sample boundary and 64 KiB chunk boundaries
    let mut s = "a".repeat(8191);
    for _ in 0..40_000 {
        s.push('é');
    }
    s.push('\n');
    w.put("u.txt", s.as_bytes());
    let t = w.target("u.txt", Access::Read);
    let out =
        w.fs.read_text(
            &t,
            WindowCaps {
                max_line_chars: 100_000,
                max_bytes: 1 << 20,
                ..caps()
            },
        )
        .unwrap();
    assert_eq!(out.window.lines[0].text, s.trim_end());
}

#[test]
fn unified_diff_meta_format() {
    assert_eq!(
        text::unified_diff("f.txt", "a\nb\n", "a\nc\n"),
        "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    );
}

#[test]
fn unified_diff_cuts_long_lines_to_the_change_and_a_fixed_context() {
    let c = text::DIFF_CONTEXT_BYTES;
    let long_ctx = "c".repeat(3 * c);
    let before = format!(
        "{long_ctx}\n{}old{}\nend\n",
        "x".repeat(5 * c),
        "y".repeat(c)
    );
    let after = format!(
        "{long_ctx}\n{}new{}\nend\n",
        "x".repeat(5 * c),
        "y".repeat(c)
    );
    let ctx = format!("{}[… {c} bytes …]{}", "c".repeat(c), "c".repeat(c));
    let head = format!("[… {} bytes …]{}", 4 * c, "x".repeat(c));
    let tail = "y".repeat(c);
    assert_eq!(
        text::unified_diff("f.txt", &before, &after),
        format!(
            "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n {ctx}\n-{head}old{tail}\n+{head}new{tail}\n end\n"
        )
    );
    // a cut inside a multi-byte character moves to keep the character whole
    let before = format!("{}Xb{}", "a".repeat(3 * c), "é".repeat(c));
    let after = format!("{}Yb{}", "a".repeat(3 * c), "é".repeat(c));
    let side = |m: &str| {
        format!(
            "[… {} bytes …]{}{m}b{}[… {} bytes …]\n\\ No newline at end of file\n",
            2 * c,
            "a".repeat(c),
            "é".repeat(c / 2 - 1),
            c + 2
        )
    };
    assert_eq!(
        text::unified_diff("f", &before, &after),
        format!(
            "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-{}+{}",
            side("X"),
            side("Y")
        )
    );
}

#[test]
fn cancelled_read_is_aborted() {
    let w = ws();
    w.put("a.txt", b"a\n");
    let t = w.target("a.txt", Access::Read);
    let token = dsh_kernel::CancellationToken::new();
    token.cancel();
    let err = w.fs.read_text_with(&t, caps(), &token).unwrap_err();
    assert_eq!(err.code(), "FS_ABORTED");
    assert_eq!(err.to_string(), "read aborted");
}

#[test]
fn window_counts_every_line_after_it_fills_across_chunks() {
    let w = ws();
    // 200_000 lines (> several 64 KiB chunks), last line without newline
    let mut s: String = (1..200_000).map(|i| format!("row {i}\r\n")).collect();
    s.push_str("last");
    w.put("rows.txt", s.as_bytes());
    let t = w.target("rows.txt", Access::Read);
    let out =
        w.fs.read_text(
            &t,
            WindowCaps {
                offset: 150_000,
                limit: 2,
                ..caps()
            },
        )
        .unwrap();
    assert_eq!(out.window.total_lines, 200_000);
    assert_eq!(
        out.window.lines,
        vec![
            dsh_fs::WindowLine {
                number: 150_000,
                text: "row 150000".into()
            },
            dsh_fs::WindowLine {
                number: 150_001,
                text: "row 150001".into()
            },
        ]
    );
    let out =
        w.fs.read_text(
            &t,
            WindowCaps {
                offset: 200_000,
                limit: 5,
                ..caps()
            },
        )
        .unwrap();
    assert_eq!(
        out.window.lines,
        vec![dsh_fs::WindowLine {
            number: 200_000,
            text: "last".into()
        }]
    );
    // with a trailing newline the count is the same
    s.push('\n');
    w.put("rows.txt", s.as_bytes());
    let out =
        w.fs.read_text(&t, WindowCaps { limit: 1, ..caps() })
            .unwrap();
    assert_eq!(out.window.total_lines, 200_000);
}

#[test]
fn parent_that_is_a_file_is_not_directory() {
    let w = ws();
    w.put("file.txt", b"x\n");
    let t = w.target("file.txt/inner.txt", Access::Read);
    let err = w.fs.read_text(&t, caps()).unwrap_err();
    assert_eq!(err.code(), "FS_NOT_DIRECTORY");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read \"{}\": a parent path segment is not a directory",
            w.path("file.txt/inner.txt").display()
        )
    );
    let t = w.target("file.txt/inner.txt", Access::Write);
    assert_eq!(
        w.fs.write_text(&t, "y", &WriteIntent::CreateIfAbsent)
            .unwrap_err()
            .code(),
        "FS_NOT_DIRECTORY"
    );
}

/// Relative paths resolve against the workspace's `cwd`, the fence is its `root`.
#[test]
fn a_workspace_cwd_below_the_root_resolves_parent_paths_inside() {
    let w = ws();
    let root = fs::canonicalize(&w.root).unwrap();
    fs::create_dir(w.path("sub")).unwrap();
    w.put("top.txt", b"top\n");
    fs::write(root.parent().unwrap().join("x"), b"outside\n").unwrap();
    let dirs = dsh_fs::Workspace {
        root: root.clone(),
        cwd: root.join("sub"),
    };
    let t = w.fs.resolve("../top.txt", &dirs, Access::Write).unwrap();
    assert_eq!(t.key, root.join("top.txt"));
    assert_eq!(t.display_path, root.join("top.txt").display().to_string());
    let err = w.fs.resolve("../../x", &dirs, Access::Read).unwrap_err();
    assert_eq!(err.code(), "FS_OUTSIDE_WORKSPACE");
    assert!(
        err.to_string().ends_with(&format!(
            "is outside the workspace \"{}\" and is refused by the filesystem policy",
            root.display()
        )),
        "{err}"
    );
    // Approved: the fence is lifted, the base stays the cwd.
    assert_eq!(
        w.fs.resolve_approved("../../x", &dirs, Access::Read)
            .unwrap()
            .key,
        root.parent().unwrap().join("x")
    );
}
