//! `dsh sessions import PATH`: verifies a session file (see [`super::verify`]) and stores each
//! session it holds under its header id through the seam's import, repaired like a load (torn
//! tail dropped, open turn closed); then `dsh exec --resume ID` continues it. A file with errors
//! is not imported (exit 1); an id already stored is refused (exit 2).

use dsh_kernel::ErrorCode;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Result, anyhow};
use dsh_persistence::{PersistenceError, VerifyReport, verify_log};

use super::emit;
use super::verify::{read, to_text};
use crate::app::{Storage, UsageError};

/// Runs `import`; prints the imported ids.
pub(super) fn run(storage: &Storage, path: &Path) -> Result<i32> {
    let reports: Vec<VerifyReport> = read(storage, path)?
        .into_iter()
        .map(|raw| verify_log(raw, storage.types()))
        .collect();
    if reports.iter().any(|r| !r.errors.is_empty()) {
        let mut err = std::io::stderr().lock();
        for r in reports.iter().filter(|r| !r.errors.is_empty()) {
            let _ = err.write_all(to_text(r).as_bytes());
        }
        let _ = writeln!(err, "error: not imported: the log has errors");
        return Ok(1);
    }
    let store = storage.store()?;
    for report in &reports {
        let id = report.header.as_ref().map_or("?", |h| h.id.as_str());
        let stored = store.import(report).map_err(|e| match e {
            PersistenceError::AlreadyExists { .. } => anyhow::Error::from(UsageError(format!(
                "a session `{id}` already exists in the store; not imported"
            ))),
            PersistenceError::InvalidArgument { detail } => anyhow!(detail),
            other => anyhow!("importing `{id}`: {other} ({})", other.code()),
        })?;
        emit(&format!("{stored}\n"));
    }
    Ok(0)
}
