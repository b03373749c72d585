//! The dsh sandbox seam: the policy one command runs under ([`SandboxPolicy`]: the mode from an
//! approved one-shot escalation, else the session's latest `sandbox/mode` event, else the
//! configured `permission_mode`; the canonical workspace root), the roots it may write
//! ([`writable_roots`]: the workspace, `/tmp`, `$TMPDIR`), [`SandboxService::confine`] turning
//! an argv into a confined one through the OS runners plugins register ([`SandboxRunner`];
//! `dsh-sandbox-linux` on Linux), the rules that tell a runner's own failure and a sandbox
//! denial from the command's outcome ([`classify`]), and [`SandboxError::Unavailable`]
//! (`SANDBOX_UNAVAILABLE`) whenever no runner works: a confined command is never run
//! unconfined.
//!
//! Behaviour and upstream notes: `docs/upstream/sandbox.md`.

mod error;
mod policy;
mod runner;
mod service;
mod text;

use std::sync::Arc;

use dsh_kernel::{BoxError, Context};
use dsh_session::{EventTypeDecl, EventTypeRegistry};

pub use error::{SandboxError, unavailable_message};
pub use policy::{
    EVENT_MODE, ModeData, SandboxMode, SandboxPolicy, canonical, logged_mode, resolve_mode,
    validate_escalation, writable_roots,
};
pub use runner::{
    CommandRunner, ConfineOptions, ConfinedArgv, Enforcement, RunVerdict, RunnerFailureRule,
    SandboxRunner, bwrap_profile, classify, confine_options,
};
pub use service::{
    SandboxConfig, SandboxService, Selection, bash_argv, is_runner_spawn_failure,
    spawn_failure_detail,
};
pub use text::{
    NETWORK_CONTEXT, POLICY_CONTEXT, denial_marker, escalation_hint, escalation_reason,
    network_text, policy_text, rejected_text, runner_failed_marker,
};

/// This plugin's id (its settings section; also `[sandbox]`).
pub const PLUGIN_ID: &str = "dsh-sandbox";

fn register(ctx: &Context) -> Result<(), BoxError> {
    let config: SandboxConfig = ctx.settings_section(PLUGIN_ID)?;
    ctx.provide(Arc::new(SandboxService::new(config)))?.detach();
    Ok(())
}

fn start(ctx: &Context) -> Result<(), BoxError> {
    let mut registries: Vec<Arc<EventTypeRegistry>> = vec![EventTypeRegistry::shared_default()];
    if let Some(r) = ctx.get::<EventTypeRegistry>()
        && !registries.iter().any(|x| Arc::ptr_eq(x, &r))
    {
        registries.push(r);
    }
    for r in registries {
        r.register(EventTypeDecl::new(EVENT_MODE, PLUGIN_ID, true).typed::<ModeData>())?;
    }
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_session::PLUGIN],
    settings = SandboxConfig,
    aliases = ["sandbox"],
    // The standing mode; dsh-permissions owns and enforces the key.
    observes = ["permission_mode"],
    restricted = [
        "permission_mode",
        "network",
        "runners",
        "runner_command",
        "runner_failure_signatures",
    ],
    register = register,
    start = start,
}
