//! Running one command: [`ProcessSpec`] → [`run`] (foreground, bounded head+tail capture, the
//! whole of an overflowing stream in a file when [`ProcessSpec::output_files`] is set) or
//! [`start`] (background, output rings, a [`BackgroundProcess`] handle).
//!
//! Lifecycle of one run:
//! 1. spawn in a new session ([`spawn`]: through the `setsid` program, so the child has no
//!    controlling terminal and its pid is its session and process-group id), stdin `/dev/null`,
//!    the environment exactly [`ProcessSpec::env`];
//! 2. wait for the child to exit, the timeout, or the cancel token (first cause wins; a timeout
//!    sets `timed_out`, a cancel sets `aborted`, never both);
//! 3. on timeout/cancel: SIGTERM the group, SIGKILL after `kill_grace_ms`, reap the child;
//! 4. after the child exited (any path): terminate the group's remaining members the same way —
//!    a plain `sleep 1000 &` never outlives the run;
//! 5. drain stdout/stderr until EOF or `drain_grace_ms`; if a reader is still blocked, the pids
//!    that still hold the pipes (processes that left the group, e.g. via `setsid`) are reported
//!    in `leftover_pids` and reading stops.
//!
//! Behaviour notes: `docs/tools.md` ("Process executor"; bug cases BC-18..BC-22 under "Shell
//! and job tools").

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::capture::{CollectedOutput, DiskBudget, HeadTail, OutputFiles, OutputRing, Spool};
use crate::error::ProcessError;
use crate::proc;

/// A fully resolved command to run.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSpec {
    /// The program (looked up in the `PATH` of this process, as `std::process::Command` does).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Absolute, existing working directory.
    pub workdir: PathBuf,
    /// The complete child environment (nothing is inherited; build it with
    /// [`crate::env::child_env`]).
    pub env: BTreeMap<String, String>,
    /// Foreground timeout (ms); `None` = none. [`start`] ignores it.
    pub timeout_ms: Option<u64>,
    /// Stdout cap (bytes): head+tail for [`run`], ring size (the larger of both) for [`start`].
    pub stdout_max_bytes: usize,
    /// Stderr cap (bytes).
    pub stderr_max_bytes: usize,
    /// SIGTERM→SIGKILL grace (ms).
    pub kill_grace_ms: u64,
    /// Pipe drain grace (ms).
    pub drain_grace_ms: u64,
    /// Where [`run`] stores the whole of a stream that outgrows its cap (both streams share
    /// the disk cap); `None` = nowhere (the text's marker then only counts what was left out).
    /// [`start`] ignores it.
    pub output_files: Option<OutputFiles>,
}

/// Facts of one finished process (foreground runs and background processes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessOutcome {
    /// Exit code, `None` when signal-killed.
    pub exit_code: Option<i32>,
    /// Terminating signal name (e.g. `SIGTERM`).
    pub signal: Option<String>,
    /// The timeout fired first.
    pub timed_out: bool,
    /// The cancel token fired first.
    pub aborted: bool,
    /// Escaped pids still holding the pipes (not killed).
    pub leftover_pids: Vec<u32>,
}

impl ProcessOutcome {
    /// The outcome of a process whose driver failed (nothing known about its exit).
    pub fn unknown() -> Self {
        Self {
            exit_code: None,
            signal: None,
            timed_out: false,
            aborted: false,
            leftover_pids: Vec::new(),
        }
    }
}

/// A finished foreground run: its [`ProcessOutcome`] and both captured streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessRun {
    /// How it ended.
    pub outcome: ProcessOutcome,
    /// Captured stdout (head+tail within `stdout_max_bytes`; with [`ProcessSpec::output_files`]
    /// the whole stream is in `stdout.output_file` when it outgrew the cap).
    pub stdout: CollectedOutput,
    /// Captured stderr (head+tail within `stderr_max_bytes`).
    pub stderr: CollectedOutput,
}

/// Why a run was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Timeout,
    Cancel,
}

/// Where a stream's bytes go.
trait Sink: Send + Sync {
    fn write(&self, bytes: &[u8]);
}

