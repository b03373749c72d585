//! The crate's error type: every failure of the shell runner, the job service and the tools,
//! each with a stable `code()`.
//!
//! Behaviour notes: `docs/tools.md` ("Shell and job tools"); codes follow upstream's
//! `SHELL_*`/job wording.

/// Errors of `dsh-tool-shell`.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    /// A request field was out of range or empty (e.g. `timeoutMs <= 0`, blank command).
    #[error("invalid shell request: {0}")]
    InvalidRequest(String),
    /// `bash` could not be spawned (missing binary, bad working directory, …).
    #[error("failed to spawn bash: {0}")]
    Spawn(#[source] std::io::Error),
    /// The working directory does not exist or is not a directory.
    #[error("working directory {0} is not an existing directory")]
    BadWorkdir(String),
    /// Waiting for the child failed at the OS level.
    #[error("waiting for the command failed: {0}")]
    Wait(#[source] std::io::Error),
    /// No job with that id exists.
    #[error("unknown job {0}")]
    UnknownJob(String),
    /// The job exists but belongs to another agent.
    #[error("job {0} belongs to another agent")]
    JobAccess(String),
    /// The per-owner limit of active background jobs was reached.
    #[error(
        "background job limit reached for this owner (limit: {0}); use job_kill to stop an unneeded job, wait for it to finish, then retry"
    )]
    JobLimit(usize),
    /// The job service (or the owner scope) is shutting down.
    #[error("the job service is not accepting jobs: {0}")]
    JobsClosed(String),
    /// A `job_output` wait was cancelled by the caller.
    #[error("wait aborted")]
    WaitAborted,
}

impl ShellError {
    /// A stable SCREAMING_SNAKE code for logs and tool error info.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "SHELL_INVALID_REQUEST",
            Self::Spawn(_) => "SHELL_SPAWN_FAILED",
            Self::BadWorkdir(_) => "SHELL_BAD_WORKDIR",
            Self::Wait(_) => "SHELL_WAIT_FAILED",
            Self::UnknownJob(_) => "JOB_NOT_FOUND",
            Self::JobAccess(_) => "JOB_ACCESS_DENIED",
            Self::JobLimit(_) => "JOB_LIMIT_REACHED",
            Self::JobsClosed(_) => "JOBS_CLOSED",
            Self::WaitAborted => "JOB_WAIT_ABORTED",
        }
    }
}
