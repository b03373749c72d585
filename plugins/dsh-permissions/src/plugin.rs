//! Installing the policy under a context: the event declaration, the service, the
//! `tools/pre-execute` and lifecycle listeners and the `permission:policy` runtime context.

use std::sync::Arc;

use dsh_agent::lifecycle::{AgentDisposed, AgentSessionStart};
use dsh_kernel::{BoxError, Context, ErrorCode};
use dsh_session::{EventTypeRegistry, Session};
use dsh_system_prompt::{PromptContext, SystemPrompt};
use dsh_tools::{PreToolDecision, ToolRegistry, ToolsPreExecute};

use crate::{
    PLUGIN_ID, POLICY_CONTEXT, POLICY_CONTEXT_ORDER, PermissionMode, PermissionPolicy,
    PermissionsConfig, PermissionsError, declaration,
};

/// The `permission:policy` runtime-context text for `mode` (exact).
pub fn policy_text(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::ReadOnly => {
            "Permission mode: read-only. Only read-only tools run (read, grep, glob, todo_write, job_output, job_list); write, edit, bash and every other tool are denied. Do not retry denied calls: describe the change you would make instead. The user can rerun with --permission-mode workspace-write to allow modifications."
        }
        PermissionMode::WorkspaceWrite => {
            "Permission mode: workspace-write. write, edit and bash run without asking inside the workspace root. A read, write or edit whose file_path, or a bash call whose workdir, resolves outside the workspace (symlinks and .. included) needs the user's approval and is denied when no approval is available. This is a policy check, not an OS sandbox: keep bash commands inside the workspace."
        }
        PermissionMode::DangerFullAccess => {
            "Permission mode: danger-full-access. Every tool runs without permission checks, inside or outside the workspace. Take extra care with destructive commands."
        }
    }
}

/// The `permission:policy` text for `mode` when the OS sandbox confines `bash` (exact).
pub fn sandboxed_policy_text(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::ReadOnly => {
            "Permission mode: read-only. Read-only tools run (read, grep, glob, todo_write, job_output, job_list) and bash runs inside an OS sandbox that lets it read but not write anything; write, edit and every other tool are denied. Do not retry denied calls: describe the change you would make instead. The user can rerun with --permission-mode workspace-write to allow modifications."
        }
        PermissionMode::WorkspaceWrite => {
            "Permission mode: workspace-write. write, edit and bash run without asking inside the workspace root. A read, write or edit whose file_path, or a bash call whose workdir, resolves outside the workspace (symlinks and .. included) needs the user's approval and is denied when no approval is available. bash runs inside an OS sandbox: it may write only the workspace and the temporary directories."
        }
        PermissionMode::DangerFullAccess => policy_text(mode),
    }
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

    let sandboxed = ctx.get::<dsh_sandbox::SandboxService>().is_some();
    let policy = Arc::new(
        match ctx.get::<ToolRegistry>() {
            Some(registry) => PermissionPolicy::with_registry(mode, (*registry).clone()),
            None => PermissionPolicy::new(mode),
        }
        .with_sandboxed_commands(sandboxed),
    );
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
                PromptContext::new(
                    POLICY_CONTEXT,
                    POLICY_CONTEXT_ORDER,
                    if sandboxed {
                        sandboxed_policy_text(mode)
                    } else {
                        policy_text(mode)
                    },
                ),
            )?
            .detach();
    }
    Ok(policy)
}

pub(crate) fn apply(ctx: &Context) -> Result<(), BoxError> {
    let config: PermissionsConfig = ctx.settings_section(PLUGIN_ID)?;
    install(ctx, config.permission_mode)?;
    Ok(())
}
