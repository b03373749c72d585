//! `dsh sessions export ID --to BACKEND`: the seam's export — the stored session (its `inspect`
//! view, repair closers included) is copied under the same id and header into the registered
//! backend `BACKEND`, opened over the same sessions directory. An id already stored there is
//! refused (exit 2).

use anyhow::{Result, anyhow};
use dsh_kernel::ErrorCode;
use dsh_persistence::PersistenceError;

use super::{emit, storage_error};
use crate::app::{Storage, UsageError};

/// Runs `export`; prints the id.
pub(super) fn run(storage: &Storage, id: &str, to: &str) -> Result<i32> {
    let from = storage.store()?;
    if from.name() == to {
        return Err(UsageError(format!(
            "session `{id}` is already stored by backend `{to}`"
        ))
        .into());
    }
    let target = storage.open_backend(to)?;
    from.export(id, target.as_ref()).map_err(|e| match e {
        PersistenceError::AlreadyExists { .. } => anyhow::Error::from(UsageError(format!(
            "backend `{to}` already has a session `{id}`; not exported"
        ))),
        PersistenceError::NotFound { .. } => storage_error(id, e),
        other => anyhow!("exporting `{id}` to `{to}`: {other} ({})", other.code()),
    })?;
    emit(&format!("{id}\n"));
    Ok(0)
}
