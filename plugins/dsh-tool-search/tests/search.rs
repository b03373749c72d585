//! grep/glob engine tests on a temporary tree with `.gitignore`, a `.git` directory, hidden,
//! binary and non-UTF-8 files: exact outputs, caps, ordering, confinement.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use dsh_tool_search::glob::{glob, render as render_glob};
use dsh_tool_search::grep::{grep, render as render_grep};
use dsh_tool_search::{GlobOptions, GlobRequest, GrepOptions, GrepRequest, paths};

fn write(root: &Path, rel: &str, bytes: &[u8], mtime_secs: u64) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, bytes).unwrap();
    let f = fs::File::options().write(true).open(&p).unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_secs(mtime_secs))
        .unwrap();
}

fn tree() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    write(r, ".git/config", b"needle\n", 1000);
    write(r, ".git/x.rs", b"needle\n", 9000);
    write(r, ".gitignore", b"ignored.txt\nbuild/\n", 1000);
    write(r, "ignored.txt", b"needle\n", 1000);
    write(r, "build/out.rs", b"needle\n", 2000);
    write(r, ".hidden.rs", b"needle\n", 2000);
    write(
        r,
        "src/a.rs",
        b"fn needle() {}\nlet x = 1;\nneedle again\n",
        3000,
    );
    write(r, "src/b.txt", b"needle\n", 1500);
    write(r, "z.rs", b"NEEDLE\nneedle\r\n", 4000);
    write(r, "bin.dat", b"needle\0binary\n", 1000);
    write(r, "bad.txt", b"needle \xff\n", 1000);
    let root = paths::canonical_root(r).unwrap();
    (d, root)
}

fn req(pattern: &str, path: Option<&str>, include: Option<&str>) -> GrepRequest {
    GrepRequest {
        pattern: pattern.into(),
        path: path.map(Into::into),
        include: include.map(Into::into),
    }
}

#[test]
fn grep_respects_gitignore_hidden_binary_and_vcs_and_sorts_by_path() {
    let (_d, root) = tree();
    let out = grep(
        &root,
        &req("needle", None, None),
        &GrepOptions::default(),
        None,
    )
    .unwrap();
    assert_eq!(
        render_grep(&out),
        "Found 5 matches\n\nbad.txt\nLine 1: (line is not valid UTF-8)\n\nsrc/a.rs\nLine 1: fn needle() {}\nLine 3: needle again\n\nsrc/b.txt\nLine 1: needle\n\nz.rs\nLine 2: needle"
    );
    assert_eq!((out.total_matches, out.truncated), (5, false));
}

#[test]
fn grep_include_path_and_cap() {
    let (_d, root) = tree();
    // ripgrep semantics: an include glob is an override, so it also admits a hidden file that
    // matches it (but never descends into an ignored directory).
    let out = grep(
        &root,
        &req("needle", None, Some("*.rs")),
        &GrepOptions::default(),
        None,
    )
    .unwrap();
    assert_eq!(
        render_grep(&out),
        "Found 4 matches\n\n.hidden.rs\nLine 1: needle\n\nsrc/a.rs\nLine 1: fn needle() {}\nLine 3: needle again\n\nz.rs\nLine 2: needle"
    );
    let out = grep(
        &root,
        &req("needle", Some("src"), Some("*.{txt,md}")),
        &GrepOptions::default(),
        None,
    )
    .unwrap();
    assert_eq!(
        render_grep(&out),
        "Found 1 match\n\nsrc/b.txt\nLine 1: needle"
    );
    let out = grep(
        &root,
        &req("needle", Some("src/a.rs"), None),
        &GrepOptions::default(),
        None,
    )
    .unwrap();
    assert_eq!(out.total_matches, 2);
    let opts = GrepOptions {
        max_matches: 2,
        ..GrepOptions::default()
    };
    let out = grep(&root, &req("needle", None, None), &opts, None).unwrap();
    assert_eq!(
        render_grep(&out),
        "Found 2 of 5 matches\n\nbad.txt\nLine 1: (line is not valid UTF-8)\n\nsrc/a.rs\nLine 1: fn needle() {}\n\n(Showing the first 2 of 5 matches in path order; narrow pattern, path, or include to see more.)"
    );
    let out = grep(
        &root,
        &req("absent_xyz", None, None),
        &GrepOptions::default(),
        None,
    )
    .unwrap();
    assert_eq!(render_grep(&out), "No matches found");
    let opts = GrepOptions {
        max_line_bytes: 5,
        ..GrepOptions::default()
    };
    let out = grep(&root, &req("again", None, None), &opts, None).unwrap();
    assert_eq!(out.matches[0].line, "needl (line truncated)");
}

