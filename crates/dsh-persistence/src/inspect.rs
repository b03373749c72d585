//! Inspection over any [`SessionPersistence`]: session summaries (first prompt, turn count and
//! last activity derived from the parsed events), fork, import of a verified log, export into
//! another store, and verification of a stored session. These are the default bodies of the
//! trait's inspection methods, so every backend gets them; a backend may override any of them.
//!
//! Behaviour: `docs/persistence.md` ("Inspection").

use dsh_kernel::ErrorCode;
use std::sync::Arc;

use dsh_llm::MessageSource;
use dsh_session::{
    CoreKind, EventData, EventType, EventTypeRegistry, Session, SessionEvent, SessionHeader,
};

use crate::error::{PersistenceError, Result};
use crate::seam::{SessionPersistence, SessionSnapshot};
use crate::verify::{RawItem, RawLog, VerifyReport, verify_log};

/// What `sessions list` shows of one stored session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// The stored header (id, cwd, `createdAt`, parent/fork fields).
    pub header: SessionHeader,
    /// First line of the first prompt typed by a person, trimmed (empty when none).
    pub title: String,
    /// Number of `turn/end` events (completed or interrupted turns).
    pub turns: u64,
    /// Number of events.
    pub events: u64,
    /// Last activity, epoch ms: the backend's last-write time when it has one, else the last
    /// event's `time`, never earlier than `createdAt`.
    pub last_activity: u64,
}

/// The first-prompt title of a `user/message` typed by a person (first line, trimmed).
fn prompt_title(data: &EventData) -> Option<String> {
    match data {
        EventData::UserMessage(m) if matches!(m.source, MessageSource::User) => Some(
            m.text()
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned(),
        ),
        _ => None,
    }
}

/// Summarises `events` of the session described by `snapshot`.
pub fn summarize(snapshot: SessionSnapshot, events: &[SessionEvent]) -> SessionSummary {
    let title = events
        .iter()
        .find_map(|e| prompt_title(&e.data))
        .unwrap_or_default();
    let turns = events
        .iter()
        .filter(|e| e.kind.core() == Some(CoreKind::TurnEnd))
        .count() as u64;
    let created = snapshot.header.created_at;
    let last = snapshot
        .updated_at
        .or_else(|| events.last().map(|e| e.time))
        .unwrap_or(created)
        .max(created);
    SessionSummary {
        header: snapshot.header,
        title,
        turns,
        events: events.len() as u64,
        last_activity: last,
    }
}

pub(crate) fn summaries<S: SessionPersistence + ?Sized>(store: &S) -> Result<Vec<SessionSummary>> {
    let snapshots = store.list_snapshots()?;
    let mut out = Vec::with_capacity(snapshots.len());
    for snap in snapshots {
        let events = match store.read_from(&snap.header.id, 0) {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(session = %snap.header.id, code = e.code(), error = %e, "cannot read session events");
                Vec::new()
            }
        };
        out.push(summarize(snap, &events));
    }
    Ok(out)
}

pub(crate) fn summary<S: SessionPersistence + ?Sized>(
    store: &S,
    id: &str,
) -> Result<SessionSummary> {
    let loaded = store.inspect(id)?;
    let updated_at = store
        .list_snapshots()?
        .into_iter()
        .find(|s| s.header.id == id)
        .and_then(|s| s.updated_at);
    let snapshot = SessionSnapshot {
        header: loaded.header,
        revision: crate::Revision(String::new()),
        updated_at,
    };
    Ok(summarize(snapshot, &loaded.events))
}