impl Sink for Mutex<HeadTail> {
    fn write(&self, bytes: &[u8]) {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write(bytes);
    }
}

impl Sink for Mutex<OutputRing> {
    fn write(&self, bytes: &[u8]) {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write(bytes);
    }
}

/// Runs `spec` in the foreground until it exits, times out or `cancel` fires.
///
/// # Errors
/// [`ProcessError::Spawn`] if the program cannot be started, [`ProcessError::Wait`] if reaping
/// fails. Non-zero exits, signals, timeouts and cancellation are outcomes, not errors.
pub async fn run(
    spec: &ProcessSpec,
    cancel: CancellationToken,
) -> Result<ProcessRun, ProcessError> {
    run_inner(spec, None, cancel).await
}

/// [`run`] with `input` written to the child's stdin (a pipe instead of `/dev/null`), which is
/// closed as soon as the bytes are written, so a reader sees end-of-file at once (hooks get
/// their JSON payload this way). A child that exits or is killed without reading it all is
/// not an error: the writer stops at the broken pipe.
///
/// # Errors
/// As [`run`].
pub async fn run_with_stdin(
    spec: &ProcessSpec,
    input: Vec<u8>,
    cancel: CancellationToken,
) -> Result<ProcessRun, ProcessError> {
    run_inner(spec, Some(input), cancel).await
}

async fn run_inner(
    spec: &ProcessSpec,
    input: Option<Vec<u8>>,
    cancel: CancellationToken,
) -> Result<ProcessRun, ProcessError> {
    let (out, err) = match &spec.output_files {
        Some(files) => {
            let budget = DiskBudget::new(files.max_bytes);
            (
                HeadTail::with_spool(
                    spec.stdout_max_bytes,
                    Spool::new(files, "stdout", budget.clone()),
                ),
                HeadTail::with_spool(spec.stderr_max_bytes, Spool::new(files, "stderr", budget)),
            )
        }
        None => (
            HeadTail::new(spec.stdout_max_bytes),
            HeadTail::new(spec.stderr_max_bytes),
        ),
    };
    let (out, err) = (Arc::new(Mutex::new(out)), Arc::new(Mutex::new(err)));
    let mut child = spawn_with(spec, input.is_some())?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // Detached: it ends when the bytes are written (then the pipe is closed by the drop)
        // or when the pipe breaks because the group exited or was killed.
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt as _;
            let _ = stdin.write_all(&bytes).await;
            drop(stdin);
        });
    }
    let outcome = drive(
        child,
        spec,
        spec.timeout_ms.map(Duration::from_millis),
        cancel,
        out.clone(),
        err.clone(),
    )
    .await?;
    let collect = |m: &Mutex<HeadTail>| m.lock().unwrap_or_else(PoisonError::into_inner).finish();
    Ok(ProcessRun {
        outcome,
        stdout: collect(&out),
        stderr: collect(&err),
    })
}

/// Starts `spec` as a background process (no timeout): output goes to two rings of
/// `max(stdout, stderr)` cap bytes each; the returned handle reads, kills and awaits it. Needs a
/// tokio runtime (the driver is a spawned task).
///
/// # Errors
/// [`ProcessError::Spawn`] if the program cannot be started (nothing is left running).
pub fn start(spec: &ProcessSpec) -> Result<BackgroundProcess, ProcessError> {
    let cap = spec.stdout_max_bytes.max(spec.stderr_max_bytes);
    let out = Arc::new(Mutex::new(OutputRing::new(cap)));
    let err = Arc::new(Mutex::new(OutputRing::new(cap)));
    let child = spawn(spec)?;
    let pid = child.id().unwrap_or(0);
    let cancel = CancellationToken::new();
    let (tx, rx) = tokio::sync::watch::channel(None);
    let spec2 = spec.clone();
    let (o, e, c) = (out.clone(), err.clone(), cancel.clone());
    tokio::spawn(async move {
        let res = drive(child, &spec2, None, c, o, e).await;
        let outcome = res.unwrap_or_else(|e| {
            tracing::warn!(target: "dsh_process", "background process failed: {e}");
            ProcessOutcome::unknown()
        });
        let _ = tx.send(Some(outcome));
    });
    Ok(BackgroundProcess {
        pid,
        cancel,
        out,
        err,
        done: rx,
    })
}

