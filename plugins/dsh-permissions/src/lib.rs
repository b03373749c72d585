//! dsh-permissions: permission presets as a `tools/pre-execute` policy.
//!
//! Three presets ([`PermissionMode`]), decided from the effects each tool declares
//! ([`dsh_tools::ToolEffects`], looked up through the [`ToolRegistry`] service — never from tool
//! names): `read-only` (only tools declared read-only run), `workspace-write` (the default:
//! file writes and commands inside the workspace run; a declared target argument — `write`/
//! `edit` `file_path`, `bash` `workdir` — resolving outside the session's workspace root asks
//! for approval, and so does a network tool — a policy check, NOT an OS sandbox),
//! `danger-full-access` (everything runs). Decisions are made by [`decide`]; every deny/ask
//! reason names the preset.
//!
//! The plugin (settings section [`PLUGIN_ID`] = `dsh-permissions`, [`PermissionsConfig`]):
//! - registers a `tools/pre-execute` listener: a deny short-circuits; an allow continues the
//!   chain; an ask continues the chain too and becomes the chain's deny if a later listener
//!   denies (the stricter answer wins). The pipeline resolves an ask through the approval
//!   service (absent ⇒ the call is denied with the ask reason). This plugin only decides.
//! - logs the preset in force as the log-only event `permission/preset` `{"preset":"<name>"}`
//!   (upstream's payload, see `docs/tools.md`, "Permission presets") once per session, at
//!   `agent/session-start` or before the session's first tool decision, unless the session's
//!   last `permission/preset` already names it (so a resumed session logs only a change). It
//!   declares the type, with typed validation, in the session [`EventTypeRegistry`] service and
//!   the process-wide default registry, as owner `dsh-permissions`.
//! - contributes the runtime context `permission:policy` ([`POLICY_CONTEXT`], text
//!   [`policy_text`]) through the `SystemPrompt` service, so the model knows the mode (runtime
//!   contexts travel as snapshot messages; the system prompt stays stable).
//!
//! Behaviour notes and their upstream sources: `docs/tools.md` ("Permission presets").

use dsh_kernel::ErrorCode;
mod policy;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_agent::lifecycle::{AgentDisposed, AgentSessionStart};
use dsh_kernel::{BoxError, Context};
use dsh_session::{EventData, EventTypeDecl, EventTypeRegistry, Session};
use dsh_system_prompt::{PromptContext, SystemPrompt};
use dsh_tools::{PreToolDecision, ToolExecution, ToolRegistry, ToolsPreExecute};
use serde::{Deserialize, Serialize};

pub use policy::{
    MAX_SYMLINK_HOPS, decide, is_inside, network_reason, outside_reason, read_only_denial,
    resolve_path,
};

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-permissions";

/// The log-only event recording the preset in force (upstream name).
pub const EVENT_PRESET: &str = "permission/preset";

/// The runtime-context name this plugin contributes.
pub const POLICY_CONTEXT: &str = "permission:policy";

/// The order of [`POLICY_CONTEXT`] among runtime contexts (dsh-context's date is 10, git 20).
pub const POLICY_CONTEXT_ORDER: f64 = 50.0;

/// A permission preset. Serialized kebab-case: `read-only`, `workspace-write`,
/// `danger-full-access`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    /// Only tools declared read-only run.
    ReadOnly,
    /// Writes and `bash` inside the workspace run; outside asks. The default.
    #[default]
    WorkspaceWrite,
    /// Everything runs.
    DangerFullAccess,
}

impl PermissionMode {
    /// Every mode, strictest first.
    pub const ALL: [PermissionMode; 3] = [
        PermissionMode::ReadOnly,
        PermissionMode::WorkspaceWrite,
        PermissionMode::DangerFullAccess,
    ];

    /// The wire/CLI name (`read-only`, `workspace-write`, `danger-full-access`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::DangerFullAccess => "danger-full-access",
        }
    }
}

impl std::fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PermissionMode {
    type Err = PermissionsError;

    /// Parses a wire name.
    ///
    /// # Errors
    /// [`PermissionsError::UnknownMode`] for any other string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| PermissionsError::UnknownMode(s.to_owned()))
    }
}

/// The `dsh-permissions` settings section: `{"permission_mode": "read-only" |
/// "workspace-write" | "danger-full-access"}` (default `workspace-write`; unknown fields are
/// rejected; `mode` is accepted as an alias). It is also the top-level key `permission_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionsConfig {
    /// The preset in force for every agent.
    #[serde(alias = "mode")]
    pub permission_mode: PermissionMode,
}

/// Payload of `permission/preset`: `{"preset":"<name>"}` (upstream's payload shape
/// `{preset: string}`; see `docs/tools.md`, "Permission presets").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresetData {
    /// The preset name.
    pub preset: String,
}

/// Errors of this crate; [`PermissionsError::code`] is stable.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum PermissionsError {
    /// Not a preset name. Code `UNKNOWN_PERMISSION_MODE`.
    #[error(
        "unknown permission mode \"{0}\" (expected read-only, workspace-write or danger-full-access)"
    )]
    #[code("UNKNOWN_PERMISSION_MODE")]
    UnknownMode(String),
    /// Declaring `permission/preset` failed (another plugin owns the name). Code
    /// `EVENT_TYPE_REGISTRATION`.
    #[error("cannot declare permission/preset: {0}")]
    #[code("EVENT_TYPE_REGISTRATION")]
    Registration(String),
    /// Appending `permission/preset` to a session failed. Code `APPEND_FAILED`.
    #[error("cannot log permission/preset: {0}")]
    #[code("APPEND_FAILED")]
    Append(String),
}