pub(crate) fn fork<S: SessionPersistence + ?Sized>(
    store: &S,
    id: &str,
    at: Option<u64>,
) -> Result<String> {
    let loaded = store.inspect(id)?;
    let len = loaded.events.len() as u64;
    let end = match at {
        Some(seq) if seq >= len => {
            return Err(PersistenceError::InvalidArgument {
                detail: format!(
                    "--at {seq} is past the end of session `{id}` ({len} events, last seq {})",
                    len.saturating_sub(1)
                ),
            });
        }
        Some(seq) => seq + 1,
        None => len,
    };
    let prefix: Vec<SessionEvent> = loaded
        .events
        .into_iter()
        .take(usize::try_from(end).unwrap_or(usize::MAX))
        .collect();
    // The prefix must replay cleanly and must not end inside an open turn.
    let probe =
        Session::from_restore(id, prefix.clone(), Some(loaded.header.clone())).map_err(|e| {
            PersistenceError::corruption(id, None, format!("does not replay: {e} ({})", e.code()))
        })?;
    if let Some((turn, _)) = probe.open_turn() {
        return Err(PersistenceError::InvalidArgument {
            detail: format!(
                "cannot fork `{id}` at seq {}: the prefix ends inside open turn {turn} \
                 (pick a seq at or after its turn/end, or before its turn/start)",
                end.saturating_sub(1)
            ),
        });
    }
    let child_id = dsh_llm::SessionId::fresh().to_string();
    let mut header = SessionHeader::new(child_id.clone(), dsh_session::now_ms());
    header.cwd = loaded.header.cwd.clone();
    header.parent_session = Some(id.to_owned());
    header.seed_length = Some(prefix.len() as u64);
    header.delegation_depth = Some(loaded.header.depth());
    let mut events = prefix;
    let ends_with_seed = events
        .last()
        .is_some_and(|e| e.kind.core() == Some(CoreKind::EndSeed));
    if !ends_with_seed {
        let time = events
            .last()
            .map_or(header.created_at, |e| e.time)
            .max(header.created_at);
        events.push(SessionEvent {
            kind: EventType::END_SEED,
            seq: events.len() as u64,
            time,
            data: EventData::EndSeed,
            ignorable: false,
            source_event_seqs: None,
            surface_op: None,
            residual: None,
        });
    }
    Session::from_restore(child_id.clone(), events.clone(), Some(header.clone())).map_err(|e| {
        PersistenceError::corruption(
            &child_id,
            None,
            format!("the forked log does not validate: {e} ({})", e.code()),
        )
    })?;
    store_new(store, header, events)?;
    Ok(child_id)
}

/// Creates `header` and appends `events` in one batch, then releases the writer role.
fn store_new<S: SessionPersistence + ?Sized>(
    store: &S,
    header: SessionHeader,
    events: Vec<SessionEvent>,
) -> Result<()> {
    let id = header.id.clone();
    store.create(header)?;
    let shared: Vec<Arc<SessionEvent>> = events.into_iter().map(Arc::new).collect();
    let written = store.append(&id, &shared);
    store.release(&id);
    written
}

pub(crate) fn import<S: SessionPersistence + ?Sized>(
    store: &S,
    report: &VerifyReport,
) -> Result<String> {
    if !report.errors.is_empty() {
        return Err(PersistenceError::InvalidArgument {
            detail: format!("{}: the log has errors", report.path.display()),
        });
    }
    let Some(header) = report.header.clone() else {
        return Err(PersistenceError::InvalidArgument {
            detail: format!("{}: the log has no session header", report.path.display()),
        });
    };
    let id = header.id.clone();
    let mut events = report.events.clone();
    events.extend(report.closers.iter().cloned());
    if events.is_empty() {
        return Err(PersistenceError::InvalidArgument {
            detail: format!(
                "{}: the log has no events; nothing to import",
                report.path.display()
            ),
        });
    }
    store_new(store, header, events)?;
    Ok(id)
}

pub(crate) fn export<S: SessionPersistence + ?Sized>(
    store: &S,
    id: &str,
    to: &dyn SessionPersistence,
) -> Result<()> {
    let loaded = store.inspect(id)?;
    store_new(to, loaded.header, loaded.events)
}

/// Copies every stored session of `from` into `to` (header + events, the `inspect` view of
/// `from`). Returns the number of sessions copied.
///
/// # Errors
/// The first load or write failure.
pub fn copy_sessions(from: &dyn SessionPersistence, to: &dyn SessionPersistence) -> Result<usize> {
    let mut n = 0;
    for header in from.list()? {
        from.export(&header.id, to)?;
        n += 1;
    }
    Ok(n)
}

pub(crate) fn verify_stored<S: SessionPersistence + ?Sized>(
    store: &S,
    id: &str,
    registry: &Arc<EventTypeRegistry>,
) -> Result<VerifyReport> {
    let loaded = store.inspect(id)?;
    let stored = loaded.events.len().saturating_sub(loaded.repair.closers);
    let path = store
        .locate(&loaded.header)
        .map_or_else(|| id.into(), |l| l.path);
    let items = loaded.events[..stored]
        .iter()
        .map(|e| RawItem::Record {
            line: None,
            value: e.to_value(),
        })
        .collect();
    Ok(verify_log(
        RawLog {
            path,
            header: Some(loaded.header),
            items,
            torn_tail: loaded.repair.torn_tail_dropped,
        },
        registry,
    ))
}
