//! The compaction lock rule.
//!
//! See docs/upstream/compaction.md (Durable events, lock rule): a `compaction/start` without a
//! later `compaction/end` of the same `compactionId` holds the lock and blocks every entry point
//! (`BUSY`); a start that precedes the latest `session/end-seed` belongs to a dead lifecycle (a
//! crash before the seed was forked or restored) and is stale. Core crash repair never closes
//! compaction brackets, so the stale rule is what lets a crashed compaction be retried.

use std::collections::HashSet;
use std::sync::Arc;

use dsh_session::{CoreKind, Session, SessionEvent};
use serde_json::Value;

use crate::events::{END, START};

/// A live unmatched `compaction/start`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveLock {
    /// Its seq.
    pub seq: u64,
    /// Its `compactionId` (empty when the payload has none).
    pub compaction_id: String,
    /// Its `turn`.
    pub turn: Option<u64>,
}

fn id_of(e: &SessionEvent) -> String {
    let v = e.data.to_value();
    v.get("compactionId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The live lock of a log, if any: the newest `compaction/start` after the latest
/// `session/end-seed` that no later `compaction/end` with the same `compactionId` closes.
/// Scans backwards from the end and stops at the latest end-seed: O(events since it).
pub fn active_lock(events: &[Arc<SessionEvent>]) -> Option<ActiveLock> {
    let mut ended: HashSet<String> = HashSet::new();
    for e in events.iter().rev() {
        if e.kind.core() == Some(CoreKind::EndSeed) {
            return None;
        }
        match e.kind.as_str() {
            END => {
                ended.insert(id_of(e));
            }
            START => {
                let id = id_of(e);
                if !ended.contains(&id) {
                    let turn = e.data.to_value().get("turn").and_then(Value::as_u64);
                    return Some(ActiveLock {
                        seq: e.seq,
                        compaction_id: id,
                        turn,
                    });
                }
            }
            _ => {}
        }
    }
    None
}

/// The live lock of `session`: [`active_lock`] of its events, unless that start was written
/// before this lifecycle of the session began — its seq is below
/// [`Session::first_live_seq`] (the log was restored or seeded after it was written: the process
/// that wrote it is gone, since a resumed session is only opened by its one writer), or the
/// session's end-seed is still pending (a seeded session that has not written yet). dsh writes
/// no `session/end-seed` when it resumes a stored session, so this is the dsh form of
/// upstream's stale rule for resume: a compaction killed mid-summary does not block the next
/// one after the session is resumed (docs/upstream/compaction.md, "Lock rule").
pub fn active_lock_of(session: &Session) -> Option<ActiveLock> {
    if session.end_seed_pending() {
        return None;
    }
    active_lock(&session.events()).filter(|l| l.seq >= session.first_live_seq())
}
