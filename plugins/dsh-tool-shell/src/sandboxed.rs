//! How `bash` runs through the sandbox seam (`dsh-sandbox`): the call's mode (an approved
//! one-shot escalation, else the session's, else the configured one), the escalation request
//! through the approval seam, confinement of `bash -c <command>` (never an unconfined run
//! when confinement fails: `SANDBOX_UNAVAILABLE`), and reading the outcome (runner failure,
//! denial). Behaviour and texts: `docs/upstream/sandbox.md` ("How bash is confined",
//! "Escalation").

use std::path::Path;
use std::sync::Arc;

use dsh_approval::{ApprovalOutcome, ApprovalRequest, ApprovalService};
use dsh_sandbox::{
    ConfinedArgv, RunVerdict, SandboxError, SandboxMode, SandboxService, bash_argv, classify,
    escalation_reason, rejected_text, validate_escalation,
};
use dsh_tools::{ToolFailure, ToolRunContext};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The wider mode a call may ask for (`sandbox_permissions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxPermissions {
    /// Write the workspace, `/tmp` and `$TMPDIR`.
    WorkspaceWrite,
    /// No sandbox.
    DangerFullAccess,
}

impl SandboxPermissions {
    /// The mode asked for.
    pub fn mode(self) -> SandboxMode {
        match self {
            Self::WorkspaceWrite => SandboxMode::WorkspaceWrite,
            Self::DangerFullAccess => SandboxMode::DangerFullAccess,
        }
    }
}

/// The sandbox facts of a foreground result (JSON camelCase).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxInfo {
    /// The mode the command ran under.
    pub mode: String,
    /// The runner (`bwrap`, `landlock`, …); absent when unconfined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
    /// `full` or `partial`; absent when unconfined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<String>,
    /// The command exited non-zero with a denial signature on stderr.
    pub denied: bool,
    /// The denial signature that matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// A call's sandbox plan: its mode and, unless unconfined, the confined argv.
#[derive(Debug, Clone)]
pub struct SandboxPlan {
    /// The mode.
    pub mode: SandboxMode,
    /// `None` under `danger-full-access`.
    pub confined: Option<ConfinedArgv>,
}

/// The failure of a sandbox error (typed `SandboxUnavailableError` / `SANDBOX_UNAVAILABLE`
/// for an unavailable runner).
pub fn sandbox_failure(e: &SandboxError) -> ToolFailure {
    ToolFailure::typed(e.to_string(), e.info_name(), dsh_kernel::ErrorCode::code(e))
}

/// Plans one call of `command` with workdir base `root`: validates the escalation fields,
/// asks approval for an escalation, resolves the mode and confines.
///
/// # Errors
/// An invalid escalation; a rejected / cancelled / unavailable approval (each its own text);
/// `SANDBOX_UNAVAILABLE` when no runner can confine.
pub async fn plan(
    sandbox: &Arc<SandboxService>,
    cx: &ToolRunContext,
    command: &str,
    root: &Path,
    permissions: Option<SandboxPermissions>,
    justification: Option<&str>,
) -> Result<SandboxPlan, ToolFailure> {
    let session = cx.exec.caller.as_ref().map(|c| c.session.clone());
    let standing = sandbox.policy_for(session.as_deref(), None, root).mode;
    let escalation = validate_escalation(standing, permissions.map(|p| p.mode()), justification)
        .map_err(|e| ToolFailure::message(e.to_string()))?;
    let escalated = match escalation {
        None => None,
        Some((mode, why)) => Some(approve(cx, mode, &why).await?),
    };
    let policy = sandbox.policy_for(session.as_deref(), escalated, root);
    if policy.mode == SandboxMode::DangerFullAccess {
        return Ok(SandboxPlan {
            mode: policy.mode,
            confined: None,
        });
    }
    // The first confine selects the runner: its probes spawn and wait (bounded by the probe
    // timeout), so they run off the async workers; later calls hit the cached selection.
    let mode = policy.mode;
    let s = sandbox.clone();
    let argv = bash_argv(command);
    let confined = tokio::task::spawn_blocking(move || s.confine(&argv, &policy))
        .await
        .map_err(|e| ToolFailure::message(format!("sandbox selection failed: {e}")))?
        .map_err(|e| sandbox_failure(&e))?;
    Ok(SandboxPlan {
        mode,
        confined: Some(confined),
    })
}

async fn approve(
    cx: &ToolRunContext,
    mode: SandboxMode,
    why: &str,
) -> Result<SandboxMode, ToolFailure> {
    let unavailable = || {
        ToolFailure::message(format!(
            "escalating this command to \"{mode}\" needs the user's approval and none is available (dsh exec cannot ask); rerun with --permission-mode {mode} to allow it"
        ))
    };
    let Some(caller) = cx.exec.caller.as_ref() else {
        return Err(unavailable());
    };
    let Some(approval) = caller.ctx.get::<ApprovalService>() else {
        return Err(unavailable());
    };
    let outcome = approval
        .request(ApprovalRequest {
            caller: caller.approval_caller(),
            tool_name: "bash".into(),
            call_id: Some(cx.exec.call_id.clone()),
            reason: Some(escalation_reason(mode, why)),
            signal: cx.signal.clone(),
        })
        .await
        .map_err(|e| ToolFailure::message(format!("escalation could not be asked: {e}")))?;
    match outcome {
        ApprovalOutcome::AllowedOnce => Ok(mode),
        ApprovalOutcome::Rejected => Err(ToolFailure::message(rejected_text(mode))),
        ApprovalOutcome::Cancelled => Err(ToolFailure::message(format!(
            "the escalation to \"{mode}\" was cancelled before the user answered"
        ))),
        ApprovalOutcome::Unavailable => Err(unavailable()),
    }
}

/// Reads a finished confined run: `Err(SANDBOX_UNAVAILABLE … Runner failure: <line>)` when the
/// runner itself failed, else the result's [`SandboxInfo`].
///
/// # Errors
/// The runner-failure case above.
pub fn verdict(
    plan: &SandboxPlan,
    exit_code: Option<i32>,
    stderr: &str,
) -> Result<SandboxInfo, ToolFailure> {
    let Some(confined) = &plan.confined else {
        return Ok(SandboxInfo {
            mode: plan.mode.as_str().to_owned(),
            runner: None,
            enforcement: None,
            denied: false,
            rule: None,
        });
    };
    let (denied, rule) = match classify(confined, exit_code, stderr) {
        RunVerdict::RunnerFailed(line) => {
            return Err(sandbox_failure(&SandboxError::Unavailable {
                mode: plan.mode,
                detail: Some(line),
            }));
        }
        RunVerdict::Denied(sig) => (true, Some(sig)),
        RunVerdict::Normal => (false, None),
    };
    Ok(SandboxInfo {
        mode: plan.mode.as_str().to_owned(),
        runner: Some(confined.runner.clone()),
        enforcement: Some(confined.enforcement.as_str().to_owned()),
        denied,
        rule,
    })
}

/// The markers appended to a denied result: the denial marker, then the escalation hint.
pub fn denial_markers(info: &SandboxInfo) -> Option<String> {
    if !info.denied {
        return None;
    }
    let mode = SandboxMode::parse(&info.mode)?;
    let mut out = dsh_sandbox::denial_marker(mode);
    if let Some(h) = dsh_sandbox::escalation_hint(mode, info.rule.as_deref().unwrap_or("")) {
        out.push('\n');
        out.push_str(&h);
    }
    Some(out)
}

/// The failure of a spawn error of the confined argv (the runner is missing or not
/// executable): `SANDBOX_UNAVAILABLE` with `Error: spawn <runner> ENOENT|EACCES`.
pub fn spawn_failure(plan: &SandboxPlan, err: &std::io::Error) -> Option<ToolFailure> {
    let confined = plan.confined.as_ref()?;
    if !dsh_sandbox::is_runner_spawn_failure(err) {
        return None;
    }
    let program = confined.argv.first()?;
    Some(sandbox_failure(&SandboxError::Unavailable {
        mode: plan.mode,
        detail: Some(dsh_sandbox::spawn_failure_detail(Path::new(program), err)),
    }))
}
