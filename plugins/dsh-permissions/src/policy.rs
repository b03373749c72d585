//! The pure decision function of the presets ([`decide`]) and the path resolution it relies on
//! ([`resolve_path`], [`is_inside`]).
//!
//! Decisions come from the effects each tool declares ([`ToolEffects`], read through
//! [`dsh_tools::ToolRegistry::effects`]), never from tool names. Upstream bundles a sandbox
//! mode with an approval policy; dsh has no OS sandbox yet, so its presets are a
//! `tools/pre-execute` policy over declared effects and the declared target argument
//! (`docs/tools.md`, "Permission presets"):
//!
//! - `read-only`: tools declared [`ToolEffects::READ_ONLY`] run; every other tool (and an
//!   unknown one) is denied.
//! - `workspace-write`: everything runs, except that a tool that writes files or runs commands
//!   and whose declared target argument ([`ToolEffects::target_arg`]: `file_path` for `write`/
//!   `edit`, `workdir` for `bash`) resolves outside the workspace root asks
//!   ([`PreToolDecision::Ask`]), and a tool that uses the network asks (as Codex's
//!   workspace-write, where network access needs approval). NOT an OS sandbox: a `bash` command
//!   run inside the workspace can still touch any file the process may touch.
//! - `danger-full-access`: everything runs.

use std::path::{Component, Path, PathBuf};

use dsh_fs::Workspace;
use dsh_tools::{PreToolDecision, ToolEffects};
use serde_json::Value;

use crate::PermissionMode;

/// Maximum number of symbolic links followed while resolving one path (as Linux's `ELOOP`).
pub const MAX_SYMLINK_HOPS: usize = 40;

/// Resolves `target` (absolute, or relative to `base`) to an absolute path with every symbolic
/// link that exists resolved and every `.`/`..` applied: existing components are resolved as
/// the filesystem sees them (a symlink is followed, then `..` leaves its *target*); components
/// past the first missing one are applied lexically (they cannot be links). A dangling link is
/// followed through its stored target. `base` should be absolute (a relative one is taken
/// relative to `/`).
///
/// Returns `None` when the path cannot be resolved: more than [`MAX_SYMLINK_HOPS`] links, a
/// link that cannot be read, or a non-Unix path prefix. Callers treat `None` as "outside".
pub fn resolve_path(base: &Path, target: &str) -> Option<PathBuf> {
    let joined = if Path::new(target).is_absolute() {
        PathBuf::from(target)
    } else {
        base.join(target)
    };
    let mut hops = 0usize;
    resolve_from(PathBuf::from("/"), &joined, &mut hops)
}

fn resolve_from(start: PathBuf, path: &Path, hops: &mut usize) -> Option<PathBuf> {
    let mut cur = start;
    let mut missing = false;
    for comp in path.components() {
        match comp {
            Component::Prefix(_) => return None,
            Component::RootDir => {
                cur = PathBuf::from("/");
                missing = false;
            }
            Component::CurDir => {}
            Component::ParentDir => {
                // `cur` is fully resolved, so its lexical parent is its real parent.
                cur.pop();
            }
            Component::Normal(name) => {
                let candidate = cur.join(name);
                if missing {
                    cur = candidate;
                    continue;
                }
                match std::fs::symlink_metadata(&candidate) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        *hops += 1;
                        if *hops > MAX_SYMLINK_HOPS {
                            return None;
                        }
                        let link = std::fs::read_link(&candidate).ok()?;
                        // A relative link target is relative to the link's directory.
                        cur = resolve_from(cur, &link, hops)?;
                        missing = std::fs::symlink_metadata(&cur).is_err();
                    }
                    Ok(_) => cur = candidate,
                    Err(_) => {
                        missing = true;
                        cur = candidate;
                    }
                }
            }
        }
    }
    Some(cur)
}

/// True when `path` equals `root` or lies below it (component-wise; both should come from
/// [`resolve_path`]).
pub fn is_inside(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
}

/// The read-only denial text for `tool` with declared `effects` (`None`: no such tool is
/// visible) (exact; spec: issue text).
///
/// `denied by permission preset read-only: <tool> <why>; rerun with --permission-mode
/// workspace-write to allow it`, where `<why>` is `runs shell commands that can modify files`
/// (runs commands, e.g. bash), else `modifies files` (writes files: write, edit), else `uses
/// the network`, else `is not a read-only tool` (other or undeclared effects, unknown tools).
pub fn read_only_denial(tool: &str, effects: Option<ToolEffects>) -> String {
    let e = effects.unwrap_or(ToolEffects::UNDECLARED);
    let why = if e.runs_commands() {
        "runs shell commands that can modify files"
    } else if e.writes_files() {
        "modifies files"
    } else if e.uses_network() {
        "uses the network"
    } else {
        "is not a read-only tool"
    };
    format!(
        "denied by permission preset read-only: {tool} {why}; rerun with --permission-mode workspace-write to allow it"
    )
}

