//! dsh-permissions: permission presets as a `tools/pre-execute` policy.
//!
//! Three presets ([`PermissionMode`]), decided from the effects each tool declares
//! ([`dsh_tools::ToolEffects`], looked up through the [`ToolRegistry`] service — never from tool
//! names): `read-only` (only tools declared read-only run), `workspace-write` (the default:
//! file writes and commands inside the workspace run; a declared target argument — `write`/
//! `edit` `file_path`, `bash` `workdir` — resolving outside the session's workspace root asks
//! for approval, and so does a network tool and a `read` whose `file_path` the filesystem fence
//! would refuse ([`read_outside_decision`]) — a policy check, NOT an OS sandbox),
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
//!
//! [`ToolRegistry`]: dsh_tools::ToolRegistry
//! [`EventTypeRegistry`]: dsh_session::EventTypeRegistry

mod error;
mod mode;
mod plugin;
mod policy;
mod preset;
mod service;

pub use error::PermissionsError;
pub use mode::{PermissionMode, PermissionsConfig};
pub use plugin::{install, policy_text, sandboxed_policy_text};
pub use policy::{
    MAX_SYMLINK_HOPS, decide, is_inside, network_reason, outside_reason, read_only_denial,
    resolve_path,
};
pub use preset::{PresetData, declaration, last_logged_preset};
pub use service::{PermissionPolicy, call_workspace, read_outside_decision};

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-permissions";

/// The log-only event recording the preset in force (upstream name).
pub const EVENT_PRESET: &str = "permission/preset";

/// The runtime-context name this plugin contributes.
pub const POLICY_CONTEXT: &str = "permission:policy";

/// The order of [`POLICY_CONTEXT`] among runtime contexts (dsh-context's date is 10, git 20).
pub const POLICY_CONTEXT_ORDER: f64 = 50.0;

dsh_kernel::plugin! {
    after = [
        dsh_session::PLUGIN,
        dsh_agent::PLUGIN,
        dsh_tools::PLUGIN,
        dsh_system_prompt::PLUGIN,
    ],
    settings = PermissionsConfig,
    top_level = ["permission_mode"],
    restricted = ["permission_mode"],
    start = plugin::apply,
}
