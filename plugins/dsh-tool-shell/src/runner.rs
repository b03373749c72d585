//! The bash executor: resolves a request against the configured defaults and caps, runs
//! `bash -c <command>` in its own process group with a scrubbed environment and `/dev/null`
//! stdin, captures bounded output, enforces the timeout and the caller's cancellation by
//! terminating the whole group, and never waits on a pipe held by an escaped process longer than
//! the drain grace (that pid is reported instead).
//!
//! Lifecycle of one run:
//! 1. spawn (`process_group(0)`: the shell's pid is the group id);
//! 2. wait for the shell to exit, the timeout, or the cancel token (first cause wins; a timeout
//!    sets `timedOut`, a cancel sets `aborted`, never both);
//! 3. on timeout/cancel: SIGTERM the group, SIGKILL after `killGraceMs`, reap the shell;
//! 4. after the shell exited (any path): terminate the group's remaining members the same way —
//!    a plain `sleep 1000 &` never outlives the call (use `run_in_background` to keep work alive);
//! 5. drain stdout/stderr until EOF or `drainGraceMs`; if a reader is still blocked, the pids that
//!    still hold the pipes (processes that left the group, e.g. via `setsid`) are reported in
//!    `leftoverPids` and reading stops.
//!
//! Behaviour notes: `docs/tools.md` ("Shell and job tools", bug cases BC-18..BC-22); defaults
//! are upstream's local bash executor's (timeout 120 000 ms, cap 600 000 ms, 64 000 output
//! bytes).

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::capture::{CollectedOutput, HeadTail, OutputRing};
use crate::env;
use crate::error::ShellError;
use crate::proc;

/// Executor configuration (settings section `dsh-tool-shell`, snake_case keys; every field
/// optional, defaults below; unknown keys are rejected).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ShellConfig {
    /// Default working directory; `None` = the process's current directory.
    pub cwd: Option<PathBuf>,
    /// Default foreground timeout (ms). Default 120 000.
    pub timeout_ms: u64,
    /// Upper bound for per-call timeouts (ms). Default 600 000.
    pub max_timeout_ms: u64,
    /// Per-stream kept-output cap for foreground runs and per-stream ring size of background
    /// jobs (bytes). Default 64 000.
    pub max_output_bytes: usize,
    /// SIGTERM→SIGKILL grace when terminating a group (ms). Default 2 000.
    pub kill_grace_ms: u64,
    /// How long to keep reading pipes after the group is gone before reporting leftover pids
    /// (ms). Default 1 000.
    pub drain_grace_ms: u64,
    /// Whether `run_in_background` is offered. Default true.
    pub enable_run_in_background: bool,
}

impl Default for ShellConfig {
    fn default() -> Self {
        Self {
            cwd: None,
            timeout_ms: 120_000,
            max_timeout_ms: 600_000,
            max_output_bytes: 64_000,
            kill_grace_ms: 2_000,
            drain_grace_ms: 1_000,
            enable_run_in_background: true,
        }
    }
}

/// A caller's request; optional fields are filled by [`ShellExecutor::resolve`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShellExecRequest {
    /// The command line, run as `bash -c <command>`.
    pub command: String,
    /// Working directory; relative paths resolve against the configured cwd.
    pub workdir: Option<PathBuf>,
    /// Timeout (ms, positive, finite); capped at `max_timeout_ms`.
    pub timeout_ms: Option<f64>,
    /// Stdout cap override (bytes) for trusted in-process callers.
    pub stdout_max_bytes: Option<usize>,
    /// Ordinary environment entries, merged after the scrub and the overrides.
    pub env: BTreeMap<String, String>,
    /// Managed `DSH_*` facts, merged last.
    pub dsh_env: BTreeMap<String, String>,
}

/// A fully resolved execution spec.
#[derive(Debug, Clone, PartialEq)]
pub struct ShellExecSpec {
    /// The command line.
    pub command: String,
    /// Absolute, existing working directory.
    pub workdir: PathBuf,
    /// Effective timeout (ms); ignored by background starts.
    pub timeout_ms: u64,
    /// Stdout cap (bytes).
    pub stdout_max_bytes: usize,
    /// Stderr cap (bytes).
    pub stderr_max_bytes: usize,
    /// The complete child environment (see [`crate::env`]).
    pub env: BTreeMap<String, String>,
    /// SIGTERM→SIGKILL grace (ms).
    pub kill_grace_ms: u64,
    /// Pipe drain grace (ms).
    pub drain_grace_ms: u64,
}

