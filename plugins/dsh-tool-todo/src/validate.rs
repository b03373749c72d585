//! Validation and canonicalisation of the list the model sends ([`validate`]).

use dsh_session::TodoItem;

use crate::{Status, Todo, TodoError};

/// Validates and canonicalises a model list (see the crate docs).
///
/// # Errors
/// [`TodoError::Invalid`] with ``invalid todo: `content` must be a non-empty string``,
/// `invalid todos: duplicate content "<c>"` or
/// `invalid todos: at most one task may be in_progress (got <n>)`.
pub fn validate(raw: &[Todo], allow_parallel: bool) -> Result<Vec<TodoItem>, TodoError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut seen = std::collections::HashSet::new();
    let mut active = 0;
    for t in raw {
        let content = t.content.trim();
        if content.is_empty() {
            return Err(TodoError::Invalid(
                "invalid todo: `content` must be a non-empty string".to_owned(),
            ));
        }
        if !seen.insert(content.to_owned()) {
            return Err(TodoError::Invalid(format!(
                "invalid todos: duplicate content {content:?}"
            )));
        }
        if t.status == Status::InProgress {
            active += 1;
        }
        out.push(TodoItem {
            content: content.to_owned(),
            status: t.status.into(),
        });
    }
    if !allow_parallel && active > 1 {
        return Err(TodoError::Invalid(format!(
            "invalid todos: at most one task may be in_progress (got {active})"
        )));
    }
    Ok(out)
}
