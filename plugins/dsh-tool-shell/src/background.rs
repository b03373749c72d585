//! Background bash jobs: a [`BackgroundProcess`] registered with the [`JobService`] as a job of
//! kind `bash` labelled with its command.
//!
//! Behaviour notes: `docs/tools.md` ("Shell and job tools"; outcome mapping: a signal-killed or cancelled
//! process is `killed` with detail `signal: <SIG>`; anything else is `completed` with detail
//! `exit code: <n>` — a non-zero exit is reported, not failed).

use std::sync::Arc;

use crate::error::ShellError;
use crate::jobs::{JobOutcome, JobService, JobStart, JobStatus, JobWork};
use crate::runner::{ShellExecSpec, ShellExecutor};
use dsh_process::{BackgroundProcess, ProcessOutcome};

struct BashJob {
    proc: BackgroundProcess,
    /// The confined argv and mode of a sandboxed job: once it has finished, a runner failure
    /// on its stderr ([`dsh_sandbox::classify`]) appends the runner-failure marker (once).
    sandbox: Option<(dsh_sandbox::ConfinedArgv, dsh_sandbox::SandboxMode)>,
    marked: std::sync::atomic::AtomicBool,
}

impl JobWork for BashJob {
    fn cancel(&self, _reason: Option<&str>) {
        self.proc.kill();
    }
    fn read_output(&self) -> String {
        let mut text = self.proc.read_output();
        if let (Some((confined, mode)), Some(outcome)) = (&self.sandbox, self.proc.outcome())
            && matches!(
                dsh_sandbox::classify(confined, outcome.exit_code, &self.proc.stderr_kept()),
                dsh_sandbox::RunVerdict::RunnerFailed(_)
            )
            && !self.marked.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&dsh_sandbox::runner_failed_marker(*mode));
        }
        text
    }
}

/// Maps a finished process onto the job vocabulary (see the module doc); escaped pids that
/// still held the pipes are appended to the detail as `; still running outside the group: pid <p>`.
pub fn process_outcome(o: &ProcessOutcome) -> JobOutcome {
    let mut out = base_outcome(o);
    if !o.leftover_pids.is_empty() {
        let pids: Vec<String> = o.leftover_pids.iter().map(|p| format!("pid {p}")).collect();
        let extra = format!("still running outside the group: {}", pids.join(", "));
        out.detail = Some(match out.detail {
            Some(d) => format!("{d}; {extra}"),
            None => extra,
        });
    }
    out
}

fn base_outcome(o: &ProcessOutcome) -> JobOutcome {
    match (&o.signal, o.aborted) {
        (Some(sig), _) => JobOutcome {
            status: JobStatus::Killed,
            detail: Some(format!("signal: {sig}")),
        },
        (None, true) => JobOutcome {
            status: JobStatus::Killed,
            detail: Some("killed before exit".into()),
        },
        (None, false) => JobOutcome {
            status: JobStatus::Completed,
            detail: Some(format!("exit code: {}", o.exit_code.unwrap_or(0))),
        },
    }
}

/// A background start whose sandbox runner could not be spawned (upstream's
/// `runnerFailed: true`): the job ends at once `killed` (`killed before exit`) and its output
/// is `[stderr]\nspawn failed: <detail>` then the runner-failure marker
/// ([`dsh_sandbox::runner_failed_marker`]) — the command did not run.
struct RunnerFailedJob(std::sync::Mutex<Option<String>>);

impl JobWork for RunnerFailedJob {
    fn cancel(&self, _reason: Option<&str>) {}
    fn read_output(&self) -> String {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default()
    }
}

/// Registers a job of kind `bash` labelled `command` whose runner failed to start under `mode`
/// with `detail` (see [`RunnerFailedJob`]); returns the job id.
///
/// # Errors
/// The [`JobService::start`] errors.
pub fn start_runner_failed_job(
    jobs: &JobService,
    command: &str,
    mode: dsh_sandbox::SandboxMode,
    detail: &str,
    owner: Option<dsh_kernel::Context>,
) -> Result<String, ShellError> {
    let text = format!(
        "[stderr]\nspawn failed: {detail}\n{}",
        dsh_sandbox::runner_failed_marker(mode)
    );
    let done = Box::pin(async {
        JobOutcome {
            status: JobStatus::Killed,
            detail: Some("killed before exit".into()),
        }
    });
    jobs.start(
        JobStart {
            kind: "bash".into(),
            label: command.to_owned(),
            owner,
        },
        Arc::new(RunnerFailedJob(std::sync::Mutex::new(Some(text)))),
        done,
    )
}

/// Starts `spec` in the background and registers it; returns the job id (`bash-<n>`).
///
/// # Errors
/// [`ShellError::Spawn`] when bash cannot start; the [`JobService::start`] errors (the process
/// is then killed).
pub fn start_bash_job(
    executor: &ShellExecutor,
    jobs: &JobService,
    spec: &ShellExecSpec,
    owner: Option<dsh_kernel::Context>,
) -> Result<String, ShellError> {
    start_sandboxed_bash_job(executor, jobs, spec, owner, None)
}

/// [`start_bash_job`] for a job confined by `sandbox` (its confined argv, already in
/// `spec.argv`, and mode): once finished, a runner failure on its stderr appends the
/// runner-failure marker to its output.
///
/// # Errors
/// As [`start_bash_job`].
pub fn start_sandboxed_bash_job(
    executor: &ShellExecutor,
    jobs: &JobService,
    spec: &ShellExecSpec,
    owner: Option<dsh_kernel::Context>,
    sandbox: Option<(dsh_sandbox::ConfinedArgv, dsh_sandbox::SandboxMode)>,
) -> Result<String, ShellError> {
    let proc = executor.start(spec)?;
    let waiter = proc.clone();
    let done = Box::pin(async move { process_outcome(&waiter.wait().await) });
    jobs.start(
        JobStart {
            kind: "bash".into(),
            label: spec.command.clone(),
            owner,
        },
        Arc::new(BashJob {
            proc,
            sandbox,
            marked: std::sync::atomic::AtomicBool::new(false),
        }),
        done,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_mapping() {
        let o =
            |exit_code, signal: Option<&str>, aborted, leftover_pids: Vec<u32>| ProcessOutcome {
                exit_code,
                signal: signal.map(String::from),
                timed_out: false,
                aborted,
                leftover_pids,
            };
        assert_eq!(
            process_outcome(&o(Some(3), None, false, vec![])),
            JobOutcome {
                status: JobStatus::Completed,
                detail: Some("exit code: 3".into())
            }
        );
        assert_eq!(
            process_outcome(&o(None, Some("SIGTERM"), true, vec![])),
            JobOutcome {
                status: JobStatus::Killed,
                detail: Some("signal: SIGTERM".into())
            }
        );
        assert_eq!(
            process_outcome(&o(Some(0), None, true, vec![7])),
            JobOutcome {
                status: JobStatus::Killed,
                detail: Some("killed before exit; still running outside the group: pid 7".into())
            }
        );
    }
}
