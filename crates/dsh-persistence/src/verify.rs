//! Read-only verification of a session log, independent of the backend that stored it: a backend
//! turns its artifact into a [`RawLog`] (header plus records in storage order, with the read
//! failures it met in place), and [`verify_log`] checks the records the way a resume would —
//! envelopes, packed rows, seq contiguity, known types, the live append rules (replay through
//! `Session::from_restore` / `Session::append_event`), the invariants — and reports the repair a
//! load would make (torn tail, closers from [`crate::interrupted_turn_closers`]).
//!
//! Behaviour: `docs/persistence.md` ("Verify").

use dsh_kernel::ErrorCode;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_session::{
    CoreKind, EventTypeRegistry, Session, SessionError, SessionEvent, SessionHeader,
    check_invariants,
};
use serde_json::{Value, json};

use crate::error::{PersistenceError, UnsupportedReason};
use crate::repair::interrupted_turn_closers;

/// One problem found by verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    /// Stable code (a [`PersistenceError`], `SessionError` or invariant code).
    pub code: String,
    /// Human description.
    pub message: String,
    /// 1-based physical line (or record number) of the artifact, when known.
    pub line: Option<u64>,
}

impl VerifyError {
    /// A finding from a [`PersistenceError`] (its code and message).
    pub fn from_error(e: &PersistenceError, line: Option<u64>) -> Self {
        Self {
            code: e.code().to_owned(),
            message: e.to_string(),
            line,
        }
    }
}

/// One item of a [`RawLog`], in storage order.
#[derive(Debug, Clone, PartialEq)]
pub enum RawItem {
    /// A complete stored record (an event or a packed row) as JSON. Records without
    /// `seq`/`time` (`seq0`/`time0` for packed rows) get them restored.
    Record {
        /// 1-based line / record number, when the artifact has one.
        line: Option<u64>,
        /// The record.
        value: Value,
    },
    /// A read failure at this position (unparsable line, damaged frame, I/O error).
    Error(VerifyError),
}

/// A session artifact as a backend read it for verification, before any decoding.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RawLog {
    /// The artifact (reported as the report's `path`).
    pub path: PathBuf,
    /// The header, when the artifact has a valid one (its failure is an [`RawItem::Error`]).
    pub header: Option<SessionHeader>,
    /// Records and read failures in storage order.
    pub items: Vec<RawItem>,
    /// The artifact ends in an incomplete record that a load drops.
    pub torn_tail: bool,
}

/// The result of verifying one log.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// The checked artifact.
    pub path: PathBuf,
    /// The header, when it parsed.
    pub header: Option<SessionHeader>,
    /// Decoded events (committed prefix; seq/time restored where absent), without closers.
    pub events: Vec<SessionEvent>,
    /// Everything wrong, in storage order.
    pub errors: Vec<VerifyError>,
    /// An incomplete final record that a load would drop.
    pub torn_tail: bool,
    /// Closers a load would append (computed only for a log without errors).
    pub closers: Vec<SessionEvent>,
    /// Informational notes (e.g. restored envelopes).
    pub notes: Vec<String>,
}

impl VerifyReport {
    /// True when the log loads cleanly: no errors, no repair.
    pub fn ok(&self) -> bool {
        self.errors.is_empty() && !self.torn_tail && self.closers.is_empty()
    }

    fn error(&mut self, code: &str, message: impl Into<String>, line: Option<u64>) {
        self.errors.push(VerifyError {
            code: code.to_owned(),
            message: message.into(),
            line,
        });
    }
}

/// Inserts `seq`/`time` (events) or `seq0`/`time0` (packed rows) when absent; returns whether it
/// changed the record.
pub fn restore_envelope(record: &mut Value, next_seq: u64, clock: u64) -> bool {
    let Value::Object(obj) = record else {
        return false;
    };
    let packed = obj
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(dsh_session::packed::is_packed_row_type);
    let (sk, tk) = if packed {
        ("seq0", "time0")
    } else {
        ("seq", "time")
    };
    let mut changed = false;
    if !obj.contains_key(sk) {
        obj.insert(sk.to_owned(), json!(next_seq));
        changed = true;
    }
    if !obj.contains_key(tk) {
        obj.insert(tk.to_owned(), json!(clock));
        changed = true;
    }
    changed
}