/// A running (or finished) background process. Output stays readable after exit.
#[derive(Debug, Clone)]
pub struct BackgroundProcess {
    pid: u32,
    cancel: CancellationToken,
    out: Arc<Mutex<OutputRing>>,
    err: Arc<Mutex<OutputRing>>,
    done: tokio::sync::watch::Receiver<Option<ProcessOutcome>>,
}

impl BackgroundProcess {
    /// The child's pid (= its session and process-group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Requests termination of the whole group (SIGTERM, SIGKILL after the grace). Idempotent.
    pub fn kill(&self) {
        self.cancel.cancel();
    }

    /// The outcome once finished, `None` while running.
    pub fn outcome(&self) -> Option<ProcessOutcome> {
        self.done.borrow().clone()
    }

    /// Waits until the process (and its group) has finished.
    pub async fn wait(&self) -> ProcessOutcome {
        let mut rx = self.done.clone();
        loop {
            if let Some(o) = rx.borrow_and_update().clone() {
                return o;
            }
            if rx.changed().await.is_err() {
                return rx.borrow().clone().unwrap_or_else(ProcessOutcome::unknown);
            }
        }
    }

    /// Consumes output written since the previous read: stdout delta, then `[stderr]\n` + the
    /// stderr delta when non-empty, then `[some output was dropped from memory]` when unread
    /// bytes were lost to the ring cap.
    pub fn read_output(&self) -> String {
        let finished = self.outcome().is_some();
        let o = self
            .out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .read(finished);
        let e = self
            .err
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .read(finished);
        let mut text = o.text;
        if !e.text.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str("[stderr]\n");
            text.push_str(&e.text);
        }
        if o.lossy || e.lossy {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str("[some output was dropped from memory]");
        }
        text
    }
}

/// Spawns `spec` detached from dsh's terminal: in a new session (no controlling terminal:
/// opening `/dev/tty` fails with `ENXIO` instead of prompting the user, and the terminal's
/// signals do not reach it; the child's pid is its session and process-group id), stdin
/// `/dev/null`, piped stdout/stderr, the environment exactly `spec.env`, killed if the handle is
/// dropped.
///
/// The new session comes from the `setsid` program (util-linux, busybox): the child is spawned
/// as `setsid -- <program> <args>`, and `setsid`, which is not a process-group leader, calls
/// `setsid(2)` and executes the program in the same process. The standard library has no stable
/// safe way to ask for a new session, and a `pre_exec` hook would need `unsafe` and would make
/// every spawn a full `fork` (slower, and the forked child holds copies of dsh's descriptors
/// until it executes). Without a `setsid` program on `PATH` the child falls back to a process
/// group of its own in dsh's session (it keeps the terminal; a warning is logged once).
/// `program` is looked up on the `PATH` of `spec.env` (else of this process) first, so a missing
/// program is a spawn error as with a plain spawn.
///
/// # Errors
/// [`ProcessError::Spawn`] (missing program, bad working directory).
pub fn spawn(spec: &ProcessSpec) -> Result<tokio::process::Child, ProcessError> {
    spawn_with(spec, false)
}

/// [`spawn`], with stdin a pipe when `piped_stdin` (else `/dev/null`).
fn spawn_with(
    spec: &ProcessSpec,
    piped_stdin: bool,
) -> Result<tokio::process::Child, ProcessError> {
    let mut cmd = match setsid_program() {
        Some(setsid) => {
            let program = find_program(&spec.program, spec.env.get("PATH").map(OsStr::new))
                .ok_or_else(|| {
                    ProcessError::Spawn(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("{} not found", Path::new(&spec.program).display()),
                    ))
                })?;
            let mut cmd = tokio::process::Command::new(setsid);
            cmd.arg("--").arg(program);
            cmd
        }
        None => {
            let mut cmd = tokio::process::Command::new(&spec.program);
            cmd.process_group(0);
            cmd
        }
    };
    cmd.args(&spec.args)
        .current_dir(&spec.workdir)
        .env_clear()
        .envs(&spec.env)
        .stdin(if piped_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd.spawn().map_err(ProcessError::Spawn)
}

