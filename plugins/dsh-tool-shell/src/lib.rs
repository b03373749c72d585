//! The bash tool family of dsh: a bash executor ([`ShellExecutor`]) over the process executor
//! seam (`dsh-process`: every command in a new session without a terminal and in its own
//! process group, a scrubbed non-interactive environment, `/dev/null` stdin, bounded head+tail
//! output capture, a capped timeout and cancellation that terminate the whole group); a
//! background job service ([`JobService`]); and the model-facing tools `bash`, `job_output`,
//! `job_kill` and `job_list` ([`dsh_tools::Tool`]s with declared effects, see [`tools`]).
//!
//! Behaviour notes, bug cases (BC-18, BC-19, BC-20, BC-22) and upstream sources:
//! `docs/tools.md` ("Shell and job tools", "Process executor").

pub mod background;
mod error;
pub mod jobs;
mod runner;
pub mod sandboxed;
pub mod tools;

/// The process executor's modules, re-exported under their former paths in this crate.
pub use dsh_process::{capture, env, proc};

pub use background::{
    process_outcome, start_bash_job, start_runner_failed_job, start_sandboxed_bash_job,
};
pub use capture::{CollectedOutput, HeadTail, OutputRing};
pub use dsh_process::{BackgroundProcess, ProcessOutcome};
pub use error::ShellError;
pub use jobs::{JobOutcome, JobService, JobSnapshot, JobStart, JobStatus, JobWork, status_line};
pub use runner::{
    ShellConfig, ShellExecRequest, ShellExecSpec, ShellExecutor, ShellRunResult, render_result,
};

use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Disposer};

/// Plugin entry: reads settings section `dsh-tool-shell` ([`ShellConfig`]), provides
/// `Arc<ShellExecutor>` and `Arc<JobService>`, registers the tools `bash`, `job_output`,
/// `job_kill`, `job_list` with the [`dsh_tools::ToolRegistry`] (global), and shuts the job
/// service down (killing and awaiting every job) when the plugin scope is disposed.
///
/// # Errors
/// A malformed settings section (kernel settings error); no `ToolRegistry` service (the
/// `dsh-tools` plugin is not linked); a tool registration error.
pub fn apply(ctx: &Context) -> Result<(), BoxError> {
    let config: ShellConfig = ctx.settings_section("dsh-tool-shell")?;
    let registry = ctx.require::<dsh_tools::ToolRegistry>()?;
    let executor = Arc::new(ShellExecutor::new(config));
    ctx.provide(executor.clone())?.detach();
    let jobs = Arc::new(JobService::default());
    ctx.provide(jobs.clone())?.detach();
    for reg in tools::register_tools(ctx, &registry, executor, jobs.clone())? {
        reg.detach();
    }
    ctx.effect(
        "dsh-tool-shell:jobs",
        vec![Disposer::future(move || async move {
            jobs.shutdown().await;
            Ok(())
        })],
    )?
    .detach();
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_tools::PLUGIN, dsh_sandbox::PLUGIN],
    settings = ShellConfig,
    start = apply,
}