#[test]
fn grep_rejects_bad_args_and_escapes() {
    let (d, root) = tree();
    let o = GrepOptions::default();
    let code = |r: GrepRequest| grep(&root, &r, &o, None).unwrap_err().code();
    assert_eq!(code(req("", None, None)), "SEARCH_INVALID_ARGS");
    assert_eq!(code(req("(", None, None)), "SEARCH_INVALID_PATTERN");
    assert_eq!(code(req("x", Some(" "), None)), "SEARCH_INVALID_ARGS");
    assert_eq!(code(req("x", None, Some("!*.rs"))), "SEARCH_INVALID_ARGS");
    assert_eq!(
        code(req("x", None, Some("*.rs,*.ts"))),
        "SEARCH_INVALID_ARGS"
    );
    assert_eq!(
        code(req("x", Some(".."), None)),
        "SEARCH_PATH_OUTSIDE_WORKSPACE"
    );
    assert_eq!(
        code(req("x", Some("src/../../etc"), None)),
        "SEARCH_PATH_OUTSIDE_WORKSPACE"
    );
    assert_eq!(
        code(req("x", Some("/etc"), None)),
        "SEARCH_PATH_OUTSIDE_WORKSPACE"
    );
    assert_eq!(code(req("x", Some("nope"), None)), "SEARCH_PATH_NOT_FOUND");
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), d.path().join("link")).unwrap();
    assert_eq!(
        code(req("x", Some("link"), None)),
        "SEARCH_PATH_OUTSIDE_WORKSPACE"
    );
}

#[test]
fn grep_is_deterministic_under_parallelism_with_caps() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..400 {
        write(
            d.path(),
            &format!("d{}/f{:03}.txt", i % 7, i),
            b"x\nhit\nhit\n",
            1000,
        );
    }
    let root = paths::canonical_root(d.path()).unwrap();
    let opts = GrepOptions {
        max_matches: 7,
        threads: 4,
        ..GrepOptions::default()
    };
    let first = grep(&root, &req("hit", None, None), &opts, None).unwrap();
    let shown: Vec<String> = first
        .matches
        .iter()
        .map(|m| format!("{}:{}", m.path, m.line_number))
        .collect();
    assert_eq!(
        shown,
        [
            "d0/f000.txt:2",
            "d0/f000.txt:3",
            "d0/f007.txt:2",
            "d0/f007.txt:3",
            "d0/f014.txt:2",
            "d0/f014.txt:3",
            "d0/f021.txt:2"
        ]
    );
    assert_eq!((first.total_matches, first.truncated), (800, true));
    for _ in 0..5 {
        assert_eq!(
            grep(&root, &req("hit", None, None), &opts, None).unwrap(),
            first
        );
    }
}

#[test]
fn glob_includes_hidden_and_ignored_excludes_vcs_newest_first() {
    let (_d, root) = tree();
    let out = glob(
        &root,
        &GlobRequest {
            pattern: "*.rs".into(),
            path: None,
        },
        &GlobOptions::default(),
        None,
    )
    .unwrap();
    assert_eq!(
        out.paths,
        ["z.rs", "src/a.rs", ".hidden.rs", "build/out.rs"]
    );
    assert_eq!(
        render_glob(&out),
        "z.rs\nsrc/a.rs\n.hidden.rs\nbuild/out.rs"
    );
    let out = glob(
        &root,
        &GlobRequest {
            pattern: "src/*".into(),
            path: None,
        },
        &GlobOptions::default(),
        None,
    )
    .unwrap();
    assert_eq!(out.paths, ["src/a.rs", "src/b.txt"]);
    let out = glob(
        &root,
        &GlobRequest {
            pattern: "*.rs".into(),
            path: Some("src".into()),
        },
        &GlobOptions::default(),
        None,
    )
    .unwrap();
    assert_eq!(
        (out.root.as_str(), out.paths.clone()),
        ("src", vec!["src/a.rs".to_string()])
    );
    let out = glob(
        &root,
        &GlobRequest {
            pattern: "*".into(),
            path: None,
        },
        &GlobOptions {
            max_results: 3,
            threads: 2,
        },
        None,
    )
    .unwrap();
    assert_eq!(out.total_paths, 9);
    assert_eq!(
        render_glob(&out),
        "z.rs\nsrc/a.rs\n.hidden.rs\n\n(Showing 3 of 9 paths, newest first; narrow pattern or path to see more.)"
    );
    let out = glob(
        &root,
        &GlobRequest {
            pattern: "*.none".into(),
            path: None,
        },
        &GlobOptions::default(),
        None,
    )
    .unwrap();
    assert_eq!(render_glob(&out), "No files found");
    let e = glob(
        &root,
        &GlobRequest {
            pattern: "*".into(),
            path: Some("../".into()),
        },
        &GlobOptions::default(),
        None,
    );
    assert_eq!(e.unwrap_err().code(), "SEARCH_PATH_OUTSIDE_WORKSPACE");
    let e = glob(
        &root,
        &GlobRequest {
            pattern: "*".into(),
            path: Some("z.rs".into()),
        },
        &GlobOptions::default(),
        None,
    );
    assert_eq!(e.unwrap_err().code(), "SEARCH_NOT_A_DIRECTORY");
}

#[test]
fn cancelled_search_reports_cancelled() {
    let (_d, root) = tree();
    let flag = std::sync::atomic::AtomicBool::new(true);
    let e = grep(
        &root,
        &req("needle", None, None),
        &GrepOptions::default(),
        Some(&flag),
    )
    .unwrap_err();
    assert_eq!(e.code(), "SEARCH_CANCELLED");
}