/// The `permission:policy` runtime-context text for `mode` (exact).
pub fn policy_text(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::ReadOnly => {
            "Permission mode: read-only. Only read-only tools run (read, grep, glob, todo_write, job_output, job_list); write, edit, bash and every other tool are denied. Do not retry denied calls: describe the change you would make instead. The user can rerun with --permission-mode workspace-write to allow modifications."
        }
        PermissionMode::WorkspaceWrite => {
            "Permission mode: workspace-write. write, edit and bash run without asking inside the workspace root. A write or edit whose file_path, or a bash call whose workdir, resolves outside the workspace (symlinks and .. included) needs the user's approval and is denied when no approval is available. This is a policy check, not an OS sandbox: keep bash commands inside the workspace."
        }
        PermissionMode::DangerFullAccess => {
            "Permission mode: danger-full-access. Every tool runs without permission checks, inside or outside the workspace. Take extra care with destructive commands."
        }
    }
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
    /// declared effects; see [`decide`]). [`install`] uses [`PermissionPolicy::with_registry`].
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

/// The `permission/preset` declaration: owner [`PLUGIN_ID`], allowed between turns, payload
/// validated as [`PresetData`].
pub fn declaration() -> EventTypeDecl {
    EventTypeDecl::new(EVENT_PRESET, PLUGIN_ID, true).typed::<PresetData>()
}

fn log_or_warn(policy: &PermissionPolicy, session: &Session) {
    if let Err(e) = policy.ensure_logged(session) {
        tracing::warn!(target: "dsh_permissions", session = session.id(), code = e.code(), error = %e, "permission preset not logged");
    }
}

/// Installs the policy for `mode` under `ctx` (what the plugin's `apply` does after reading
/// its settings): declares the event type, provides `Arc<PermissionPolicy>`, registers the
/// `tools/pre-execute`, `agent/session-start` and `agent/disposed` listeners and, when a
/// `SystemPrompt` service is provided, the `permission:policy` runtime context. Everything is
/// bound to `ctx`'s scope.
///
/// # Errors
/// [`PermissionsError::Registration`] when `permission/preset` is owned by another plugin;
/// kernel errors (boxed) when `ctx` is inactive or `Arc<PermissionPolicy>` cannot be provided;
/// prompt errors when `permission:policy` is already registered globally.
pub fn install(ctx: &Context, mode: PermissionMode) -> Result<Arc<PermissionPolicy>, BoxError> {
    let default = EventTypeRegistry::shared_default();
    default
        .register(declaration())
        .map_err(|e| PermissionsError::Registration(e.to_string()))?;
    if let Some(reg) = ctx.get::<EventTypeRegistry>()
        && !Arc::ptr_eq(&reg, &default)
    {
        reg.register_scoped(ctx, declaration())
            .map_err(|e| PermissionsError::Registration(e.to_string()))?
            .detach();
    }

    let policy = Arc::new(match ctx.get::<ToolRegistry>() {
        Some(registry) => PermissionPolicy::with_registry(mode, (*registry).clone()),
        None => PermissionPolicy::new(mode),
    });
    ctx.provide(policy.clone())?.detach();

    let p = policy.clone();
    ctx.on_waterfall::<ToolsPreExecute, _, _>(move |exec, next| {
        let p = p.clone();
        async move {
            if let Some(caller) = &exec.caller {
                log_or_warn(&p, &caller.session);
            }
            match p.decide_call(&exec) {
                PreToolDecision::Allow => next.run(exec).await,
                deny @ PreToolDecision::Deny { .. } => Ok(deny),
                ask @ PreToolDecision::Ask { .. } => match next.run(exec).await? {
                    deny @ PreToolDecision::Deny { .. } => Ok(deny),
                    _ => Ok(ask),
                },
            }
        }
    })?
    .detach();

    let p = policy.clone();
    ctx.on_emit::<AgentSessionStart>(move |start| log_or_warn(&p, start.agent.session()))?
        .detach();
    let p = policy.clone();
    ctx.on_emit::<AgentDisposed>(move |notice| p.forget(notice.agent.session().id()))?
        .detach();

    if let Some(prompt) = ctx.get::<SystemPrompt>() {
        prompt
            .context(
                ctx,
                PromptContext::new(POLICY_CONTEXT, POLICY_CONTEXT_ORDER, policy_text(mode)),
            )?
            .detach();
    }
    Ok(policy)
}

fn apply(ctx: &Context) -> Result<(), BoxError> {
    let config: PermissionsConfig = ctx.settings_section(PLUGIN_ID)?;
    install(ctx, config.permission_mode)?;
    Ok(())
}

dsh_kernel::plugin! {
    after = [
        dsh_session::PLUGIN,
        dsh_agent::PLUGIN,
        dsh_tools::PLUGIN,
        dsh_system_prompt::PLUGIN,
    ],
    settings = PermissionsConfig,
    top_level = ["permission_mode"],
    start = apply,
}