/// The `setsid` program on this process's `PATH` (looked up once), `None` without one.
fn setsid_program() -> Option<&'static Path> {
    static SETSID: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETSID
        .get_or_init(|| {
            let found = find_program(OsStr::new("setsid"), None);
            if found.is_none() {
                tracing::warn!(
                    target: "dsh_process",
                    "no `setsid` program on PATH: commands keep dsh's controlling terminal"
                );
            }
            found
        })
        .as_deref()
}

/// `program` resolved as `execvp` would: a name with a `/` as is, else the first executable
/// file of that name in `path` (default: this process's `PATH`).
fn find_program(program: &OsStr, path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let candidate = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return Some(candidate.to_path_buf());
    }
    let own = std::env::var_os("PATH");
    let path = path.or(own.as_deref())?;
    std::env::split_paths(path)
        .map(|dir| dir.join(candidate))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

async fn pump(mut r: impl AsyncRead + Unpin, sink: Arc<dyn Sink>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => sink.write(&buf[..n]),
        }
    }
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// SIGKILLs a process group when dropped while armed.
struct GroupGuard {
    pgid: u32,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed && self.pgid != 0 {
            proc::signal_group(self.pgid, rustix::process::Signal::KILL);
        }
    }
}

/// Drives one spawned child to completion per the module-level lifecycle.
async fn drive(
    mut child: tokio::process::Child,
    spec: &ProcessSpec,
    timeout: Option<Duration>,
    cancel: CancellationToken,
    out: Arc<dyn Sink>,
    err: Arc<dyn Sink>,
) -> Result<ProcessOutcome, ProcessError> {
    let pgid = child.id().unwrap_or(0);
    // If this future is dropped mid-way (a caller that does not drain), the group is SIGKILLed.
    let mut guard = GroupGuard { pgid, armed: true };
    let grace = Duration::from_millis(spec.kill_grace_ms);
    let mut inodes = Vec::new();
    let mut readers: Vec<JoinHandle<()>> = Vec::new();
    if let Some(s) = child.stdout.take() {
        inodes.extend(proc::pipe_inode(s.as_raw_fd()));
        readers.push(tokio::spawn(pump(s, out)));
    }
    if let Some(s) = child.stderr.take() {
        inodes.extend(proc::pipe_inode(s.as_raw_fd()));
        readers.push(tokio::spawn(pump(s, err)));
    }
    let mut cause = None;
    let waited = tokio::select! {
        s = child.wait() => Some(s),
        () = sleep_or_forever(timeout) => { cause = Some(Cause::Timeout); None }
        () = cancel.cancelled() => { cause = Some(Cause::Cancel); None }
    };
    let status = match waited {
        Some(s) => s.map_err(ProcessError::Wait)?,
        None => {
            proc::terminate_group(pgid, grace).await;
            match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
                Ok(s) => s.map_err(ProcessError::Wait)?,
                Err(_) => {
                    let _ = child.start_kill();
                    child.wait().await.map_err(ProcessError::Wait)?
                }
            }
        }
    };
    // Whatever is left of the group is terminated: the run owns everything it started.
    proc::terminate_group(pgid, grace).await;
    guard.armed = false;
    // Drain with a bounded grace; a reader still blocked means an escaped writer.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(spec.drain_grace_ms);
    let mut leftover = Vec::new();
    let mut stuck = false;
    for r in &mut readers {
        if tokio::time::timeout_at(deadline, &mut *r).await.is_err() {
            stuck = true;
        }
    }
    if stuck {
        leftover = proc::pipe_holders(&inodes);
        for r in &readers {
            r.abort();
        }
    }
    Ok(ProcessOutcome {
        exit_code: status.code(),
        signal: status.signal().map(proc::signal_name),
        timed_out: cause == Some(Cause::Timeout),
        aborted: cause == Some(Cause::Cancel),
        leftover_pids: leftover,
    })
}
