//! The cost of the `context:git` runtime context, through the built `dsh` binary: how many git
//! processes a scripted turn spawns, the time cap on `git status`, and the large-tree mode.
//!
//! A wrapper `git` script first on dsh's `PATH` logs every invocation (its arguments, one line
//! each) and then runs the real git, so the tests count exactly what dsh-context spawned. The
//! model is the in-process replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1).
//!
//! What is proven (docs/upstream/context.md, "The git context"):
//! - a two-step turn with a read-only tool runs git twice (one `rev-parse`, one `status`);
//! - a tool that writes files or runs commands makes the next step read the status again, a
//!   read-only tool does not, and the refreshed snapshot shows the change;
//! - a `git status` that does not finish within `git_timeout_ms` is killed (its process is gone)
//!   and the context says the status is unavailable;
//! - above `git_status_max_files` index entries no status scan runs (branch only).
//!
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::dsh_bin;
use common::e2e::Replay;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_test_support::RecordedRequest;
use serde_json::json;

/// "Did not hang" bound for one dsh run.
const HANG_LIMIT: Duration = Duration::from_secs(60);

/// The runtime-context snapshot messages of one request (user messages starting with the
/// snapshot heading), in order.
fn snapshots(req: &RecordedRequest) -> Vec<String> {
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .filter(|c| c.starts_with("Current runtime context."))
        .map(str::to_owned)
        .collect()
}

/// The real git binary (resolved before the wrapper shadows it).
fn real_git() -> String {
    let out = Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    assert!(out.status.success(), "git is not installed");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A temporary `$DSH_HOME`, a committed git repository and a wrapper `git` that logs.
struct Env {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    repo: PathBuf,
    wrapper_dir: PathBuf,
    log: PathBuf,
}

fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

impl Env {
    /// A repository holding `files` committed files `f<i>.txt`. `status_body` is the shell
    /// text the wrapper runs for `git … status …` (`None`: the real git).
    fn new(files: usize, status_body: Option<&str>) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let home = root.join("dsh-home");
        let repo = root.join("proj");
        let wrapper_dir = root.join("bin");
        let log = root.join("git.log");
        for d in [&home, &repo, &wrapper_dir] {
            std::fs::create_dir_all(d).unwrap();
        }
        for i in 1..=files {
            std::fs::write(repo.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
        }
        git(&repo, &["init", "-q"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "init"]);
        let real = real_git();
        let status = status_body.map_or(String::new(), |body| {
            format!("case \" $* \" in *\" status \"*) {body} ;; esac\n")
        });
        let script = format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\n{status}exec '{real}' \"$@\"\n",
            log.display()
        );
        let wrapper = wrapper_dir.join("git");
        std::fs::write(&wrapper, script).unwrap();
        Command::new("chmod")
            .arg("755")
            .arg(&wrapper)
            .status()
            .unwrap();
        Self {
            _tmp: tmp,
            home,
            repo,
            wrapper_dir,
            log,
        }
    }

    fn path(&self, name: &str) -> String {
        self.repo.join(name).display().to_string()
    }

    /// `dsh exec --ephemeral … TASK` in the repository, the wrapper first on `PATH`.
    fn exec(&self, url: &str, extra: &[&str]) -> Output {
        let path = format!(
            "{}:{}",
            self.wrapper_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new(dsh_bin());
        cmd.arg("exec")
            .arg("--ephemeral")
            .args(extra)
            .arg("look at the files")
            .current_dir(&self.repo)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("DSH_HOME", &self.home)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("DEEPSEEK_BASE_URL", url)
            .env("DEEPSEEK_API_KEY", "sk-faults-git")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd.spawn().unwrap();
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(HANG_LIMIT) {
            Ok(out) => out.unwrap(),
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                panic!("dsh did not finish within {HANG_LIMIT:?}");
            }
        }
    }

    /// The git invocations dsh made, one line of arguments each.
    fn git_calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn rev_parse(&self) -> String {
        format!(
            "-C {} rev-parse --show-toplevel --git-path index",
            self.repo.display()
        )
    }

    fn status(&self) -> String {
        format!("-C {} status --porcelain=v1 --branch", self.repo.display())
    }
}

fn clean_context(repo: &Path) -> String {
    format!(
        "Git repository: {}\nBranch: main\nStatus (`git status --porcelain=v1 --branch`):\n## main\nWorking tree clean.",
        repo.display()
    )
}

