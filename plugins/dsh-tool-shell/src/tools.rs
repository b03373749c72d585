//! The model-facing tools, each a [`dsh_tools::Tool`] over [`ShellExecutor`] and
//! [`JobService`]: [`Bash`] (`bash`, runs commands, exclusive, target `workdir`),
//! [`JobOutput`] (`job_output`, read-only), [`JobKill`] (`job_kill`, other effects) and
//! [`JobList`] (`job_list`, read-only, parallel-safe).
//!
//! Parameters, output shapes and texts follow upstream (`docs/tools.md`, "Shell and job
//! tools"): `bash {command, description, timeoutMs?, workdir?, run_in_background?}` → a
//! `{kind: background, jobId}` | `{kind: foreground, …ShellRunResult}` union, acknowledged as
//! `started background job <id>`, aborted runs failing with `ABORTED`;
//! `job_output {job_id, wait?, timeout_ms?}` → `{text, job}` rendered as the text, or
//! `(no new output)`, then `[status: …]`; `job_kill {job_id, reason?}` →
//! `{outcome: cancellation-requested | already-finished, job}`; wait default 30 s, cap 10 min.
//!
//! Differences from upstream, on purpose: `exitCode`/`signal` are omitted from the value instead
//! of `null` (the enforced schema subset has no nullable types), and the foreground value adds
//! `leftoverPids` and per-stream totals (see [`CollectedOutput`]).

use dsh_kernel::ErrorCode;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{Context, Registration};
use dsh_llm::ContentBlock;
use dsh_tools::{Tool, ToolEffects, ToolFailure, ToolRegistry, ToolRunContext, ToolsError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::background::{start_runner_failed_job, start_sandboxed_bash_job};
use crate::capture::CollectedOutput;
use crate::error::ShellError;
use crate::jobs::{JobService, JobSnapshot, status_line};
use crate::runner::{ShellExecRequest, ShellExecutor, ShellRunResult, render_result};
use crate::sandboxed::{
    SandboxInfo, SandboxPermissions, SandboxPlan, denial_markers, plan, spawn_failure, verdict,
};
use dsh_sandbox::SandboxService;

/// `job_output` wait applied when `wait` is set without `timeout_ms` (ms).
pub const JOB_WAIT_DEFAULT_MS: u64 = 30_000;
/// Hard cap on one `job_output` wait (ms).
pub const JOB_WAIT_MAX_MS: u64 = 600_000;

/// Arguments of `bash`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct BashArgs {
    /// The bash command to execute (run as `bash -c`).
    pub command: String,
    /// What the command does, in 5-10 words of active voice, for the UI (for example
    /// "Show working tree status").
    pub description: String,
    /// Timeout in milliseconds. The executor applies its default (120000) and cap (600000) and
    /// kills the whole process group on expiry.
    #[serde(rename = "timeoutMs", default)]
    pub timeout_ms: Option<f64>,
    /// Working directory for this command. Defaults to the session workspace; a relative path
    /// is resolved against it.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Run in the background and return a job id immediately (read output with job_output,
    /// stop with job_kill). No timeout applies.
    #[serde(default)]
    pub run_in_background: Option<bool>,
    /// Only after the sandbox denied this command, or when it certainly needs more: run this
    /// one call under a wider sandbox mode (`workspace-write` or `danger-full-access`, the
    /// narrowest that suffices). The user is asked to approve; requires `justification`.
    #[serde(default)]
    pub sandbox_permissions: Option<SandboxPermissions>,
    /// Why this command needs `sandbox_permissions` (one sentence, shown to the user).
    #[serde(default)]
    pub justification: Option<String>,
}

/// The canonical value of `bash` (JSON; discriminated by `kind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[allow(
    clippy::large_enum_variant,
    reason = "one short-lived value per call; boxing would only add an allocation"
)]
pub enum BashOutput {
    /// A started background job.
    Background {
        /// The job id (`bash-<n>`).
        #[serde(rename = "jobId")]
        job_id: String,
    },
    /// A finished foreground run.
    Foreground {
        /// Exit code; absent when the shell died from a signal.
        #[serde(rename = "exitCode", default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// Terminating signal name; absent on a normal exit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
        /// The executor's timeout stopped the command.
        #[serde(rename = "timedOut")]
        timed_out: bool,
        /// Always false in a value (an aborted run is an `ABORTED` failure instead).
        aborted: bool,
        /// The effective timeout (ms).
        #[serde(rename = "timeoutMs")]
        timeout_ms: u64,
        /// Captured stdout.
        stdout: CollectedOutput,
        /// Captured stderr.
        stderr: CollectedOutput,
        /// Escaped pids still holding the output pipes when reading stopped (not killed).
        #[serde(rename = "leftoverPids")]
        leftover_pids: Vec<u32>,
        /// The sandbox the command ran in; absent without a sandbox service.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sandbox: Option<SandboxInfo>,
    },
}

