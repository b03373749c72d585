//! End-to-end tests of the built `dsh` binary for the output-spill fault of issue 13 ("Faults
//! and bad input": two truncation layers stacked, the notice counted only one of them, and the
//! spill file held only what the shell had kept). Each test drives `dsh exec` against the
//! in-process replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1).
//!
//! - `a_40_mb_bash_output_is_cut_once_and_whole_in_its_file`: one notice with exact counts
//!   (omitted = total − shown), the file holds every byte, and a later `grep` step finds a marker
//!   line from the omitted middle in it.
//! - `the_output_file_stops_at_the_disk_cap_with_exact_counts`: with a small
//!   `max_output_file_bytes` the file stops at the cap and the notice says so; the counts stay
//!   exact.
//! - `an_ephemeral_run_removes_its_output_files`: the file of an `--ephemeral` run lives under
//!   the temporary spill root and is gone when the run ends.
//!
//! Behaviour notes: `docs/tools.md` ("Spill", "Shell and job tools").
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, code, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

/// "Did not hang" bound for one dsh run (generous; the 40 MB run takes a few seconds).
const HANG_LIMIT: Duration = Duration::from_secs(180);

/// Runs `cmd` with this file's hang guard.
fn run(cmd: Command) -> Output {
    common::e2e::run(cmd, HANG_LIMIT)
}

// ---------------------------------------------------------------------------------------------
// Harness (trimmed copy of `faults_store.rs`)
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
        self.0.dsh(url, "sk-faults-spill", args)
    }

    /// The folder holding the only stored `session.jsonl` under `$DSH_HOME`.
    fn session_folder(&self) -> PathBuf {
        let logs: Vec<PathBuf> = files_under(&self.home)
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "session.jsonl"))
            .collect();
        assert_eq!(logs.len(), 1, "{logs:?}");
        logs[0].parent().unwrap().to_path_buf()
    }
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

/// A bash result cut by the shell's capture: its head, the one notice line, its tail.
struct Cut {
    head: String,
    notice: String,
    tail: String,
}

/// Splits a bash result `head\n[... notice ...]\ntail` at its only notice line.
fn split_cut(result: &str) -> Cut {
    assert_eq!(result.matches("\n[... ").count(), 1, "{}", &result[..200]);
    let start = result.find("\n[... ").unwrap() + 1;
    let end = start + result[start..].find(" ...]\n").unwrap() + " ...]\n".len();
    Cut {
        head: result[..start - 1].to_owned(),
        notice: result[start..end - 1].to_owned(),
        tail: result[end..].to_owned(),
    }
}

/// The path in a notice (`… in <path> (read/grep it)…`).
fn notice_path(notice: &str) -> String {
    let from = notice.find(" in /").unwrap() + " in ".len();
    let rest = &notice[from..];
    rest[..rest.find(" (read/grep it)").unwrap()].to_owned()
}

// ---------------------------------------------------------------------------------------------
// One truncation layer with exact counts
// ---------------------------------------------------------------------------------------------

