//! The latest list per session: folded from a session log ([`latest_in_events`]) or kept by the
//! [`TodoLists`] service for UIs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use dsh_session::{EventData, EventType, Session, SessionEvent, TodoItem};

/// The latest todo list of a session's log: the last `todo/write`, cleared (`None`) by a later
/// `turn/start` (upstream projection: a finished checklist stays visible until the next turn).
pub fn latest_in_events(events: &[Arc<SessionEvent>]) -> Option<Vec<TodoItem>> {
    let mut state = None;
    for e in events {
        match &e.data {
            EventData::TodoWrite(d) => state = Some(d.todos.clone()),
            _ if e.kind == EventType::TURN_START => state = None,
            _ => {}
        }
    }
    state
}

/// The todo service for UIs (provided by this plugin): the latest list per session.
#[derive(Debug, Default)]
pub struct TodoLists {
    latest: Mutex<HashMap<String, Vec<TodoItem>>>,
}

impl TodoLists {
    /// The list last written through this plugin for `session_id` (this process only).
    pub fn latest(&self, session_id: &str) -> Option<Vec<TodoItem>> {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(session_id)
            .cloned()
    }

    /// The current list of `session` folded from its log (works after a resume; see
    /// [`latest_in_events`]).
    pub fn latest_in(&self, session: &Session) -> Option<Vec<TodoItem>> {
        latest_in_events(&session.events())
    }

    pub(crate) fn set(&self, session_id: &str, todos: Vec<TodoItem>) {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session_id.to_owned(), todos);
    }
}