/// Verifies `raw` against the event types of `registry` (use the registry a resume would use:
/// the kernel's, with every plugin's declarations). Never writes anything.
pub fn verify_log(raw: RawLog, registry: &Arc<EventTypeRegistry>) -> VerifyReport {
    let mut r = VerifyReport {
        path: raw.path,
        header: raw.header,
        torn_tail: raw.torn_tail,
        ..VerifyReport::default()
    };
    let hint = r.path.display().to_string();
    let id = r
        .header
        .as_ref()
        .map_or_else(|| hint.clone(), |h| h.id.clone());
    let mut clock = r.header.as_ref().map_or(0, |h| h.created_at);
    let mut next_seq = 0u64;
    let mut restored = 0u64;
    // Line of each event (index = position in `r.events`).
    let mut lines: Vec<Option<u64>> = Vec::new();
    for item in raw.items {
        let (line, mut value) = match item {
            RawItem::Error(e) => {
                r.errors.push(e);
                continue;
            }
            RawItem::Record { line, value } => (line, value),
        };
        if restore_envelope(&mut value, next_seq, clock) {
            restored += 1;
        }
        match crate::codec::decode_record(&id, line, value) {
            Ok(decoded) => {
                for e in decoded {
                    if e.seq != next_seq {
                        r.error(
                            "SESSION_PERSISTENCE_CORRUPTION",
                            format!("seq gap (expected {next_seq}, got {})", e.seq),
                            line,
                        );
                    }
                    next_seq = e.seq + 1;
                    clock = clock.max(e.time);
                    lines.push(line);
                    r.events.push(e);
                }
            }
            Err(e) => r.errors.push(VerifyError::from_error(&e, line)),
        }
    }
    if restored > 0 {
        r.notes.push(format!(
            "{restored} record(s) had no seq/time (an upstream normalized snapshot?); restored \
             them as seq = position, time = a running clock"
        ));
    }
    if !r.errors.is_empty() {
        return r;
    }
    let line_of = |seq: Option<u64>| {
        seq.and_then(|s| usize::try_from(s).ok())
            .and_then(|i| lines.get(i).copied().flatten())
    };
    if let Err(e) = crate::codec::check_known_types(registry, &id, &r.events, Some(r.path.clone()))
    {
        let seq = match &e {
            PersistenceError::FormatUnsupported {
                reason: UnsupportedReason::UnknownEventType { seq, .. },
                ..
            } => Some(*seq),
            _ => None,
        };
        r.errors.push(VerifyError::from_error(&e, line_of(seq)));
        return r;
    }
    // The live append rules: restore through the last end-seed, then append the rest.
    let split = r
        .events
        .iter()
        .rposition(|e| e.kind.core() == Some(CoreKind::EndSeed))
        .map_or(0, |i| i + 1);
    let invariants = {
        let shared: Vec<Arc<SessionEvent>> = r.events.iter().cloned().map(Arc::new).collect();
        check_invariants(&shared, Some(registry))
    };
    let replay = Session::from_restore_with(
        id.clone(),
        r.events[..split].to_vec(),
        r.header.clone(),
        registry.clone(),
    );
    match replay {
        Err(e) => {
            if e.code() != "INVARIANT_VIOLATION" {
                let seq = error_seq(&e).or_else(|| {
                    first_failing(&id, &r.events[..split], r.header.as_ref(), registry)
                });
                let message = match seq {
                    Some(s) => format!("seq {s}: {e}"),
                    None => e.to_string(),
                };
                let line = line_of(seq);
                r.error(e.code(), message, line);
            }
        }
        Ok(session) => {
            let mut failure = None;
            for ev in &r.events[split..] {
                if let Err(e) = session.append_event(ev.clone()) {
                    if e.code() != "INVARIANT_VIOLATION" {
                        failure = Some((e.code(), format!("seq {}: {e}", ev.seq), ev.seq));
                    }
                    break;
                }
            }
            if let Some((code, message, seq)) = failure {
                let line = line_of(Some(seq));
                r.error(code, message, line);
            }
        }
    }
    for v in invariants {
        let line = line_of(Some(v.seq));
        r.error(v.kind.code(), v.to_string(), line);
    }
    if r.errors.is_empty() {
        r.closers = interrupted_turn_closers(&r.events);
    }
    r
}

/// The seq of the first event of `events` that `Session::from_restore` refuses (binary search
/// over prefixes; a refused prefix stays refused when extended). `None` when all restore.
fn first_failing(
    id: &str,
    events: &[SessionEvent],
    header: Option<&SessionHeader>,
    registry: &Arc<EventTypeRegistry>,
) -> Option<u64> {
    let restores = |k: usize| {
        Session::from_restore_with(id, events[..k].to_vec(), header.cloned(), registry.clone())
            .is_ok()
    };
    if restores(events.len()) {
        return None;
    }
    // Invariant: prefix `lo` restores, prefix `hi` does not.
    let (mut lo, mut hi) = (0usize, events.len());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if restores(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    events.get(hi - 1).map(|e| e.seq)
}

fn error_seq(e: &SessionError) -> Option<u64> {
    match e {
        SessionError::MalformedEvent { seq, .. } => *seq,
        SessionError::SeqGap { got, .. } => Some(*got),
        SessionError::Invariant(v) => Some(v.seq),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_restoration() {
        let mut v = json!({"type": "turn/start", "data": {"turn": 1}});
        assert!(restore_envelope(&mut v, 4, 9));
        assert_eq!(
            v,
            json!({"type": "turn/start", "data": {"turn": 1}, "seq": 4, "time": 9})
        );
        let mut row = json!({"type": "text-chunks", "data": {}});
        assert!(restore_envelope(&mut row, 2, 3));
        assert_eq!(row["seq0"], json!(2));
        assert_eq!(row["time0"], json!(3));
        let mut full = json!({"type": "x", "seq": 1, "time": 2, "data": {}});
        assert!(!restore_envelope(&mut full, 0, 0));
    }
}
