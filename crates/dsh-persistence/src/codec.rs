//! Storage-record codec glue for backends: decoding one stored record (a `SessionEvent` or a
//! packed `text-chunks`/`reasoning-chunks`/`tool-call-chunks` row, via `dsh-session`'s codec)
//! into events, packing events into records for writing, and the known-type check of a loaded
//! log.
//!
//! Behaviour: `docs/persistence.md` ("Packed rows", "Errors": an unknown non-ignorable type is
//! format-unsupported).

use std::path::PathBuf;
use std::sync::Arc;

use dsh_session::{EventTypeRegistry, SessionEvent, TypeStatus};
use serde_json::Value;

use crate::error::{PersistenceError, Result, UnsupportedReason};

/// Decodes one stored record (already parsed JSON) into its events: a packed row expands to its
/// members, anything else is one event.
///
/// # Errors
/// [`PersistenceError::Corruption`] (with `line`) for a malformed event or packed row.
pub fn decode_record(id: &str, line: Option<u64>, record: Value) -> Result<Vec<SessionEvent>> {
    dsh_session::packed::unpack(std::iter::once(record))
        .map_err(|e| PersistenceError::corruption(id, line, format!("malformed record: {e}")))
}

/// The packed (`pack`: runs of packable `assistant/chunk` deltas become packed rows) or verbatim
/// storage records of a batch as JSON values, one per stored record.
pub fn encode_records(events: &[Arc<SessionEvent>], pack: bool) -> Vec<Value> {
    if pack {
        dsh_session::packed::pack(events)
    } else {
        events.iter().map(|e| e.to_value()).collect()
    }
}

/// Refuses a log containing a type that is neither core, declared in `registry`, nor marked
/// `ignorable`, or a refused legacy type (`request/header-delta`).
///
/// # Errors
/// [`PersistenceError::FormatUnsupported`] with [`UnsupportedReason::UnknownEventType`].
pub fn check_known_types(
    registry: &EventTypeRegistry,
    id: &str,
    events: &[SessionEvent],
    location: Option<PathBuf>,
) -> Result<()> {
    for e in events {
        if e.kind.core().is_some() {
            continue;
        }
        let refuse = match registry.status(&e.kind) {
            TypeStatus::Core | TypeStatus::Declared(_) => false,
            TypeStatus::Forbidden => true,
            TypeStatus::Unknown => !e.ignorable,
        };
        if refuse {
            return Err(PersistenceError::FormatUnsupported {
                id: id.to_owned(),
                reason: UnsupportedReason::UnknownEventType {
                    event_type: e.kind.to_string(),
                    seq: e.seq,
                },
                location,
            });
        }
    }
    Ok(())
}