impl BashOutput {
    fn foreground(r: ShellRunResult, sandbox: Option<SandboxInfo>) -> Self {
        Self::Foreground {
            sandbox,
            exit_code: r.exit_code,
            signal: r.signal,
            timed_out: r.timed_out,
            aborted: r.aborted,
            timeout_ms: r.timeout_ms,
            stdout: r.stdout,
            stderr: r.stderr,
            leftover_pids: r.leftover_pids,
        }
    }

    /// The model-facing text: `started background job <id>`, or [`render_result`].
    pub fn render(&self) -> String {
        match self {
            Self::Background { job_id } => format!("started background job {job_id}"),
            Self::Foreground {
                exit_code,
                signal,
                timed_out,
                aborted,
                timeout_ms,
                stdout,
                stderr,
                leftover_pids,
                sandbox,
            } => {
                let body = render_result(&ShellRunResult {
                    exit_code: *exit_code,
                    signal: signal.clone(),
                    timed_out: *timed_out,
                    aborted: *aborted,
                    timeout_ms: *timeout_ms,
                    stdout: stdout.clone(),
                    stderr: stderr.clone(),
                    leftover_pids: leftover_pids.clone(),
                });
                match sandbox.as_ref().and_then(denial_markers) {
                    Some(m) if body.ends_with('\n') => format!("{body}{m}"),
                    Some(m) => format!("{body}\n{m}"),
                    None => body,
                }
            }
        }
    }
}

/// Arguments of `job_output`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct JobOutputArgs {
    /// The id a background start returned (e.g. `bash-1`).
    pub job_id: String,
    /// Block until the job finishes or the timeout expires; a timed-out wait returns
    /// `[status: running]` and leaves the job alive.
    #[serde(default)]
    pub wait: Option<bool>,
    /// Max wait in milliseconds (only with wait: true). Default 30000, capped at 600000.
    #[serde(default)]
    pub timeout_ms: Option<f64>,
}

/// Value of `job_output`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct JobOutputValue {
    /// Output since the previous read.
    pub text: String,
    /// The job's state.
    pub job: JobSnapshot,
}

/// Arguments of `job_kill`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct JobKillArgs {
    /// The id a background start returned (e.g. `bash-1`).
    pub job_id: String,
    /// Why the job is being stopped (optional, short).
    #[serde(default)]
    pub reason: Option<String>,
}

/// Outcome of `job_kill`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KillOutcome {
    /// The job was running; cancellation was requested.
    CancellationRequested,
    /// The job had already finished.
    AlreadyFinished,
}

/// Value of `job_kill`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct JobKillValue {
    /// What happened.
    pub outcome: KillOutcome,
    /// The job's state after the request.
    pub job: JobSnapshot,
}

/// Arguments of `job_list` (none).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct JobListArgs {}

fn fail(e: &ShellError) -> ToolFailure {
    ToolFailure::typed(e.to_string(), "ShellError", e.code())
}

/// The base directory of a call: the caller's session `cwd` when known, else the executor's
/// configured cwd (or the process cwd).
fn session_cwd(cx: &ToolRunContext) -> Option<PathBuf> {
    let caller = cx.exec.caller.as_ref()?;
    caller.session.header().cwd.as_ref().map(PathBuf::from)
}

fn resolve_workdir(base: Option<&Path>, workdir: Option<&str>) -> Option<PathBuf> {
    match (base, workdir) {
        (_, Some(w)) if Path::new(w).is_absolute() => Some(PathBuf::from(w)),
        (Some(b), Some(w)) => Some(b.join(w)),
        (None, Some(w)) => Some(PathBuf::from(w)),
        (Some(b), None) => Some(b.to_path_buf()),
        (None, None) => None,
    }
}

