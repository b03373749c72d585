//! End-to-end tests of the built `dsh` binary for the tools-and-storage faults of issue 13
//! ("Faults and bad input"): each test reproduces one fault through the binary against the
//! in-process replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1).
//!
//! - `edit_of_a_long_line_has_a_bounded_record`: one word edited in a 9 MB single-line file; the
//!   log record of that edit is bounded by the changed bytes plus the fixed diff context
//!   (`dsh_fs::text::DIFF_CONTEXT_BYTES`), not the whole old and new line.
//! - `spill_files_live_in_the_session_folder_on_*`,
//!   `an_ephemeral_run_leaves_no_spill_folder_behind`: spill files go to the session's own
//!   folder (both backends), stay readable and greppable after `--resume`, are removed by
//!   `dsh sessions delete`, and nothing stays in TMPDIR (a `bash` output beyond the shell's own
//!   cap: `faults_spill.rs`).
//! - `an_approved_outside_write_in_the_shell_writes_the_file`: the interactive shell, the
//!   approval answered `y` on stdin; the write outside the workspace happens.
//! - `a_second_writer_is_refused_before_any_work_on_both_backends`: a resume of a session held
//!   by another process fails with `SESSION_LOCKED` before the model is called, on SQLite as on
//!   JSONL, and `sessions delete` of it is refused.
//!
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, Shell, code, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

/// "Did not hang" bound for one dsh run (generous; runs take well under a second).
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// Runs `cmd` with this file's hang guard.
fn run(cmd: Command) -> Output {
    common::e2e::run(cmd, HANG_LIMIT)
}

// ---------------------------------------------------------------------------------------------
// Harness (trimmed copy of `e2e_exec.rs`)
// ---------------------------------------------------------------------------------------------

/// The shared sandbox plus this file's helpers.
struct Env(Sandbox);

impl std::ops::Deref for Env {
    type Target = Sandbox;

    fn deref(&self) -> &Sandbox {
        &self.0
    }
}

impl Env {
    fn new() -> Self {
        Self(Sandbox::new())
    }

    /// `dsh <args>` in the workspace with the hermetic environment and this file's key.
    fn dsh(&self, url: &str, args: &[&str]) -> Command {
        self.0.dsh(url, "sk-faults-store", args)
    }

    /// Every file under `dir`, recursively, sorted.
    fn files_under(dir: &Path) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, &mut out);
        out.sort();
        out
    }

    /// The only `session.jsonl` under `$DSH_HOME`.
    fn session_log(&self) -> PathBuf {
        let logs: Vec<PathBuf> = Self::files_under(&self.home)
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "session.jsonl"))
            .collect();
        assert_eq!(logs.len(), 1, "{logs:?}");
        logs[0].clone()
    }
}

/// The stored log's lines whose `type` is `kind`.
fn records_of(log: &Path, kind: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["type"] == kind
        })
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 1. An edit of one long line
// ---------------------------------------------------------------------------------------------

