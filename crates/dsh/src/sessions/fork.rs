//! `dsh sessions fork ID [--at SEQ | --turn N]`: the seam's fork — a new stored session seeded
//! with the prefix through `SEQ` (inclusive), or through the `turn/end` of turn `N` (turns as
//! `show` numbers them, from 1), header `{parentSession, seedLength, cwd, delegationDepth}`
//! inherited, ending with `session/end-seed`. A prefix ending inside an open turn, or a turn that
//! did not end, is refused (exit 2).

use anyhow::Result;
use dsh_session::EventData;

use super::{emit, storage_error};
use crate::app::{Storage, UsageError};

/// Runs `fork`; prints the new id.
pub(super) fn run(storage: &Storage, id: &str, at: Option<u64>, turn: Option<u64>) -> Result<i32> {
    let store = storage.store()?;
    let at = match turn {
        None => at,
        Some(n) => {
            let loaded = store.inspect(id).map_err(|e| storage_error(id, e))?;
            let end = loaded.events.iter().find_map(|e| match &e.data {
                EventData::TurnEnd(t) if t.turn == n => Some(e.seq),
                _ => None,
            });
            let turns = loaded
                .events
                .iter()
                .filter(|e| matches!(e.data, EventData::TurnEnd(_)))
                .count();
            Some(end.ok_or_else(|| {
                UsageError(format!(
                    "session `{id}` has no ended turn {n} (it has {turns} ended turn{})",
                    if turns == 1 { "" } else { "s" }
                ))
            })?)
        }
    };
    let child = store.fork(id, at).map_err(|e| storage_error(id, e))?;
    emit(&format!("{child}\n"));
    Ok(0)
}