#[test]
fn a_40_mb_bash_output_is_cut_once_and_whole_in_its_file() {
    let env = Env::new();
    let half = 20_000_000usize;
    let cmd = format!(
        "head -c {half} /dev/zero | tr '\\0' a; echo; echo MARKER-MIDDLE; \
         head -c {half} /dev/zero | tr '\\0' b; echo; echo MARKER-END"
    );
    let total = 2 * (half + 1) + "MARKER-MIDDLE\n".len() + "MARKER-END\n".len();
    // the model learns the path from the result: a first run ends after the bash step, a
    // resumed run greps the path
    let first = Replay::start(json!([
        {"tool_calls": [["bash", {"command": cmd, "description": "Flood"}]]},
        {"text": "flooded"},
    ]));
    let out = run(env.dsh(&first.url(), &["exec", "flood"]));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let result = first.last_message(1);
    let cut = split_cut(&result);
    let path = notice_path(&cut.notice);
    // the preview shows the capture's head and tail (64 000 bytes per stream by default)
    assert_eq!((cut.head.len(), cut.tail.len()), (32_000, 32_000));
    let shown = cut.head.len() + cut.tail.len();
    assert_eq!(
        cut.notice,
        format!(
            "[... {omitted} bytes omitted. Showing first 32000 and last 32000 of {total} bytes (4 lines); full output in {path} (read/grep it) ...]",
            omitted = total - shown
        )
    );
    assert_eq!(total - shown, 39_936_027);
    // exactly one notice: the spill policy neither cut it again nor stored a second copy
    assert!(
        !result.contains("(Omitted "),
        "{}",
        &result[result.len() - 300..]
    );
    assert!(cut.head.bytes().all(|b| b == b'a'));
    assert!(
        cut.tail.ends_with("b\nMARKER-END\n"),
        "{}",
        &cut.tail[31_900..]
    );
    assert!(result.len() < 64_000 + 300, "{}", result.len());

    // the file is in the session's own spill folder and holds every byte
    let folder = env.session_folder().join("spill");
    assert!(Path::new(&path).starts_with(&folder), "{path}");
    assert_eq!(files_under(&folder), vec![PathBuf::from(&path)]);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), total);
    assert!(bytes.starts_with(cut.head.as_bytes()));
    assert!(bytes.ends_with(cut.tail.as_bytes()));
    assert_eq!(&bytes[half..half + 15], b"\nMARKER-MIDDLE\n");

    // a later step greps the path and finds the line the preview left out
    let id = {
        let out = run(env.dsh("http://127.0.0.1:9", &["sessions", "list", "--json"]));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v[0]["id"].as_str().unwrap().to_owned()
    };
    let second = Replay::start(json!([
        {"tool_calls": [["grep", {"pattern": "^MARKER-", "path": path}]]},
        {"text": "found it"},
    ]));
    let out = run(env.dsh(&second.url(), &["exec", "--resume", &id, "find the marker"]));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    // (grep names a file inside a read root relative to that root)
    let name = Path::new(&path).file_name().unwrap().to_str().unwrap();
    assert_eq!(
        second.last_message(1),
        format!("Found 2 matches\n\n{name}\nLine 2: MARKER-MIDDLE\nLine 4: MARKER-END")
    );
}

#[test]
fn the_output_file_stops_at_the_disk_cap_with_exact_counts() {
    let env = Env::new();
    let total = 300_000usize;
    let cmd = format!("head -c {total} /dev/zero | tr '\\0' x");
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {"command": cmd, "description": "Flood"}]]},
        {"text": "flooded"},
    ]));
    let out = run(env.dsh(
        &replay.url(),
        &[
            "-c",
            "plugins.dsh-tool-shell.max_output_file_bytes=100000",
            "exec",
            "flood",
        ],
    ));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let result = replay.last_message(1);
    let cut = split_cut(&result);
    let path = notice_path(&cut.notice);
    assert_eq!(
        cut.notice,
        format!(
            "[... 236000 bytes omitted. Showing first 32000 and last 32000 of 300000 bytes (1 line); the first 100000 bytes are in {path} (read/grep it): the file stops at the 100000-byte cap of one call ...]"
        )
    );
    assert_eq!(std::fs::read(&path).unwrap(), vec![b'x'; 100_000]);
    assert!(!result.contains("(Omitted "));
}

#[test]
fn an_ephemeral_run_removes_its_output_files() {
    let env = Env::new();
    let cmd = "head -c 200000 /dev/zero | tr '\\0' x; echo; echo MARKER";
    let grep_path = env.root.join("tmp").display().to_string();
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {"command": cmd, "description": "Flood"}]]},
        {"tool_calls": [["bash", {"command": format!("find {grep_path} -type f -size +190k"), "description": "List"}]]},
        {"text": "flooded"},
    ]));
    let out = run(env.dsh(&replay.url(), &["exec", "--ephemeral", "flood"]));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let cut = split_cut(&replay.last_message(1));
    let path = notice_path(&cut.notice);
    assert!(path.starts_with(&grep_path), "{path}");
    // during the run the file existed (a later step saw it), after it nothing is left
    assert_eq!(replay.last_message(2), format!("{path}\n"));
    assert!(!Path::new(&path).exists());
    assert_eq!(std::fs::read_dir(env.root.join("tmp")).unwrap().count(), 0);
}