#[test]
fn edit_of_a_long_line_has_a_bounded_record() {
    let env = Env::new();
    let half = 4_500_000;
    let big = format!("{}needle{}", "a".repeat(half), "b".repeat(half));
    let path = env.repo.join("big.txt");
    std::fs::write(&path, &big).unwrap();
    let p = path.display().to_string();
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": p}]]},
        {"tool_calls": [["edit", {"file_path": p, "old_string": "needle", "new_string": "pin"}]]},
        {"text": "done"},
    ]));
    let out = run(env.dsh(&replay.url(), &["exec", "edit the big file"]));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    assert_eq!(replay.chat_requests().len(), 3);
    let after = std::fs::read_to_string(&path).unwrap();
    assert_eq!(after.len(), 2 * half + 3);
    assert_eq!(&after[half..half + 3], "pin");

    let results = records_of(&env.session_log(), "tool/result");
    assert_eq!(results.len(), 2);
    let edit = &results[1];
    // the record carries the changed bytes and at most DIFF_CONTEXT_BYTES of unchanged text on
    // each side of them, in the `-` and the `+` line, plus fixed JSON and diff framing
    let c = dsh_fs::text::DIFF_CONTEXT_BYTES;
    assert!(
        edit.len() < 4 * c + 1024,
        "edit record is {} bytes",
        edit.len()
    );
    assert!(edit.len() < 64 * 1024);
    eprintln!("edit record: {} bytes", edit.len());
    let v: Value = serde_json::from_str(edit).unwrap();
    let elided = half - c;
    let expected = format!(
        "--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-[… {elided} bytes …]{a}needle{b}[… {elided} bytes …]\n\\ No newline at end of file\n+[… {elided} bytes …]{a}pin{b}[… {elided} bytes …]\n\\ No newline at end of file\n",
        a = "a".repeat(c),
        b = "b".repeat(c),
    );
    assert_eq!(v["data"]["meta"]["diff"], json!(expected));
    assert_eq!(v["data"]["meta"]["replacements"], json!(1));
}

// ---------------------------------------------------------------------------------------------
// 4. One writer per session, on both backends
// ---------------------------------------------------------------------------------------------

/// `-c` flags selecting `backend`.
fn backend_args(backend: &str) -> Vec<String> {
    vec!["-c".into(), format!("persistence.backend=\"{backend}\"")]
}

