//! The pure decision function of the presets ([`decide`]) and the path resolution it relies on
//! ([`resolve_path`], [`is_inside`]).
//!
//! Spec: issue "permission presets" (dsh's own layer; upstream's preset table is described in
//! `../shared/spec/approval-sandbox.md` and upstream `docs/subsystems/permission-presets.md`).
//! Upstream bundles a sandbox mode with an approval policy; dsh has no OS sandbox yet, so its
//! presets are a `tools/pre-execute` policy over tool names and path arguments:
//!
//! - `read-only`: only the tools in [`READ_ONLY_TOOLS`] run; every other tool is denied.
//! - `workspace-write`: everything runs, except that `write`/`edit` whose `file_path` resolves
//!   outside the workspace root, and `bash` whose `workdir` resolves outside it, ask
//!   ([`PreToolDecision::Ask`]). NOT an OS sandbox: a `bash` command run inside the workspace
//!   can still touch any file the process may touch.
//! - `danger-full-access`: everything runs.

use std::path::{Component, Path, PathBuf};

use dsh_tools::PreToolDecision;
use serde_json::Value;

use crate::PermissionMode;

/// Tools that never modify files or run commands: the only tools `read-only` lets through.
/// An explicit, documented list (not derived from tool definitions): `read`, `grep`, `glob`
/// (dsh-tool-fs / dsh-tool-search), `todo_write` (it only appends the agent's own task list to
/// its session log), `job_output`, `job_list` (dsh-tool-shell: inspect background jobs).
pub const READ_ONLY_TOOLS: &[&str] = &[
    "read",
    "grep",
    "glob",
    "todo_write",
    "job_output",
    "job_list",
];

/// Tools whose `file_path` argument names the file they modify (dsh-tool-fs).
pub const FILE_WRITE_TOOLS: &[&str] = &["write", "edit"];

/// The shell tool whose `workdir` argument (default: the workspace root) is checked.
pub const SHELL_TOOL: &str = "bash";

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

/// The read-only denial text for `tool` (exact; spec: issue text).
///
/// `denied by permission preset read-only: <tool> <why>; rerun with --permission-mode
/// workspace-write to allow it`, where `<why>` is `modifies files` (write, edit), `runs shell
/// commands that can modify files` (bash) or `is not a read-only tool` (anything else).
pub fn read_only_denial(tool: &str) -> String {
    let why = if FILE_WRITE_TOOLS.contains(&tool) {
        "modifies files"
    } else if tool == SHELL_TOOL {
        "runs shell commands that can modify files"
    } else {
        "is not a read-only tool"
    };
    format!(
        "denied by permission preset read-only: {tool} {why}; rerun with --permission-mode workspace-write to allow it"
    )
}

/// The workspace-write approval reason for a call reaching `target` outside `workspace`
/// (exact): `permission preset workspace-write: <what> <target> is outside the workspace
/// <workspace>; approve this call to allow it once, or rerun with --permission-mode
/// danger-full-access`, where `<what>` is `<tool> target` for file tools and `bash workdir`
/// for the shell.
pub fn outside_reason(tool: &str, target: &Path, workspace: &Path) -> String {
    let what = if tool == SHELL_TOOL {
        "bash workdir".to_owned()
    } else {
        format!("{tool} target")
    };
    format!(
        "permission preset workspace-write: {what} {} is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
        target.display(),
        workspace.display()
    )
}

fn string_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.as_object()?.get(key)?.as_str()
}

/// Decides one call under `mode`.
///
/// - `tool`: the requested tool name; `args`: its JSON arguments (as the model sent them);
/// - `workspace`: the workspace root (the session's `cwd`; absolute).
///
/// `read-only` ⇒ [`PreToolDecision::Allow`] for [`READ_ONLY_TOOLS`], else `Deny` with
/// [`read_only_denial`]. `workspace-write` ⇒ `Ask` with [`outside_reason`] when a
/// [`FILE_WRITE_TOOLS`] `file_path` or the [`SHELL_TOOL`] `workdir` resolves
/// ([`resolve_path`]) outside the resolved workspace (or cannot be resolved), else `Allow`
/// (arguments without a string path are allowed: the tool rejects them itself, before touching
/// anything). `danger-full-access` ⇒ `Allow`.
pub fn decide(mode: PermissionMode, tool: &str, args: &Value, workspace: &Path) -> PreToolDecision {
    match mode {
        PermissionMode::DangerFullAccess => PreToolDecision::Allow,
        PermissionMode::ReadOnly => {
            if READ_ONLY_TOOLS.contains(&tool) {
                PreToolDecision::Allow
            } else {
                PreToolDecision::Deny {
                    reason: read_only_denial(tool),
                }
            }
        }
        PermissionMode::WorkspaceWrite => {
            let target = if FILE_WRITE_TOOLS.contains(&tool) {
                string_arg(args, "file_path")
            } else if tool == SHELL_TOOL {
                string_arg(args, "workdir")
            } else {
                None
            };
            let Some(target) = target else {
                return PreToolDecision::Allow;
            };
            let root = resolve_path(Path::new("/"), &workspace.to_string_lossy())
                .unwrap_or_else(|| workspace.to_path_buf());
            match resolve_path(workspace, target) {
                Some(resolved) if is_inside(&resolved, &root) => PreToolDecision::Allow,
                Some(resolved) => PreToolDecision::Ask {
                    reason: Some(outside_reason(tool, &resolved, &root)),
                },
                None => PreToolDecision::Ask {
                    reason: Some(outside_reason(tool, &workspace.join(target), &root)),
                },
            }
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
