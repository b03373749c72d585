//! The policy service ([`PermissionPolicy`]): the mode in force applied to each call, and the
//! per-session "preset logged" bookkeeping.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

use dsh_session::{EventData, Session};
use dsh_tools::{PreToolDecision, ToolExecution, ToolRegistry};

use crate::{
    EVENT_PRESET, PermissionMode, PermissionsError, PresetData, decide, last_logged_preset,
};

/// The policy service (provided as `Arc<PermissionPolicy>` by the plugin): the mode in force,
/// the tool registry whose declared effects it reads, and the per-session "preset logged"
/// bookkeeping.
#[derive(Debug)]
pub struct PermissionPolicy {
    mode: PermissionMode,
    registry: Option<ToolRegistry>,
    logged: Mutex<HashSet<String>>,
}

impl PermissionPolicy {
    /// A policy enforcing `mode` without a tool registry: every tool counts as unknown (no
    /// declared effects; see [`decide`]). [`install`](crate::install) uses
    /// [`PermissionPolicy::with_registry`].
    pub fn new(mode: PermissionMode) -> Self {
        Self {
            mode,
            registry: None,
            logged: Mutex::new(HashSet::new()),
        }
    }

    /// A policy enforcing `mode` that reads each tool's declared effects from `registry`
    /// ([`ToolRegistry::effects`], for the caller's scope key).
    pub fn with_registry(mode: PermissionMode, registry: ToolRegistry) -> Self {
        Self {
            registry: Some(registry),
            ..Self::new(mode)
        }
    }

    /// The mode in force.
    pub fn mode(&self) -> PermissionMode {
        self.mode
    }

    /// Decides one call: [`decide`] with the effects the registry reports for the tool as the
    /// caller sees it, and the caller session's `cwd` as the workspace root (no caller or no
    /// `cwd` ⇒ the process's current directory, as dsh-tool-fs does; `.` if even that is
    /// unavailable).
    pub fn decide_call(&self, exec: &ToolExecution) -> PreToolDecision {
        let workspace = exec
            .caller
            .as_ref()
            .and_then(|c| c.session.header().cwd.clone())
            .map(PathBuf::from)
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("."));
        let effects = self
            .registry
            .as_ref()
            .and_then(|r| r.effects(&exec.name, exec.key()));
        decide(self.mode, &exec.name, effects, &exec.arguments, &workspace)
    }

    /// Logs `permission/preset {preset: <mode>}` into `session` once: a no-op when this policy
    /// already handled the session, or when the log's last `permission/preset` already names
    /// the mode (a resumed session). Returns whether an event was appended.
    ///
    /// # Errors
    /// [`PermissionsError::Append`] when the session refuses the event (e.g. the type is not
    /// declared in its registry); the session is then retried at the next call.
    pub fn ensure_logged(&self, session: &Session) -> Result<bool, PermissionsError> {
        let id = session.id().to_owned();
        if self
            .logged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&id)
        {
            return Ok(false);
        }
        let appended = if last_logged_preset(session).as_deref() == Some(self.mode.as_str()) {
            false
        } else {
            let data = serde_json::to_value(PresetData {
                preset: self.mode.as_str().to_owned(),
            })
            .map_err(|e| PermissionsError::Append(e.to_string()))?;
            session
                .append(EVENT_PRESET, EventData::Opaque(data), None)
                .map_err(|e| PermissionsError::Append(format!("{} ({})", e, e.code())))?;
            true
        };
        self.logged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id);
        Ok(appended)
    }

    /// Forgets a session (called on `agent/disposed`), so a re-created agent logs again.
    pub fn forget(&self, session_id: &str) {
        self.logged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session_id);
    }
}
