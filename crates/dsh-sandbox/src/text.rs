//! What the model is told: the `sandbox:policy` runtime-context texts (upstream's, exact), the
//! dsh `sandbox:network` addition, and the markers appended to a tool result. Texts:
//! `docs/upstream/sandbox.md` ("What the model sees").

use std::path::Path;

use crate::SandboxMode;

/// The runtime-context section name of the policy text.
pub const POLICY_CONTEXT: &str = "sandbox:policy";
/// The runtime-context section name of the network note (a dsh addition).
pub const NETWORK_CONTEXT: &str = "sandbox:network";

/// The `sandbox:policy` text for `mode` with the session workspace `root` (upstream's, exact).
pub fn policy_text(mode: SandboxMode, root: &Path) -> String {
    match mode {
        SandboxMode::ReadOnly => "Current DSH file policy: read-only. Any available operation enforced by the DSH file sandbox cannot modify files in the standing mode. Do not refuse a required modification from this policy alone: try an available tool normally and follow any denial and escalation guidance it returns.".to_owned(),
        SandboxMode::WorkspaceWrite => format!(
            "Current DSH file policy: workspace-write. Any available operation enforced by the DSH file sandbox may modify files under the session workspace: \"{}\". Some platform temporary areas may also be writable.",
            root.display()
        ),
        SandboxMode::DangerFullAccess => "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict file modifications by available operations.".to_owned(),
    }
}

/// The `sandbox:network` text (a dsh addition): empty under `danger-full-access` or with the
/// network on, else the note that confined commands have no network.
pub fn network_text(mode: SandboxMode, network: bool) -> String {
    if mode == SandboxMode::DangerFullAccess || network {
        return String::new();
    }
    "Network: bash commands run in the OS sandbox without network access (no DNS, no connections, not even to 127.0.0.1 services outside the sandbox). A command that needs the network fails; ask for sandbox_permissions \"danger-full-access\" with a justification if it is required.".to_owned()
}

/// The denial marker: `[sandbox: file access denied under <mode> mode]`.
pub fn denial_marker(mode: SandboxMode) -> String {
    format!("[sandbox: file access denied under {mode} mode]")
}

/// The escalation hint after a denial under `mode` (none under `danger-full-access`): which
/// rule denied (`rule`, the matched signature) and how to ask once for the narrowest wider
/// mode.
pub fn escalation_hint(mode: SandboxMode, rule: &str) -> Option<String> {
    let (next, what) = match mode {
        SandboxMode::ReadOnly => (
            "\"workspace-write\" (or \"danger-full-access\" for a write outside the workspace)",
            "every write is denied",
        ),
        SandboxMode::WorkspaceWrite => (
            "\"danger-full-access\"",
            "writes outside the workspace, /tmp and $TMPDIR are denied",
        ),
        SandboxMode::DangerFullAccess => return None,
    };
    Some(format!(
        "[sandbox: escalation available \u{2014} under {mode} mode {what} (the sandbox reported \"{rule}\"); if the change is required, retry the same command once with sandbox_permissions {next} and a one-sentence justification; the user will be asked to approve]"
    ))
}

/// The marker of a background job whose runner failed under `mode` (upstream's, exact).
pub fn runner_failed_marker(mode: SandboxMode) -> String {
    format!(
        "[sandbox: the sandbox runner itself failed under {mode} mode \u{2014} the command did not run; this is a sandbox problem, not a command failure]"
    )
}

/// The error text of a rejected escalation (upstream's, exact).
pub fn rejected_text(mode: SandboxMode) -> String {
    format!("the user rejected escalating this command to \"{mode}\"")
}

/// The approval reason of an escalation request (upstream's, exact).
pub fn escalation_reason(mode: SandboxMode, justification: &str) -> String {
    format!("escalate sandbox to {mode}: {justification}")
}
