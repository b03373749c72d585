//! `dsh sessions fork ID [--at SEQ]`: the seam's fork — a new stored session seeded with the
//! prefix through `SEQ` (inclusive), header `{parentSession, seedLength, cwd, delegationDepth}`
//! inherited, ending with `session/end-seed`. A prefix ending inside an open turn is refused
//! (exit 2).

use anyhow::Result;

use super::{emit, storage_error};
use crate::app::Storage;

/// Runs `fork`; prints the new id.
pub(super) fn run(storage: &Storage, id: &str, at: Option<u64>) -> Result<i32> {
    let child = storage
        .store()?
        .fork(id, at)
        .map_err(|e| storage_error(id, e))?;
    emit(&format!("{child}\n"));
    Ok(0)
}