/// The outcome of one foreground run (JSON camelCase; upstream `ShellRunResult` plus
/// `leftoverPids`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellRunResult {
    /// Exit code; `None` when the shell died from a signal.
    pub exit_code: Option<i32>,
    /// Terminating signal name (e.g. `"SIGTERM"`); `None` on a normal exit.
    pub signal: Option<String>,
    /// True when the executor's timeout was the first cause to stop the command.
    pub timed_out: bool,
    /// True when the caller's cancellation was the first cause (never together with `timedOut`).
    pub aborted: bool,
    /// The effective timeout (ms).
    pub timeout_ms: u64,
    /// Captured stdout.
    pub stdout: CollectedOutput,
    /// Captured stderr.
    pub stderr: CollectedOutput,
    /// Pids that had left the process group and still held the output pipes when reading
    /// stopped; they were NOT killed. Empty in the normal case.
    pub leftover_pids: Vec<u32>,
}

/// Why a run was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Timeout,
    Cancel,
}

/// Facts of one finished process (shared by foreground runs and background jobs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessOutcome {
    /// Exit code, `None` when signal-killed.
    pub exit_code: Option<i32>,
    /// Terminating signal name.
    pub signal: Option<String>,
    /// The timeout fired first.
    pub timed_out: bool,
    /// The cancel token fired first.
    pub aborted: bool,
    /// Escaped pids still holding the pipes (not killed).
    pub leftover_pids: Vec<u32>,
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

/// The local bash executor. Cheap to clone; holds only configuration.
#[derive(Debug, Clone, Default)]
pub struct ShellExecutor {
    config: ShellConfig,
}

impl ShellExecutor {
    /// An executor with `config`.
    pub fn new(config: ShellConfig) -> Self {
        Self { config }
    }

    /// The configuration.
    pub fn config(&self) -> &ShellConfig {
        &self.config
    }

    /// Fills and caps a request: timeout = `min(request ?? timeoutMs, maxTimeoutMs)` (ms, rounded
    /// up), workdir resolved against the configured cwd, environment built per [`crate::env`].
    ///
    /// # Errors
    /// [`ShellError::InvalidRequest`] for a blank command or a timeout that is not a positive
    /// finite number; [`ShellError::BadWorkdir`] when the working directory is not an existing
    /// directory.
    pub fn resolve(&self, req: ShellExecRequest) -> Result<ShellExecSpec, ShellError> {
        if req.command.trim().is_empty() {
            return Err(ShellError::InvalidRequest(
                "command must be a non-empty string".into(),
            ));
        }
        let timeout_ms = match req.timeout_ms {
            None => self.config.timeout_ms,
            Some(t) if t.is_finite() && t > 0.0 => (t.ceil() as u64).max(1),
            Some(t) => {
                return Err(ShellError::InvalidRequest(format!(
                    "invalid timeoutMs: expected a positive number, got {t}"
                )));
            }
        }
        .min(self.config.max_timeout_ms);
        let base = match &self.config.cwd {
            Some(c) => c.clone(),
            None => std::env::current_dir().map_err(|e| ShellError::BadWorkdir(e.to_string()))?,
        };
        let workdir = match req.workdir {
            Some(w) if w.is_absolute() => w,
            Some(w) => base.join(w),
            None => base,
        };
        if !workdir.is_dir() {
            return Err(ShellError::BadWorkdir(workdir.display().to_string()));
        }
        Ok(ShellExecSpec {
            command: req.command,
            workdir,
            timeout_ms,
            stdout_max_bytes: req.stdout_max_bytes.unwrap_or(self.config.max_output_bytes),
            stderr_max_bytes: self.config.max_output_bytes,
            env: env::child_env(env::scrubbed_ambient(), &req.env, &req.dsh_env),
            kill_grace_ms: self.config.kill_grace_ms,
            drain_grace_ms: self.config.drain_grace_ms,
        })
    }

