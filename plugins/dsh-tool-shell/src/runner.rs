//! The bash executor: resolves a request against the configured defaults and caps and runs
//! `bash -c <command>` through the process executor (`dsh_process`: a new session without a
//! controlling terminal, its own process group, a scrubbed non-interactive environment,
//! `/dev/null` stdin, bounded output, the timeout and the caller's cancellation terminating the
//! whole group, escaped pipe holders reported instead of waited for).
//!
//! Behaviour notes: `docs/tools.md` ("Shell and job tools", bug cases BC-18..BC-22; "Process
//! executor"); defaults are upstream's local bash executor's (timeout 120 000 ms, cap 600 000
//! ms, 64 000 output bytes).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use dsh_process::{BackgroundProcess, CollectedOutput, OutputFiles, ProcessSpec, env};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::error::ShellError;

/// Executor configuration (settings section `dsh-tool-shell`, snake_case keys; every field
/// optional, defaults below; unknown keys are rejected).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ShellConfig {
    /// Default working directory; `None` = the process's current directory.
    pub cwd: Option<PathBuf>,
    /// Default foreground timeout (ms, at least 1). Default 120 000.
    #[serde(deserialize_with = "dsh_kernel::at_least_one")]
    #[schemars(range(min = 1))]
    pub timeout_ms: u64,
    /// Upper bound for per-call timeouts (ms, at least 1). Default 600 000.
    #[serde(deserialize_with = "dsh_kernel::at_least_one")]
    #[schemars(range(min = 1))]
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
    /// Disk cap of one foreground call's output file(s), both streams together (bytes): a stream
    /// beyond `max_output_bytes` is stored whole in the session's spill folder up to this many
    /// bytes; beyond it bytes are only counted. Default 67 108 864 (64 MiB).
    pub max_output_file_bytes: u64,
}

/// Default `max_output_file_bytes`: 64 MiB.
pub const DEFAULT_MAX_OUTPUT_FILE_BYTES: u64 = 64 * 1024 * 1024;

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
            max_output_file_bytes: DEFAULT_MAX_OUTPUT_FILE_BYTES,
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
    /// Folder for the output files of a foreground run (the whole of a stream beyond its cap,
    /// up to `max_output_file_bytes`); `None` = no file, the marker only counts.
    pub output_dir: Option<PathBuf>,
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
    /// The complete child environment (see [`dsh_process::env`]).
    pub env: BTreeMap<String, String>,
    /// SIGTERM→SIGKILL grace (ms).
    pub kill_grace_ms: u64,
    /// Pipe drain grace (ms).
    pub drain_grace_ms: u64,
    /// Output files of a foreground run (`name` `bash`); background starts ignore it.
    pub output_files: Option<OutputFiles>,
    /// The confined command line to spawn instead of `bash -c <command>` (the sandbox
    /// runner first, see `dsh_sandbox::ConfinedArgv`); `None` = unconfined.
    pub argv: Option<Vec<OsString>>,
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
    /// up), workdir resolved against the configured cwd, environment built per
    /// [`dsh_process::env`], output files in `output_dir` capped at `max_output_file_bytes`.
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
            output_files: req.output_dir.map(|dir| OutputFiles {
                dir,
                name: "bash".to_owned(),
                max_bytes: self.config.max_output_file_bytes,
            }),
            argv: None,
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
        let run = dsh_process::run(&process_spec(spec, true), cancel).await?;
        Ok(ShellRunResult {
            exit_code: run.outcome.exit_code,
            signal: run.outcome.signal,
            timed_out: run.outcome.timed_out,
            aborted: run.outcome.aborted,
            timeout_ms: spec.timeout_ms,
            stdout: run.stdout,
            stderr: run.stderr,
            leftover_pids: run.outcome.leftover_pids,
        })
    }

    /// Starts a resolved spec as a background process (no timeout): output goes to two rings
    /// of `max(stdout, stderr)` cap bytes each; the returned handle reads, kills and awaits it.
    ///
    /// # Errors
    /// [`ShellError::Spawn`] if bash cannot be started (nothing is left running).
    pub fn start(&self, spec: &ShellExecSpec) -> Result<BackgroundProcess, ShellError> {
        Ok(dsh_process::start(&process_spec(spec, false))?)
    }
}

/// The process executor's spec for `bash -c <command>` (`timeout`: a foreground run, so the
/// spec's timeout and output files apply).
fn process_spec(spec: &ShellExecSpec, timeout: bool) -> ProcessSpec {
    let (program, args) = match spec.argv.as_deref() {
        Some([program, args @ ..]) => (program.clone(), args.to_vec()),
        _ => (
            "bash".into(),
            vec!["-c".into(), spec.command.clone().into()],
        ),
    };
    ProcessSpec {
        program,
        args,
        workdir: spec.workdir.clone(),
        env: spec.env.clone(),
        timeout_ms: timeout.then_some(spec.timeout_ms),
        stdout_max_bytes: spec.stdout_max_bytes,
        stderr_max_bytes: spec.stderr_max_bytes,
        kill_grace_ms: spec.kill_grace_ms,
        drain_grace_ms: spec.drain_grace_ms,
        output_files: if timeout {
            spec.output_files.clone()
        } else {
            None
        },
    }
}

/// The model-facing text of a foreground result (upstream `renderResult` plus dsh markers):
/// stdout, then `[stderr]\n<stderr>` when stderr is non-empty, `(no output)` when both are
/// empty; then, each on its own line: `[output contained invalid UTF-8; decoded lossily]`,
/// `[still running after the call: pid <p>, … (left the process group and kept the output pipe
/// open; not killed)]`, `[timed out after <ms>ms]`, and last `[killed by signal: <SIG>]` or
/// `[exit code: <n>]` for a non-zero exit; after all of them, when the failed command printed
/// a sign of wanting a terminal ([`dsh_process::wanted_terminal`]), the
/// [`dsh_process::NO_TERMINAL_NOTE`].
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
    let failed = r.signal.is_some() || r.exit_code.is_some_and(|c| c != 0);
    if dsh_process::wanted_terminal(failed, &r.stdout.text, &r.stderr.text) {
        markers.push(dsh_process::NO_TERMINAL_NOTE.to_owned());
    }
    if markers.is_empty() {
        return body;
    }
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body + &markers.join("\n")
}
