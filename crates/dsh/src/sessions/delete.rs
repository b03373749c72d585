//! `dsh sessions delete ID`: the seam's delete — the stored log (or rows) and the session's own
//! folder (its lock file and spilled tool output) are removed. The writer lock is taken first, so
//! a session another process is writing (a live `dsh exec` or shell) is refused with
//! `SESSION_LOCKED` (exit 1) and nothing is removed; an unknown id is a usage error (exit 2).

use anyhow::Result;

use super::{emit, storage_error};
use crate::app::Storage;

/// Runs `delete`; prints `deleted <id>`.
pub(super) fn run(storage: &Storage, id: &str) -> Result<i32> {
    storage
        .store()?
        .delete(id)
        .map_err(|e| storage_error(id, e))?;
    emit(&format!("deleted {id}\n"));
    Ok(0)
}
