//! The approval service's contact with the session log: the open-turn check, audit appends,
//! the policy fold and the declaration of the three log-only event types.
//!
//! See docs/upstream/approval.md (A request) and docs/upstream/session.md (Plugin-merged
//! log-only types).

use std::sync::Arc;

use dsh_kernel::{BoxError, Context};
use dsh_session::{EventData, EventTypeDecl, EventTypeRegistry, Session};
use serde::Serialize;

use crate::{
    ApprovalError, ApprovalPolicy, AskedData, DecidedData, EVENT_ASKED, EVENT_DECIDED,
    EVENT_POLICY, PLUGIN_ID, PolicyData,
};

/// True when the session has an open turn.
pub(crate) fn has_open_turn(session: &Session) -> bool {
    session.open_turn().is_some()
}

/// Appends a log-only event with a serialisable payload.
pub(crate) fn append<T: Serialize>(
    session: &Session,
    event: &'static str,
    data: &T,
) -> Result<(), ApprovalError> {
    let value = serde_json::to_value(data).map_err(|e| ApprovalError::Append {
        event,
        message: e.to_string(),
        code: "SERIALIZE",
    })?;
    session
        .append(event, EventData::Opaque(value), None)
        .map(|_| ())
        .map_err(|e| ApprovalError::Append {
            event,
            message: e.to_string(),
            code: e.code(),
        })
}

/// The policy of the last well-formed `approval/policy` event, if any.
pub(crate) fn last_policy(session: &Session) -> Option<ApprovalPolicy> {
    session.events().iter().rev().find_map(|e| {
        if e.kind.as_str() != EVENT_POLICY {
            return None;
        }
        match &e.data {
            EventData::Opaque(v) => serde_json::from_value::<PolicyData>(v.clone())
                .ok()
                .map(|p| p.policy),
            _ => None,
        }
    })
}

/// The three declarations (typed validation; `asked`/`decided` need an open turn).
pub fn declarations() -> Vec<EventTypeDecl> {
    vec![
        EventTypeDecl::new(EVENT_ASKED, PLUGIN_ID, false).typed::<AskedData>(),
        EventTypeDecl::new(EVENT_DECIDED, PLUGIN_ID, false).typed::<DecidedData>(),
        EventTypeDecl::new(EVENT_POLICY, PLUGIN_ID, true).typed::<PolicyData>(),
    ]
}

/// Declares the types in the process-wide default registry and in an [`EventTypeRegistry`]
/// service, if one is provided.
pub(crate) fn declare_types(ctx: &Context) -> Result<(), BoxError> {
    let mut registries: Vec<Arc<EventTypeRegistry>> = vec![EventTypeRegistry::shared_default()];
    if let Some(r) = ctx.get::<EventTypeRegistry>()
        && !registries.iter().any(|x| Arc::ptr_eq(x, &r))
    {
        registries.push(r);
    }
    for r in registries {
        for d in declarations() {
            r.register(d).map_err(|e| ApprovalError::Registration {
                message: e.to_string(),
            })?;
        }
    }
    Ok(())
}