#[test]
fn a_two_step_turn_with_a_read_only_tool_reads_the_git_state_once() {
    let env = Env::new(2, None);
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": env.path("f1.txt")}]]},
        {"text": "f1.txt holds one line."},
    ]));
    let out = env.exec(&replay.server.base_url(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "f1.txt holds one line.\n"
    );
    assert_eq!(env.git_calls(), vec![env.rev_parse(), env.status()]);
    let reqs = replay.chat_requests();
    assert_eq!(reqs.len(), 2);
    let first = snapshots(&reqs[0]);
    assert_eq!(first.len(), 1);
    assert!(first[0].contains(&clean_context(&env.repo)), "{}", first[0]);
    // Nothing changed: the second request carries no new snapshot.
    assert_eq!(snapshots(&reqs[1]), first);
}

#[test]
fn only_tools_that_write_files_or_run_commands_refresh_the_git_state() {
    let env = Env::new(2, None);
    let replay = Replay::start(json!([
        {"tool_calls": [["write", {"file_path": env.path("new.txt"), "content": "new\n"}]]},
        {"tool_calls": [["read", {"file_path": env.path("new.txt")}]]},
        {"tool_calls": [["bash", {"command": "echo more > more.txt", "description": "Write another file"}]]},
        {"text": "Done."},
    ]));
    let out = env.exec(&replay.server.base_url(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Step 1 (turn start), step 2 (after write), no read after the read, step 4 (after bash).
    assert_eq!(
        env.git_calls(),
        vec![env.rev_parse(), env.status(), env.status(), env.status()]
    );
    let reqs = replay.chat_requests();
    assert_eq!(reqs.len(), 4);
    let last = snapshots(&reqs[3]);
    assert_eq!(last.len(), 3, "{last:#?}");
    let git_of = |snapshot: &str| snapshot[snapshot.find("Git repository:").unwrap()..].to_owned();
    assert!(git_of(&last[0]).starts_with(&clean_context(&env.repo)));
    let base = format!(
        "Git repository: {}\nBranch: main\nStatus (`git status --porcelain=v1 --branch`):\n## main\n",
        env.repo.display()
    );
    assert!(
        git_of(&last[1]).starts_with(&format!("{base}?? new.txt")),
        "{}",
        last[1]
    );
    assert!(
        git_of(&last[2]).starts_with(&format!("{base}?? more.txt\n?? new.txt")),
        "{}",
        last[2]
    );
}

#[test]
fn a_git_status_that_hangs_is_killed_after_the_time_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let pids = tmp.path().join("status.pids");
    let body = format!("echo $$ >> '{}'; exec sleep 30", pids.display());
    let env = Env::new(1, Some(&body));
    let replay = Replay::start(json!([{"text": "Nothing to do."}]));
    let started = Instant::now();
    let out = env.exec(
        &replay.server.base_url(),
        &["-c", "plugins.dsh-context.git_timeout_ms=300"],
    );
    let elapsed = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
    assert_eq!(env.git_calls(), vec![env.rev_parse(), env.status()]);
    let reqs = replay.chat_requests();
    let snap = snapshots(&reqs[0]);
    assert_eq!(snap.len(), 1);
    let want = format!(
        "Git repository: {}\nStatus: unavailable (`git status` did not finish within 300 ms).",
        env.repo.display()
    );
    assert!(snap[0].contains(&want), "{}", snap[0]);
    // The sleeping "git status" was killed (and reaped): its pid is gone.
    let pid = std::fs::read_to_string(&pids).unwrap();
    let pid = pid.trim();
    assert!(!pid.is_empty());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the timed-out git status (pid {pid}) still runs"
    );
}

#[test]
fn above_the_file_limit_no_status_scan_runs() {
    let env = Env::new(12, None);
    let replay = Replay::start(json!([{"text": "Nothing to do."}]));
    let out = env.exec(
        &replay.server.base_url(),
        &["-c", "plugins.dsh-context.git_status_max_files=10"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        env.git_calls(),
        vec![
            env.rev_parse(),
            format!("-C {} symbolic-ref -q --short HEAD", env.repo.display()),
        ]
    );
    let reqs = replay.chat_requests();
    let snap = snapshots(&reqs[0]);
    assert_eq!(snap.len(), 1);
    let want = format!(
        "Git repository: {}\nBranch: main\nStatus: not scanned (the index lists 12 files, more than git_status_max_files = 10); run `git status` to see changes.",
        env.repo.display()
    );
    assert!(snap[0].contains(&want), "{}", snap[0]);
}