/// The workspace-write approval reason for a call of `tool` (declared `effects`) reaching
/// `target` outside `workspace` (exact): `permission preset workspace-write: <what> <target> is
/// outside the workspace <workspace>; approve this call to allow it once, or rerun with
/// --permission-mode danger-full-access`, where `<what>` is `<tool> <arg>` for a tool that runs
/// commands (`bash workdir`) and `<tool> target` otherwise (`write target`).
pub fn outside_reason(tool: &str, effects: ToolEffects, target: &Path, workspace: &Path) -> String {
    let what = match effects.target_arg() {
        Some(arg) if effects.runs_commands() => format!("{tool} {arg}"),
        _ => format!("{tool} target"),
    };
    format!(
        "permission preset workspace-write: {what} {} is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
        target.display(),
        workspace.display()
    )
}

/// The workspace-write approval reason for a call of a network tool (exact):
/// `permission preset workspace-write: <tool> uses the network; approve this call to allow it
/// once, or rerun with --permission-mode danger-full-access`.
pub fn network_reason(tool: &str) -> String {
    format!(
        "permission preset workspace-write: {tool} uses the network; approve this call to allow it once, or rerun with --permission-mode danger-full-access"
    )
}

fn string_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.as_object()?.get(key)?.as_str()
}

/// Decides one call under `mode`.
///
/// - `tool`: the requested tool name (only used in reasons); `effects`: what the tool resolved
///   for the caller declares (`None`: no such tool is visible — it fails at dispatch);
/// - `args`: its JSON arguments (as the model sent them);
/// - `workspace`: the [`Workspace`]: relative targets resolve against its `cwd` (the
///   session's), the fence is its `root` (a bare absolute path is both).
///
/// `read-only` ⇒ [`PreToolDecision::Allow`] for read-only effects, else `Deny` with
/// [`read_only_denial`]. `workspace-write` ⇒ for a tool that writes files or runs commands and
/// declares a target argument: `Ask` with [`outside_reason`] when that string argument resolves
/// ([`resolve_path`]) outside the resolved workspace (or cannot be resolved); then, for a tool
/// that uses the network, `Ask` with [`network_reason`]; else `Allow` (a missing or non-string
/// target argument is allowed: the tool defaults to the workspace or rejects it itself).
/// `danger-full-access` ⇒ `Allow`.
pub fn decide(
    mode: PermissionMode,
    tool: &str,
    effects: Option<ToolEffects>,
    args: &Value,
    workspace: impl Into<Workspace>,
) -> PreToolDecision {
    let workspace = workspace.into();
    match mode {
        PermissionMode::DangerFullAccess => PreToolDecision::Allow,
        PermissionMode::ReadOnly => match effects {
            Some(e) if e.is_read_only() => PreToolDecision::Allow,
            _ => PreToolDecision::Deny {
                reason: read_only_denial(tool, effects),
            },
        },
        PermissionMode::WorkspaceWrite => {
            let Some(effects) = effects else {
                return PreToolDecision::Allow;
            };
            let target = effects
                .target_arg()
                .filter(|_| effects.writes_files() || effects.runs_commands())
                .and_then(|arg| string_arg(args, arg));
            if let Some(target) = target {
                let root = resolve_path(Path::new("/"), &workspace.root.to_string_lossy())
                    .unwrap_or_else(|| workspace.root.clone());
                match resolve_path(&workspace.cwd, target) {
                    Some(resolved) if is_inside(&resolved, &root) => {}
                    Some(resolved) => {
                        return PreToolDecision::Ask {
                            reason: Some(outside_reason(tool, effects, &resolved, &root)),
                        };
                    }
                    None => {
                        return PreToolDecision::Ask {
                            reason: Some(outside_reason(
                                tool,
                                effects,
                                &workspace.join(Path::new(target)),
                                &root,
                            )),
                        };
                    }
                }
            }
            if effects.uses_network() {
                return PreToolDecision::Ask {
                    reason: Some(network_reason(tool)),
                };
            }
            PreToolDecision::Allow
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn lexical_resolution_of_missing_components() {
        let r = resolve_path(
            Path::new("/nonexistent-dsh-root/ws"),
            "a/./b/../../../other/x",
        );
        assert_eq!(r, Some(PathBuf::from("/nonexistent-dsh-root/other/x")));
        let r = resolve_path(Path::new("/nonexistent-dsh-root"), "/../../etc");
        assert_eq!(r, Some(PathBuf::from("/etc")));
    }

    #[test]
    fn symlink_loop_is_unresolvable() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::os::unix::fs::symlink(root.join("b"), root.join("a")).unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("b")).unwrap();
        assert_eq!(resolve_path(&root, "a/x"), None);
    }
}
