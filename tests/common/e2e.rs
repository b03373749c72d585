//! The pieces every binary-driving test file needs: the replay provider on its own runtime, a
//! hermetic sandbox (`$DSH_HOME`, a workspace, a private `TMPDIR`), and running `dsh` with a
//! hang guard. Each test binary uses a subset, hence the `dead_code` allowance.

#![allow(dead_code, reason = "each test binary uses a subset of these helpers")]

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_test_support::{RecordedRequest, ReplayOptions, ReplayServer, Script};
use serde_json::Value;

use super::dsh_bin;

/// The replay provider on its own runtime (the test thread stays synchronous).
pub struct Replay {
    /// The running server (requests, bodies, base URL).
    pub server: ReplayServer,
    _rt: tokio::runtime::Runtime,
}

impl Replay {
    /// Serves `responses` (the replay script's JSON, see `dsh-replay-server --help`).
    pub fn start(responses: Value) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let script = Script::from_json(&responses.to_string()).unwrap();
        let server = rt
            .block_on(ReplayServer::start(script, ReplayOptions::default()))
            .unwrap();
        Self { server, _rt: rt }
    }

    /// `http://127.0.0.1:<port>` of the server.
    pub fn url(&self) -> String {
        self.server.base_url()
    }

    /// The `POST …/chat/completions` requests received so far, in order.
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .collect()
    }

    /// The text of the last message of chat request `i` (the result of the step before it).
    pub fn last_message(&self, i: usize) -> String {
        let body = &self.chat_requests()[i].body;
        body["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

/// A temporary root holding `$DSH_HOME` (`dsh-home/`), an empty workspace (`proj/`) and a
/// private `TMPDIR` (`tmp/`); removed when dropped.
pub struct Sandbox {
    _tmp: tempfile::TempDir,
    /// The canonical temporary root.
    pub root: PathBuf,
    /// `$DSH_HOME` and `$HOME` of every run.
    pub home: PathBuf,
    /// The workspace (working directory of every run).
    pub repo: PathBuf,
}

impl Sandbox {
    /// Creates the three folders.
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let home = root.join("dsh-home");
        let repo = root.join("proj");
        for dir in [&home, &repo, &root.join("tmp")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        Self {
            _tmp: tmp,
            root,
            home,
            repo,
        }
    }

    /// The private `TMPDIR` of every run.
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// `dsh <args>` in the workspace with a hermetic environment (only `PATH` is inherited),
    /// `DEEPSEEK_BASE_URL=url`, `DEEPSEEK_API_KEY=api_key`, stdin null, stdout/stderr piped.
    pub fn dsh(&self, url: &str, api_key: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(dsh_bin());
        cmd.args(args)
            .current_dir(&self.repo)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("DSH_HOME", &self.home)
            .env("TMPDIR", self.tmp())
            .env("DEEPSEEK_BASE_URL", url)
            .env("DEEPSEEK_API_KEY", api_key)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }
}

/// Runs `cmd` to completion and returns its output and wall time; kills it and fails the test
/// if it runs longer than `limit` (a hang guard, not a performance assertion).
pub fn run_timed(mut cmd: Command, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => (out.unwrap(), start.elapsed()),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("dsh did not finish within {limit:?}");
        }
    }
}

/// [`run_timed`] without the time.
pub fn run(cmd: Command, limit: Duration) -> Output {
    run_timed(cmd, limit).0
}

/// `b` as UTF-8 (the test fails on invalid UTF-8).
pub fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// The exit code; the test fails if the process died from a signal.
pub fn code(s: ExitStatus) -> i32 {
    s.code()
        .unwrap_or_else(|| panic!("dsh died from a signal: {s}"))
}

/// Every line of `stdout` parsed as JSON (the test fails on a line that is not).
pub fn json_lines(stdout: &[u8]) -> Vec<Value> {
    text(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The interactive shell (`dsh` with no subcommand) driven over piped stdin, with its stderr
/// read line by line on a thread (approval questions are asked there).
pub struct Shell {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<String>,
    reader: std::thread::JoinHandle<String>,
}

impl Shell {
    /// Spawns `cmd` (stdin is made piped) and starts reading its stderr.
    pub fn spawn(mut cmd: Command) -> Self {
        use std::io::{BufRead, BufReader};
        cmd.stdin(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stderr).lines() {
                let line = line.unwrap();
                let _ = tx.send(line.clone());
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        Self {
            child,
            stdin,
            lines,
            reader,
        }
    }

    /// The shell's process id (to signal it).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Writes `line` and a newline to the shell's stdin.
    pub fn send(&mut self, line: &str) {
        use std::io::Write;
        writeln!(self.stdin.as_mut().unwrap(), "{line}").unwrap();
    }

    /// The first stderr line from now on that starts with `prefix`; the test fails if none
    /// comes within `limit`.
    pub fn wait_for(&self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let line = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("no stderr line starting {prefix:?} within {limit:?}"));
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    /// Closes stdin (end of input ends the shell) and waits up to `limit`; returns the exit
    /// status and the whole stderr.
    pub fn finish(mut self, limit: Duration) -> (ExitStatus, String) {
        drop(self.stdin.take());
        let (tx, rx) = mpsc::channel();
        let mut child = self.child;
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = rx
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("the shell did not end within {limit:?}"))
            .unwrap();
        (status, self.reader.join().unwrap())
    }
}

/// `stderr` of a text-mode `dsh exec` without its last line, `session <id> · <secs> s · <in>
/// in / <out> out tokens[ · <cost>]` (the test fails when that line is missing), for tests that assert the
/// rest of stderr exactly.
pub fn before_end_line(stderr: &str) -> String {
    let body = stderr.strip_suffix('\n').unwrap_or(stderr);
    let (rest, last) = body.rsplit_once('\n').unwrap_or(("", body));
    assert!(
        last.starts_with("session ") && last.contains(" tokens"),
        "no end line in stderr: {stderr}"
    );
    if rest.is_empty() {
        String::new()
    } else {
        format!("{rest}\n")
    }
}