/// The folder for this call's output files: the caller session's, from the
/// [`dsh_tools::OutputFolders`] service (none without a caller or the service, or when the
/// folder cannot be made — the output is then only counted).
fn output_dir(cx: &ToolRunContext) -> Option<PathBuf> {
    let caller = cx.exec.caller.as_ref()?;
    let folders = caller.ctx.get::<dsh_tools::OutputFolders>()?;
    match folders.folder_for(caller.session.header()) {
        Ok(dir) => Some(dir),
        Err(e) => {
            tracing::warn!(target: "dsh_tool_shell", "no folder for the output files: {e}");
            None
        }
    }
}

const BASH_DESCRIPTION: &str = "Execute a bash command (`bash -c`) and return its stdout/stderr. \
Each call runs in a fresh shell in its own process group: no state (cwd, variables, functions) \
persists between calls — pass `workdir` instead of using `cd`. Stdin is closed, so interactive \
prompts fail immediately. Processes the command leaves running are terminated when it ends. \
Non-zero exits are reported as `[exit code: N]`. Long output keeps its head and tail with a \
marker giving the omitted amount and the path of a file holding the whole output (read or grep \
it). Set `run_in_background: true` for long-running commands: the \
call returns a job id immediately; read its output with `job_output` and stop it with `job_kill`. \
Commands run in the OS sandbox described by the runtime context's file policy: writes outside \
what it allows fail (e.g. `Read-only file system` / `Permission denied`) and confined commands \
have no network unless it is enabled. When a result reports a sandbox denial and the change is \
required, retry that same command once with `sandbox_permissions` (the narrowest wider mode) and \
a `justification`; the user is asked to approve.";

/// The `bash` tool.
#[derive(Debug, Clone)]
pub struct Bash {
    /// Runs foreground commands and spawns background ones.
    pub executor: Arc<ShellExecutor>,
    /// Where background runs are tracked.
    pub jobs: Arc<JobService>,
    /// The sandbox every command runs through (`None`: no sandbox seam booted; commands run
    /// unconfined, and `dsh-permissions` keeps denying `bash` under `read-only`).
    pub sandbox: Option<Arc<SandboxService>>,
}

/// The mode and `Error: spawn <runner> ENOENT|EACCES` detail when `io` is the confined
/// runner's own spawn failure.
fn runner_spawn_detail(
    plan: Option<&SandboxPlan>,
    io: &std::io::Error,
) -> Option<(dsh_sandbox::SandboxMode, String)> {
    let plan = plan?;
    let program = plan.confined.as_ref()?.argv.first()?;
    dsh_sandbox::is_runner_spawn_failure(io).then(|| {
        (
            plan.mode,
            dsh_sandbox::spawn_failure_detail(Path::new(program), io),
        )
    })
}

/// The call's failure for a spawn error: `SANDBOX_UNAVAILABLE` when the runner could not be
/// started, else the shell error.
fn spawn_fail(plan: Option<&SandboxPlan>, e: &ShellError) -> ToolFailure {
    if let (Some(p), ShellError::Spawn(io)) = (plan, e)
        && let Some(f) = spawn_failure(p, io)
    {
        return f;
    }
    fail(e)
}

impl Tool for Bash {
    const NAME: &'static str = "bash";
    type Args = BashArgs;
    type Output = BashOutput;

    fn description(&self) -> String {
        BASH_DESCRIPTION.to_owned()
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::RUNS_COMMANDS.target("workdir")
    }

