//! Where a session's tools work: the directory relative paths resolve against (the session's
//! `cwd`, the launch directory its header records) and the workspace root that fences them (the
//! filesystem fence). The two differ when dsh starts in a subdirectory of a repository: from
//! `repo/sub`, `../top.txt` is `repo/top.txt` and inside the workspace `repo`.
//!
//! The one rule every fenced component uses (fs tools, search tools, the permission preset,
//! AGENTS.md discovery): [`Workspace::for_session`]. Behaviour: README ("Workspace root") and
//! docs/upstream/fs.md ("The workspace root").

use std::path::{Path, PathBuf};

/// The host's run fact naming the workspace root (`dsh_kernel::Settings::fact_str`): `-C DIR`,
/// else the nearest ancestor of the launch directory holding `.git`, else the launch directory.
pub const WORKSPACE_FACT: &str = "workspace";

/// The directories of one session's tool calls (absolute; canonical when they exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// The fence: a path whose real location is outside it is outside the workspace.
    pub root: PathBuf,
    /// Where relative paths resolve (and where `bash` runs): the session's `cwd`. Inside
    /// `root`, or equal to it.
    pub cwd: PathBuf,
}

impl Workspace {
    /// A workspace whose root is also the directory relative paths resolve against.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Self {
            root: dir.clone(),
            cwd: dir,
        }
    }

    /// The workspace of a session whose header records `session_cwd`, in a run whose host set
    /// the [`WORKSPACE_FACT`] `run_root`.
    ///
    /// - `cwd`: `session_cwd`, else `fallback` (a plugin's configured directory), else
    ///   `run_root`, else the process's current directory;
    /// - `root`: `run_root` when `cwd` lies in it (the root itself or below; compared after
    ///   resolving links), else the nearest ancestor of `cwd` holding `.git` ([`git_ancestor`]:
    ///   a session resumed from another workspace keeps its own repository as the fence), else
    ///   `cwd`.
    ///
    /// # Errors
    /// Only when the process's current directory is needed and cannot be read.
    pub fn for_session(
        run_root: Option<&Path>,
        session_cwd: Option<&Path>,
        fallback: Option<&Path>,
    ) -> std::io::Result<Self> {
        let cwd = match session_cwd.or(fallback).or(run_root) {
            Some(c) => c.to_path_buf(),
            None => std::env::current_dir()?,
        };
        let cwd = real(&cwd);
        let root = run_root
            .map(real)
            .filter(|r| cwd.starts_with(r))
            .or_else(|| git_ancestor(&cwd))
            .unwrap_or_else(|| cwd.clone());
        Ok(Self { root, cwd })
    }

    /// [`Workspace::for_session`] with the run root read from `settings`' [`WORKSPACE_FACT`].
    ///
    /// # Errors
    /// As [`Workspace::for_session`].
    pub fn from_settings(
        settings: &dsh_kernel::Settings,
        session_cwd: Option<&Path>,
        fallback: Option<&Path>,
    ) -> std::io::Result<Self> {
        let run_root = settings.fact_str(WORKSPACE_FACT).map(Path::new);
        Self::for_session(run_root, session_cwd, fallback)
    }

    /// [`Workspace::from_settings`] with the settings in force for `ctx` (a tool caller's
    /// context; no settings service ⇒ no run root).
    ///
    /// # Errors
    /// As [`Workspace::for_session`].
    pub fn for_context(
        ctx: &dsh_kernel::Context,
        session_cwd: Option<&Path>,
        fallback: Option<&Path>,
    ) -> std::io::Result<Self> {
        Self::from_settings(&ctx.settings(), session_cwd, fallback)
    }

    /// `path` made absolute against [`Workspace::cwd`] (unchanged when already absolute; not
    /// normalised, links not resolved).
    pub fn join(&self, path: &Path) -> PathBuf {
        self.cwd.join(path)
    }
}

impl From<&Path> for Workspace {
    /// [`Workspace::at`]: root and cwd are both `dir`.
    fn from(dir: &Path) -> Self {
        Self::at(dir)
    }
}

impl From<&PathBuf> for Workspace {
    /// [`Workspace::at`]: root and cwd are both `dir`.
    fn from(dir: &PathBuf) -> Self {
        Self::at(dir.as_path())
    }
}

impl From<&Workspace> for Workspace {
    fn from(ws: &Workspace) -> Self {
        ws.clone()
    }
}

/// `p` with links resolved, or as given when it cannot be resolved (e.g. it does not exist).
fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The nearest ancestor of `dir` (itself included) that holds a `.git` entry (a directory, or
/// the file of a linked work tree or submodule), if any.
pub fn git_ancestor(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(".git").symlink_metadata().is_ok())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_run_root_fences_a_session_below_it() {
        let tmp = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(tmp.path()).unwrap();
        let repo = top.join("repo");
        let sub = repo.join("sub");
        let other = top.join("other");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::create_dir(repo.join(".git")).unwrap();

        // Inside the run root: the run root is the fence, the session cwd the base.
        let ws = Workspace::for_session(Some(&repo), Some(&sub), None).unwrap();
        assert_eq!(
            ws,
            Workspace {
                root: repo.clone(),
                cwd: sub.clone()
            }
        );
        assert_eq!(ws.join(Path::new("../top.txt")), sub.join("../top.txt"));
        // `-C repo/sub` made the subdirectory the root.
        assert_eq!(
            Workspace::for_session(Some(&sub), Some(&sub), None).unwrap(),
            Workspace::at(&sub)
        );
        // A session resumed from elsewhere keeps its own repository as the fence.
        assert_eq!(
            Workspace::for_session(Some(&other), Some(&sub), None)
                .unwrap()
                .root,
            repo
        );
        // Outside any repository and the run root: the cwd itself.
        assert_eq!(
            Workspace::for_session(Some(&repo), Some(&other), None).unwrap(),
            Workspace::at(&other)
        );
        // No session cwd: the plugin's fallback, else the run root.
        assert_eq!(
            Workspace::for_session(Some(&repo), None, Some(&sub)).unwrap(),
            Workspace {
                root: repo.clone(),
                cwd: sub.clone()
            }
        );
        assert_eq!(
            Workspace::for_session(Some(&repo), None, None).unwrap(),
            Workspace::at(&repo)
        );
        // No run root: the nearest `.git` ancestor.
        assert_eq!(
            Workspace::for_session(None, Some(&sub), None).unwrap(),
            Workspace {
                root: repo.clone(),
                cwd: sub.clone()
            }
        );
        let settings = dsh_kernel::Settings::new()
            .with_fact(WORKSPACE_FACT, serde_json::json!(sub.display().to_string()));
        assert_eq!(
            Workspace::from_settings(&settings, Some(&sub), None).unwrap(),
            Workspace::at(&sub)
        );
        assert_eq!(Workspace::from(sub.as_path()), Workspace::at(&sub));
    }

    #[test]
    fn a_linked_work_tree_file_counts_as_git() {
        let tmp = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(tmp.path()).unwrap();
        let sub = top.join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(git_ancestor(&sub), None);
        std::fs::create_dir(top.join(".git")).unwrap();
        assert_eq!(git_ancestor(&sub), Some(top.clone()));
        std::fs::write(top.join("a/.git"), "gitdir: elsewhere\n").unwrap();
        assert_eq!(git_ancestor(&sub), Some(top.join("a")));
    }
}
