//! The crate's error type: every failure of the shell runner, the job service and the tools,
//! each with a stable `code()`.
//!
//! Behaviour notes: `docs/tools.md` ("Shell and job tools"); codes follow upstream's
//! `SHELL_*`/job wording.

/// Errors of `dsh-tool-shell`.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum ShellError {
    /// A request field was out of range or empty (e.g. `timeoutMs <= 0`, blank command).
    #[error("invalid shell request: {0}")]
    #[code("SHELL_INVALID_REQUEST")]
    InvalidRequest(String),
    /// `bash` could not be spawned (missing binary, bad working directory, …).
    #[error("failed to spawn bash: {0}")]
    #[code("SHELL_SPAWN_FAILED")]
    Spawn(#[source] std::io::Error),
    /// The working directory does not exist or is not a directory.
    #[error("working directory {0} is not an existing directory")]
    #[code("SHELL_BAD_WORKDIR")]
    BadWorkdir(String),
    /// Waiting for the child failed at the OS level.
    #[error("waiting for the command failed: {0}")]
    #[code("SHELL_WAIT_FAILED")]
    Wait(#[source] std::io::Error),
    /// No job with that id exists.
    #[error("unknown job {0}")]
    #[code("JOB_NOT_FOUND")]
    UnknownJob(String),
    /// The job exists but belongs to another agent.
    #[error("job {0} belongs to another agent")]
    #[code("JOB_ACCESS_DENIED")]
    JobAccess(String),
    /// The per-owner limit of active background jobs was reached.
    #[error(
        "background job limit reached for this owner (limit: {0}); use job_kill to stop an unneeded job, wait for it to finish, then retry"
    )]
    #[code("JOB_LIMIT_REACHED")]
    JobLimit(usize),
    /// The job service (or the owner scope) is shutting down.
    #[error("the job service is not accepting jobs: {0}")]
    #[code("JOBS_CLOSED")]
    JobsClosed(String),
    /// A `job_output` wait was cancelled by the caller.
    #[error("wait aborted")]
    #[code("JOB_WAIT_ABORTED")]
    WaitAborted,
}

impl From<dsh_process::ProcessError> for ShellError {
    fn from(e: dsh_process::ProcessError) -> Self {
        match e {
            dsh_process::ProcessError::Spawn(e) => Self::Spawn(e),
            dsh_process::ProcessError::Wait(e) => Self::Wait(e),
        }
    }
}
