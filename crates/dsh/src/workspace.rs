//! Where a run works: the launch directory (where `dsh` started, or `-C DIR`) and the workspace
//! root above it (the nearest ancestor holding `.git`), which decides the project's
//! `.dsh/settings.toml`, the AGENTS.md chain and `--continue`'s choice of session. The session
//! header's `cwd` records the launch directory, as upstream does.
//!
//! Behaviour: README ("Settings", "Workspace root").

use std::path::{Path, PathBuf};

/// The two directories of one run, both canonical (absolute, links resolved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    /// The workspace root: `-C DIR` when given, else the nearest ancestor of the launch
    /// directory (itself included) holding `.git` (a directory, or the file of a linked work
    /// tree or submodule), else the launch directory.
    pub root: PathBuf,
    /// Where the run started: `-C DIR` when given, else the current directory.
    pub launch: PathBuf,
}

/// The nearest ancestor of `dir` (itself included) that holds a `.git` entry, if any.
pub fn git_ancestor(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(".git").symlink_metadata().is_ok())
        .map(Path::to_path_buf)
}

/// The directories for `explicit` (`-C DIR`) or, without it, the current directory `current`.
///
/// # Errors
/// The directory does not exist or cannot be resolved (the message names it).
pub fn resolve(explicit: Option<&Path>, current: &Path) -> std::io::Result<Dirs> {
    if let Some(dir) = explicit {
        let dir = std::fs::canonicalize(dir).map_err(|e| {
            std::io::Error::new(e.kind(), format!("workspace {}: {e}", dir.display()))
        })?;
        return Ok(Dirs {
            root: dir.clone(),
            launch: dir,
        });
    }
    let launch = std::fs::canonicalize(current).map_err(|e| {
        std::io::Error::new(e.kind(), format!("workspace {}: {e}", current.display()))
    })?;
    let root = git_ancestor(&launch).unwrap_or_else(|| launch.clone());
    Ok(Dirs { root, launch })
}

/// Whether a session header's `cwd` lies in the workspace `root` (the root itself or below it).
pub fn contains(root: &Path, cwd: &str) -> bool {
    Path::new(cwd).starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_git_ancestor_is_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(tmp.path()).unwrap();
        let sub = top.join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(
            resolve(None, &sub).unwrap(),
            Dirs {
                root: sub.clone(),
                launch: sub.clone()
            }
        );
        std::fs::create_dir(top.join(".git")).unwrap();
        assert_eq!(
            resolve(None, &sub).unwrap(),
            Dirs {
                root: top.clone(),
                launch: sub.clone()
            }
        );
        // A linked work tree's `.git` is a file; it counts too, and the nearest one wins.
        std::fs::write(top.join("a/.git"), "gitdir: elsewhere\n").unwrap();
        assert_eq!(resolve(None, &sub).unwrap().root, top.join("a"));
        // `-C` is taken as given.
        assert_eq!(
            resolve(Some(&sub), &top).unwrap(),
            Dirs {
                root: sub.clone(),
                launch: sub
            }
        );
        assert!(contains(&top, &top.join("a/b").display().to_string()));
        assert!(!contains(&top.join("a"), &top.display().to_string()));
    }
}