    async fn call(&self, args: BashArgs, cx: ToolRunContext) -> Result<BashOutput, ToolFailure> {
        if args.command.trim().is_empty() {
            return Err(ToolFailure::message(
                "invalid command: expected a non-empty string",
            ));
        }
        if args.description.trim().is_empty() {
            return Err(ToolFailure::message(
                "invalid description: expected a non-empty string",
            ));
        }
        let base = session_cwd(&cx);
        let workdir = resolve_workdir(base.as_deref(), args.workdir.as_deref());
        let background = args.run_in_background == Some(true);
        let sandbox_plan = match &self.sandbox {
            Some(sandbox) => {
                // The writable root is the run's workspace root, the same fence as the fs
                // tools' (dsh_fs::Workspace): from a subdirectory `../file` is inside.
                let fallback = self.executor.config().cwd.clone();
                let root = cx
                    .exec
                    .caller
                    .as_ref()
                    .and_then(|c| {
                        dsh_fs::Workspace::for_context(&c.ctx, base.as_deref(), fallback.as_deref())
                            .ok()
                    })
                    .map(|w| w.root)
                    .or_else(|| base.clone())
                    .or(fallback)
                    .or_else(|| std::env::current_dir().ok())
                    .unwrap_or_else(|| PathBuf::from("/"));
                Some(
                    plan(
                        sandbox,
                        &cx,
                        &args.command,
                        &root,
                        args.sandbox_permissions,
                        args.justification.as_deref(),
                    )
                    .await?,
                )
            }
            None => None,
        };
        let req = ShellExecRequest {
            command: args.command,
            workdir,
            timeout_ms: args.timeout_ms,
            output_dir: if background { None } else { output_dir(&cx) },
            ..ShellExecRequest::default()
        };
        let ex = &self.executor;
        let mut spec = ex.resolve(req).map_err(|e| fail(&e))?;
        spec.argv = sandbox_plan
            .as_ref()
            .and_then(|p| p.confined.as_ref())
            .map(|c| c.argv.clone());
        if background {
            if !ex.config().enable_run_in_background {
                return Err(ToolFailure::message(
                    "run_in_background is disabled for this deployment (enable_run_in_background: false)",
                ));
            }
            if cx.signal.is_cancelled() {
                return Err(ToolsError::Aborted.into());
            }
            let owner = cx.exec.caller.as_ref().map(|c| c.ctx.clone());
            let confined = sandbox_plan
                .as_ref()
                .and_then(|p| p.confined.clone().map(|c| (c, p.mode)));
            let id = match start_sandboxed_bash_job(ex, &self.jobs, &spec, owner.clone(), confined)
            {
                Ok(id) => id,
                Err(ShellError::Spawn(io)) => match runner_spawn_detail(sandbox_plan.as_ref(), &io)
                {
                    // The runner itself could not start: a job that records it (upstream's
                    // `runnerFailed`), so the model learns it through `job_output`.
                    Some((mode, detail)) => {
                        start_runner_failed_job(&self.jobs, &spec.command, mode, &detail, owner)
                            .map_err(|e| fail(&e))?
                    }
                    None => return Err(fail(&ShellError::Spawn(io))),
                },
                Err(e) => return Err(fail(&e)),
            };
            return Ok(BashOutput::Background { job_id: id });
        }
        let result = ex
            .run(&spec, cx.signal.clone())
            .await
            .map_err(|e| spawn_fail(sandbox_plan.as_ref(), &e))?;
        if result.aborted {
            return Err(ToolsError::Aborted.into());
        }
        let info = match &sandbox_plan {
            Some(p) => Some(verdict(p, result.exit_code, &result.stderr.text)?),
            None => None,
        };
        Ok(BashOutput::foreground(result, info))
    }

    fn render(&self, _args: &BashArgs, out: &BashOutput) -> Vec<ContentBlock> {
        vec![ContentBlock::text(out.render())]
    }
}

/// The `job_output` tool.
#[derive(Debug, Clone)]
pub struct JobOutput {
    /// The job service read from.
    pub jobs: Arc<JobService>,
}

impl Tool for JobOutput {
    const NAME: &'static str = "job_output";
    type Args = JobOutputArgs;
    type Output = JobOutputValue;

    fn description(&self) -> String {
        "Read what a background job wrote since your last read of it; the reply always ends \
         with a `[status: ...]` line. Returns at once unless `wait: true`, which blocks until \
         the job finishes or the wait times out."
            .to_owned()
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::READ_ONLY
    }

    async fn call(
        &self,
        args: JobOutputArgs,
        cx: ToolRunContext,
    ) -> Result<JobOutputValue, ToolFailure> {
        if args.job_id.is_empty() {
            return Err(ToolFailure::message(
                "invalid job_id: expected a non-empty string, got \"\"",
            ));
        }
        let key = cx.exec.key().cloned();
        if args.wait == Some(true) {
            let ms = match args.timeout_ms {
                None => JOB_WAIT_DEFAULT_MS,
                Some(t) if t.is_finite() && t > 0.0 => (t.ceil() as u64).min(JOB_WAIT_MAX_MS),
                Some(t) => {
                    return Err(ToolFailure::message(format!(
                        "invalid wait timeout: expected a positive number of milliseconds, got {t}"
                    )));
                }
            };
            let wait = Duration::from_millis(ms);
            match self
                .jobs
                .wait(&args.job_id, wait, key.as_ref(), &cx.signal)
                .await
            {
                Ok(_) => {}
                Err(ShellError::WaitAborted) => return Err(ToolsError::Aborted.into()),
                Err(e) => return Err(fail(&e)),
            }
        }
        let (text, job) = self
            .jobs
            .read(&args.job_id, key.as_ref())
            .map_err(|e| fail(&e))?;
        Ok(JobOutputValue { text, job })
    }