/// Polls `dsh sessions list --json` until one session is stored; returns its id.
fn wait_for_session(env: &Env, backend: &str) -> String {
    let deadline = std::time::Instant::now() + HANG_LIMIT;
    loop {
        let mut args = backend_args(backend);
        args.extend(["sessions".into(), "list".into(), "--json".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(env.dsh("http://127.0.0.1:9", &args));
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            if let Some(id) = v
                .as_array()
                .and_then(|a| a.first())
                .and_then(|s| s["id"].as_str())
            {
                return id.to_owned();
            }
        }
        assert!(std::time::Instant::now() < deadline, "no session stored");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Process 1 holds a session (blocked in a `bash` call until `release` exists); process 2
/// resumes it. Returns process 2's exit code, its stderr (session id written `<id>`), the number
/// of model requests process 2 sent, and `$DSH_HOME` (gone when this returns: only its path).
fn second_writer(backend: &str) -> (i32, String, usize, PathBuf) {
    let env = Env::new();
    let wait = "while [ ! -e release ]; do sleep 0.05; done; echo released";
    let first = Replay::start(json!([
        {"tool_calls": [["bash", {"command": wait, "description": "Wait"}]]},
        {"text": "first done"},
    ]));
    let mut args = backend_args(backend);
    args.extend(["exec".into(), "hold the session".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let p1 = env.dsh(&first.url(), &args).spawn().unwrap();
    let id = wait_for_session(&env, backend);
    // process 1 is inside its tool call: the call was stored and no result yet
    let deadline = std::time::Instant::now() + HANG_LIMIT;
    while first.chat_requests().len() != 1 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }

    let second = Replay::start(json!([{"text": "second done"}]));
    let mut args = backend_args(backend);
    args.extend([
        "exec".into(),
        "--resume".into(),
        id.clone(),
        "write again".into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(env.dsh(&second.url(), &args));
    let p2 = (
        code(out.status),
        text(&out.stderr),
        second.chat_requests().len(),
    );

    // nor may the live session be deleted under its writer
    let mut args = backend_args(backend);
    args.extend(["sessions".into(), "delete".into(), id.clone()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let del = run(env.dsh("http://127.0.0.1:9", &args));
    assert_eq!(code(del.status), 1, "stderr: {}", text(&del.stderr));
    assert!(
        text(&del.stderr).contains("is locked by another writer"),
        "{}",
        text(&del.stderr)
    );

    std::fs::write(env.repo.join("release"), "").unwrap();
    let out1 = p1.wait_with_output().unwrap();
    assert_eq!(code(out1.status), 0, "stderr: {}", text(&out1.stderr));
    assert_eq!(text(&out1.stdout), "first done\n");
    (p2.0, p2.1.replace(&id, "<id>"), p2.2, env.home.clone())
}

#[test]
fn a_second_writer_is_refused_before_any_work_on_both_backends() {
    let (jsonl_code, jsonl_err, jsonl_requests, jsonl_home) = second_writer("jsonl");
    let (sqlite_code, sqlite_err, sqlite_requests, sqlite_home) = second_writer("sqlite");
    eprintln!("jsonl: {jsonl_err}\nsqlite: {sqlite_err}");
    assert_eq!(jsonl_requests, 0);
    assert_eq!(
        sqlite_requests, 0,
        "process 2 called the model: {sqlite_err}"
    );
    assert_eq!(jsonl_code, 1);
    assert_eq!(sqlite_code, jsonl_code);
    let expected = |lock: &str| {
        format!(
            "error: resuming session `<id>`: agent factory failed: session \"<id>\" is locked by another writer ({lock})\n"
        )
    };
    assert_eq!(
        jsonl_err,
        expected(&format!(
            "{}/--{}-proj--/<id>/session.lock",
            jsonl_home.join("sessions").display(),
            jsonl_home.parent().unwrap().display().to_string()[1..].replace('/', "-")
        ))
    );
    assert_eq!(
        sqlite_err,
        expected(&format!(
            "{}/sessions/sessions.sqlite.d/<id>/session.lock",
            sqlite_home.display()
        ))
    );
}

// ---------------------------------------------------------------------------------------------
// 3. An approved write outside the workspace runs
// ---------------------------------------------------------------------------------------------

#[test]
fn an_approved_outside_write_in_the_shell_writes_the_file() {
    let env = Env::new();
    let outside = env.root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let target = outside.join("approved.txt");
    let t = target.display().to_string();
    let replay = Replay::start(json!([
        {"tool_calls": [["write", {"file_path": t, "content": "approved\n"}]]},
        {"text": "wrote it"},
    ]));
    let mut shell = Shell::spawn(env.dsh(&replay.url(), &[]));
    shell.send("write a file outside the workspace");
    shell.wait_for(
        "allow tool `write` (permission preset workspace-write: write target ",
        HANG_LIMIT,
    );
    shell.send("y");
    let (status, err) = shell.finish(HANG_LIMIT);
    assert_eq!(code(status), 0, "stderr: {err}");
    let written = std::fs::read_to_string(&target)
        .unwrap_or_else(|e| panic!("{} was not written ({e}); stderr: {err}", target.display()));
    assert_eq!(written, "approved\n");

    let log = env.session_log();
    let decided = records_of(&log, "approval/decided");
    assert_eq!(decided.len(), 1);
    let v: Value = serde_json::from_str(&decided[0]).unwrap();
    assert_eq!(v["data"]["outcome"], "allowed-once");
    let results = records_of(&log, "tool/result");
    assert_eq!(results.len(), 1);
    let v: Value = serde_json::from_str(&results[0]).unwrap();
    assert_eq!(v["data"]["message"]["content"][0]["isError"], false, "{v}");
    assert_eq!(
        v["data"]["message"]["content"][0]["content"][0]["text"],
        json!(format!(
            "<path>{t}</path>\n<type>file</type>\n<content>\nCreated file\n</content>"
        ))
    );
    // the second request carried the successful result to the model
    assert_eq!(replay.chat_requests().len(), 2);
}

// ---------------------------------------------------------------------------------------------
// 2. Spill files live in the session's folder, survive a resume, die with the session
// ---------------------------------------------------------------------------------------------

/// The locator in a spill notice (`… stored at: <path>. Use read …`).
fn spill_locator(result_text: &str) -> String {
    let from = result_text.find("stored at: ").expect("no spill notice") + "stored at: ".len();
    let rest = &result_text[from..];
    rest[..rest.find(". Use read").unwrap()].to_owned()
}

fn spill_across_resume_and_delete(backend: &str) {
    let env = Env::new();
    // 60 000 bytes: below the shell's own cap, above the spill threshold (50 KiB)
    let cmd = "head -c 60000 /dev/zero | tr '\\0' x";
    let first = Replay::start(json!([
        {"tool_calls": [["bash", {"command": cmd, "description": "Flood"}]]},
        {"text": "flooded"},
    ]));
    let mut args = backend_args(backend);
    args.extend(["exec".into(), "flood".into()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(env.dsh(&first.url(), &a));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let id = wait_for_session(&env, backend);
    let second_request = &first.chat_requests()[1].body;
    let messages = second_request["messages"].as_array().unwrap();
    let result_text = messages.last().unwrap()["content"].as_str().unwrap();
    let locator = spill_locator(result_text);
    let folder = match backend {
        "jsonl" => Env::files_under(&env.home.join("sessions"))
            .into_iter()
            .find(|p| p.ends_with("session.jsonl"))
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf(),
        _ => env.home.join("sessions/sessions.sqlite.d").join(&id),
    };
    assert!(
        Path::new(&locator).starts_with(folder.join("spill")),
        "{locator} is not in {}",
        folder.display()
    );
    let saved = std::fs::read_to_string(&locator).unwrap();
    // the whole result, once: no second truncation layer inside the file
    assert_eq!(saved, "x".repeat(60_000));

    // a resumed session reads the locator of its earlier result
    let second = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": locator, "limit": 1}]]},
        {"tool_calls": [["grep", {"pattern": "^x+$", "path": locator}]]},
        {"text": "read it"},
    ]));
    let mut args = backend_args(backend);
    args.extend([
        "exec".into(),
        "--resume".into(),
        id.clone(),
        "read the spill".into(),
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(env.dsh(&second.url(), &a));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let body = &second.chat_requests()[1].body;
    let read = body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        read.starts_with(&format!("<path>{locator}</path>")),
        "{read}"
    );
    assert!(!read.contains("outside the workspace"), "{read}");
    let body = &second.chat_requests()[2].body;
    let grep = body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(grep.starts_with("Found 1 match"), "{grep}");

    // deleted with its session; nothing left in the temp dir
    let mut args = backend_args(backend);
    args.extend(["sessions".into(), "delete".into(), id.clone()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(env.dsh("http://127.0.0.1:9", &a));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("deleted {id}\n"));
    assert!(!Path::new(&locator).exists());
    assert!(!folder.exists());
    let out = run(env.dsh("http://127.0.0.1:9", &a));
    assert_eq!(code(out.status), 2, "stderr: {}", text(&out.stderr));
    assert_eq!(
        Env::files_under(&env.root.join("tmp")),
        Vec::<PathBuf>::new()
    );
}

#[test]
fn spill_files_live_in_the_session_folder_on_jsonl() {
    spill_across_resume_and_delete("jsonl");
}

#[test]
fn spill_files_live_in_the_session_folder_on_sqlite() {
    spill_across_resume_and_delete("sqlite");
}

#[test]
fn an_ephemeral_run_leaves_no_spill_folder_behind() {
    let env = Env::new();
    let cmd = "head -c 60000 /dev/zero | tr '\\0' x";
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {"command": cmd, "description": "Flood"}]]},
        {"text": "flooded"},
    ]));
    let out = run(env.dsh(&replay.url(), &["exec", "--ephemeral", "flood"]));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let body = &replay.chat_requests()[1].body;
    let inline = body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let locator = spill_locator(&inline);
    assert!(
        locator.starts_with(&env.root.join("tmp").display().to_string()),
        "{locator}"
    );
    assert!(!Path::new(&locator).exists());
    assert_eq!(
        Env::files_under(&env.root.join("tmp")),
        Vec::<PathBuf>::new()
    );
    assert_eq!(
        std::fs::read_dir(env.root.join("tmp")).unwrap().count(),
        0,
        "a spill folder was left behind"
    );
}
