//! The policy service ([`PermissionPolicy`]): the mode in force applied to each call, and the
//! per-session "preset logged" bookkeeping.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

use dsh_fs::{Access, FsError, FsService, Workspace};
use dsh_session::{EventData, Session};
use dsh_tools::{PreToolDecision, ToolEffects, ToolExecution, ToolRegistry};
use serde_json::Value;

use crate::{
    EVENT_PRESET, PermissionMode, PermissionsError, PresetData, decide, last_logged_preset,
    outside_reason,
};

/// The policy service (provided as `Arc<PermissionPolicy>` by the plugin): the mode in force,
/// the tool registry whose declared effects it reads, and the per-session "preset logged"
/// bookkeeping.
#[derive(Debug)]
pub struct PermissionPolicy {
    mode: PermissionMode,
    registry: Option<ToolRegistry>,
    logged: Mutex<HashSet<String>>,
    sandboxed_commands: bool,
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
            sandboxed_commands: false,
        }
    }

    /// This policy with `sandboxed` saying whether the OS sandbox confines the commands of
    /// command-running tools (`dsh-sandbox` booted): then, under `read-only`, a tool whose only
    /// declared effect is running commands (`bash`) runs, confined read-only by the sandbox,
    /// instead of being denied.
    pub fn with_sandboxed_commands(mut self, sandboxed: bool) -> Self {
        self.sandboxed_commands = sandboxed;
        self
    }

    /// Whether commands are confined by the OS sandbox (see
    /// [`PermissionPolicy::with_sandboxed_commands`]).
    pub fn sandboxed_commands(&self) -> bool {
        self.sandboxed_commands
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
    /// caller sees it, and the caller's [`Workspace`] ([`call_workspace`]: relative targets
    /// against the session's `cwd`, fenced by the run's workspace root, as dsh-tool-fs does). Under `workspace-write`, a read-only tool that declares a target argument
    /// (`read` `file_path`) whose target the filesystem fence would refuse
    /// ([`read_outside_decision`]) asks too, so an approval lets that read run once.
    pub fn decide_call(&self, exec: &ToolExecution) -> PreToolDecision {
        let workspace = call_workspace(exec);
        let effects = self
            .registry
            .as_ref()
            .and_then(|r| r.effects(&exec.name, exec.key()));
        if self.mode == PermissionMode::ReadOnly
            && self.sandboxed_commands
            && effects.is_some_and(|e| {
                e.runs_commands() && !e.writes_files() && !e.uses_network() && !e.is_read_only()
            })
        {
            return PreToolDecision::Allow;
        }
        let decision = decide(self.mode, &exec.name, effects, &exec.arguments, &workspace);
        match (self.mode, effects, &decision) {
            (PermissionMode::WorkspaceWrite, Some(e), PreToolDecision::Allow)
                if e.is_read_only() =>
            {
                let fs = exec.caller.as_ref().and_then(|c| c.ctx.get::<FsService>());
                match fs {
                    Some(fs) => {
                        read_outside_decision(&fs, &exec.name, e, &exec.arguments, &workspace)
                            .unwrap_or(decision)
                    }
                    None => decision,
                }
            }
            _ => decision,
        }
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

/// The `workspace-write` decision for a read-only call of `tool` (declared `effects`) whose
/// declared target argument names a path the filesystem fence of `fs` refuses to read
/// ([`FsError::OutsideWorkspace`]: outside `workspace`'s root (a bare path is root and cwd), outside every granted read root, and not
/// allowed by the fs policy): `Some(Ask)` with [`outside_reason`] for the real path (symlinks
/// resolved) and the canonical workspace. `None` — no opinion — when the tool declares no target,
/// the argument is missing or not a string, or the fence lets the read through (or fails for
/// another reason, which the tool reports itself). The fence itself honours the resulting
/// `allowed-once` grant for that call only (see docs/tools.md, "File tools").
pub fn read_outside_decision(
    fs: &FsService,
    tool: &str,
    effects: ToolEffects,
    args: &Value,
    workspace: impl Into<Workspace>,
) -> Option<PreToolDecision> {
    let workspace = workspace.into();
    let arg = effects.target_arg()?;
    let target = args.as_object()?.get(arg)?.as_str()?;
    match fs.resolve(target, &workspace, Access::Read) {
        Err(FsError::OutsideWorkspace { real_path, .. }) => {
            let root =
                std::fs::canonicalize(&workspace.root).unwrap_or_else(|_| workspace.root.clone());
            Some(PreToolDecision::Ask {
                reason: Some(outside_reason(tool, effects, &real_path, &root)),
            })
        }
        _ => None,
    }
}

/// The workspace of a call ([`Workspace::for_context`] of the caller): relative targets
/// against the caller session's `cwd`, fenced by the run's workspace root when it contains that
/// `cwd` (else the nearest `.git` ancestor of the `cwd`, else the `cwd`). No caller: the run's
/// facts are unknown, so the process's current directory (`.` if even that is unreadable).
pub fn call_workspace(exec: &ToolExecution) -> Workspace {
    let Some(caller) = exec.caller.as_ref() else {
        return Workspace::for_session(None, None, None)
            .unwrap_or_else(|_| Workspace::at(PathBuf::from(".")));
    };
    let cwd = caller.session.header().cwd.clone().map(PathBuf::from);
    Workspace::for_context(&caller.ctx, cwd.as_deref(), None)
        .unwrap_or_else(|_| Workspace::at(PathBuf::from(".")))
}