    fn render(&self, _args: &JobOutputArgs, v: &JobOutputValue) -> Vec<ContentBlock> {
        let body = if v.text.is_empty() {
            "(no new output)"
        } else {
            v.text.as_str()
        };
        let sep = if body.ends_with('\n') { "" } else { "\n" };
        vec![ContentBlock::text(format!(
            "{body}{sep}{}",
            status_line(&v.job)
        ))]
    }
}

/// The `job_kill` tool.
#[derive(Debug, Clone)]
pub struct JobKill {
    /// The job service whose jobs are stopped.
    pub jobs: Arc<JobService>,
}

impl Tool for JobKill {
    const NAME: &'static str = "job_kill";
    type Args = JobKillArgs;
    type Output = JobKillValue;

    fn description(&self) -> String {
        "Stop a running background job by id. Returns at once; the job's status becomes \
         killed when its processes have actually exited."
            .to_owned()
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::OTHER
    }

    async fn call(
        &self,
        args: JobKillArgs,
        cx: ToolRunContext,
    ) -> Result<JobKillValue, ToolFailure> {
        if args.job_id.is_empty() {
            return Err(ToolFailure::message(
                "invalid job_id: expected a non-empty string, got \"\"",
            ));
        }
        let key = cx.exec.key().cloned();
        let requested = self
            .jobs
            .kill(&args.job_id, key.as_ref(), args.reason.as_deref())
            .map_err(|e| fail(&e))?;
        let job = self
            .jobs
            .get(&args.job_id, key.as_ref())
            .map_err(|e| fail(&e))?;
        let outcome = if requested {
            KillOutcome::CancellationRequested
        } else {
            KillOutcome::AlreadyFinished
        };
        Ok(JobKillValue { outcome, job })
    }

    fn render(&self, _args: &JobKillArgs, v: &JobKillValue) -> Vec<ContentBlock> {
        vec![ContentBlock::text(match v.outcome {
            KillOutcome::AlreadyFinished => {
                format!(
                    "job {} had already finished {}",
                    v.job.id,
                    status_line(&v.job)
                )
            }
            KillOutcome::CancellationRequested => {
                format!("requested cancellation of job {}", v.job.id)
            }
        })]
    }
}

/// The `job_list` tool.
#[derive(Debug, Clone)]
pub struct JobList {
    /// The job service listed.
    pub jobs: Arc<JobService>,
}

impl Tool for JobList {
    const NAME: &'static str = "job_list";
    type Args = JobListArgs;
    type Output = Vec<JobSnapshot>;

    fn description(&self) -> String {
        "Show the background jobs you started (running and finished): id, kind, status and label."
            .to_owned()
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::READ_ONLY.parallel_safe()
    }

    async fn call(
        &self,
        _args: JobListArgs,
        cx: ToolRunContext,
    ) -> Result<Vec<JobSnapshot>, ToolFailure> {
        Ok(self.jobs.list(cx.exec.key()))
    }

    fn render(&self, _args: &JobListArgs, jobs: &Vec<JobSnapshot>) -> Vec<ContentBlock> {
        let text = if jobs.is_empty() {
            "(no background jobs)".to_string()
        } else {
            jobs.iter()
                .map(|j| format!("{} [{}] {} — {}", j.id, j.kind, j.status.as_str(), j.label))
                .collect::<Vec<_>>()
                .join("\n")
        };
        vec![ContentBlock::text(text)]
    }
}

/// Registers `bash`, `job_output`, `job_kill` and `job_list` through `ctx` (global when `ctx`
/// is untagged). Returns the registrations (bound to `ctx`).
///
/// # Errors
/// [`ToolsError`] from building or registering a tool (schema outside the subset, duplicate).
pub fn register_tools(
    ctx: &Context,
    registry: &ToolRegistry,
    executor: Arc<ShellExecutor>,
    jobs: Arc<JobService>,
) -> Result<Vec<Registration>, ToolsError> {
    Ok(vec![
        registry.register_tool(
            ctx,
            Bash {
                executor,
                jobs: jobs.clone(),
                sandbox: ctx.get::<SandboxService>(),
            },
        )?,
        registry.register_tool(ctx, JobOutput { jobs: jobs.clone() })?,
        registry.register_tool(ctx, JobKill { jobs: jobs.clone() })?,
        registry.register_tool(ctx, JobList { jobs })?,
    ])
}
