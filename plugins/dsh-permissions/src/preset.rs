//! The `permission/preset` log event: its payload ([`PresetData`]), its declaration and the
//! lookup of the last preset a session logged.

use dsh_session::{EventData, EventTypeDecl, Session};
use serde::{Deserialize, Serialize};

use crate::{EVENT_PRESET, PLUGIN_ID};

/// Payload of `permission/preset`: `{"preset":"<name>"}` (upstream's payload shape
/// `{preset: string}`; see `docs/tools.md`, "Permission presets").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresetData {
    /// The preset name.
    pub preset: String,
}

/// The most recent `permission/preset` name in `session`'s log, if any.
pub fn last_logged_preset(session: &Session) -> Option<String> {
    session.events().iter().rev().find_map(|e| {
        if e.kind.as_str() != EVENT_PRESET {
            return None;
        }
        match &e.data {
            EventData::Opaque(v) => serde_json::from_value::<PresetData>(v.clone())
                .ok()
                .map(|p| p.preset),
            _ => None,
        }
    })
}

/// The `permission/preset` declaration: owner [`PLUGIN_ID`], allowed between turns, payload
/// validated as [`PresetData`].
pub fn declaration() -> EventTypeDecl {
    EventTypeDecl::new(EVENT_PRESET, PLUGIN_ID, true).typed::<PresetData>()
}
