//! The line-mode interactive shell.

use anyhow::Result;

use crate::app::App;

/// Runs the interactive shell; returns the exit code.
///
/// # Errors
/// Setup failures.
pub async fn run(app: App, resume: Option<String>) -> Result<i32> {
    let _ = resume;
    app.shutdown().await;
    Ok(0)
}
