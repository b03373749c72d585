//! The crate's error type, with stable codes (`docs/tools.md`, "Process executor").

/// Errors of `dsh-process`.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum ProcessError {
    /// The program could not be spawned (missing binary, bad working directory, `setsid`
    /// refused).
    #[error("failed to spawn the command: {0}")]
    #[code("PROCESS_SPAWN_FAILED")]
    Spawn(#[source] std::io::Error),
    /// Waiting for the child failed at the OS level.
    #[error("waiting for the command failed: {0}")]
    #[code("PROCESS_WAIT_FAILED")]
    Wait(#[source] std::io::Error),
}