    /// Runs a resolved spec in the foreground until it exits, times out or `cancel` fires.
    ///
    /// # Errors
    /// [`ShellError::Spawn`] if bash cannot be started, [`ShellError::Wait`] if reaping fails.
    /// Non-zero exits, signals, timeouts and cancellation are results, not errors.
    pub async fn run(
        &self,
        spec: &ShellExecSpec,
        cancel: CancellationToken,
    ) -> Result<ShellRunResult, ShellError> {
        let out = Arc::new(Mutex::new(HeadTail::new(spec.stdout_max_bytes)));
        let err = Arc::new(Mutex::new(HeadTail::new(spec.stderr_max_bytes)));
        let child = spawn(spec)?;
        let outcome = drive(
            child,
            spec,
            Some(Duration::from_millis(spec.timeout_ms)),
            cancel,
            out.clone(),
            err.clone(),
        )
        .await?;
        let collect =
            |m: &Mutex<HeadTail>| m.lock().unwrap_or_else(PoisonError::into_inner).finish();
        Ok(ShellRunResult {
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            timed_out: outcome.timed_out,
            aborted: outcome.aborted,
            timeout_ms: spec.timeout_ms,
            stdout: collect(&out),
            stderr: collect(&err),
            leftover_pids: outcome.leftover_pids,
        })
    }

    /// Starts a resolved spec as a background process (no timeout): output goes to two rings
    /// of `max(stdout, stderr)` cap bytes each; the returned handle reads, kills and awaits it.
    ///
    /// # Errors
    /// [`ShellError::Spawn`] if bash cannot be started (nothing is left running).
    pub fn start(&self, spec: &ShellExecSpec) -> Result<BackgroundProcess, ShellError> {
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
                tracing::warn!(target: "dsh_tool_shell", "background process failed: {e}");
                ProcessOutcome {
                    exit_code: None,
                    signal: None,
                    timed_out: false,
                    aborted: false,
                    leftover_pids: Vec::new(),
                }
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
    /// The shell's pid (= its process-group id).
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
                return rx.borrow().clone().unwrap_or(ProcessOutcome {
                    exit_code: None,
                    signal: None,
                    timed_out: false,
                    aborted: false,
                    leftover_pids: Vec::new(),
                });
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

fn spawn(spec: &ShellExecSpec) -> Result<tokio::process::Child, ShellError> {
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(&spec.command)
        .current_dir(&spec.workdir)
        .env_clear()
        .envs(&spec.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    cmd.spawn().map_err(ShellError::Spawn)
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
    spec: &ShellExecSpec,
    timeout: Option<Duration>,
    cancel: CancellationToken,
    out: Arc<dyn Sink>,
    err: Arc<dyn Sink>,
) -> Result<ProcessOutcome, ShellError> {
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
        Some(s) => s.map_err(ShellError::Wait)?,
        None => {
            proc::terminate_group(pgid, grace).await;
            match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
                Ok(s) => s.map_err(ShellError::Wait)?,
                Err(_) => {
                    let _ = child.start_kill();
                    child.wait().await.map_err(ShellError::Wait)?
                }
            }
        }
    };
    // Whatever is left of the group is terminated: the call owns everything it started.
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

/// The model-facing text of a foreground result (upstream `renderResult` plus dsh markers):
/// stdout, then `[stderr]\n<stderr>` when stderr is non-empty, `(no output)` when both are
/// empty; then, each on its own line: `[output contained invalid UTF-8; decoded lossily]`,
/// `[still running after the call: pid <p>, … (left the process group and kept the output pipe
/// open; not killed)]`, `[timed out after <ms>ms]`, and last `[killed by signal: <SIG>]` or
/// `[exit code: <n>]` for a non-zero exit.
pub fn render_result(r: &ShellRunResult) -> String {
    let mut body = r.stdout.text.clone();
    if !r.stderr.text.is_empty() {
        if !body.is_empty() && !body.ends_with('\n') {
            body.push('\n');
        }
        body.push_str("[stderr]\n");
        body.push_str(&r.stderr.text);
    }
    if body.is_empty() {
        body = "(no output)".into();
    }
    let mut markers = Vec::new();
    if r.stdout.invalid_utf8 || r.stderr.invalid_utf8 {
        markers.push("[output contained invalid UTF-8; decoded lossily]".to_string());
    }
    if !r.leftover_pids.is_empty() {
        let pids: Vec<String> = r.leftover_pids.iter().map(|p| format!("pid {p}")).collect();
        markers.push(format!(
            "[still running after the call: {} (left the process group and kept the output pipe open; not killed)]",
            pids.join(", ")
        ));
    }
    if r.timed_out {
        markers.push(format!("[timed out after {}ms]", r.timeout_ms));
    }
    if let Some(sig) = &r.signal {
        markers.push(format!("[killed by signal: {sig}]"));
    } else if let Some(code) = r.exit_code.filter(|c| *c != 0) {
        markers.push(format!("[exit code: {code}]"));
    }
    if markers.is_empty() {
        return body;
    }
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body + &markers.join("\n")
}
