//! Quick `git` invocations: where the work tree is (for AGENTS.md discovery and the git
//! context) and the `context:git` runtime-context text (branch + a capped `git status`
//! summary, or the branch alone in a large tree).
//!
//! Behaviour (docs/upstream/context.md, "The git context"): git runs as `git -C <cwd> …` in
//! its own process group, with stdin and stderr null and `GIT_OPTIONAL_LOCKS=0` (status never
//! takes the index lock, so it cannot disturb a concurrent git command). Every invocation is
//! capped by [`GitOptions::timeout`]: past it the whole process group is killed and reaped.
//! A missing git binary, a failing command or a directory outside any work tree yields `None`
//! (the context is omitted). When the index lists more than [`GitOptions::status_max_files`]
//! entries, `git status` (which stats every tracked file and walks the tree for untracked
//! ones) is not run at all; the context names the branch and says the status was not scanned.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dsh_tools::ToolEffects;

/// At most this many lines of `git status` output (the `## branch` line included) appear in the
/// git context; the rest is counted in a closing line.
pub const MAX_STATUS_LINES: usize = 20;

/// Default of [`GitOptions::timeout`] (`git_timeout_ms`): 2 s.
pub const DEFAULT_GIT_TIMEOUT_MS: u64 = 2_000;

/// Default of [`GitOptions::status_max_files`] (`git_status_max_files`): 20,000 index entries.
pub const DEFAULT_GIT_STATUS_MAX_FILES: u64 = 20_000;

/// How the git state is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GitOptions {
    /// The longest one git invocation may run; then its process group is killed.
    pub timeout: Duration,
    /// Above this many index entries `git status` is not run (branch only).
    pub status_max_files: u64,
}

impl Default for GitOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_millis(DEFAULT_GIT_TIMEOUT_MS),
            status_max_files: DEFAULT_GIT_STATUS_MAX_FILES,
        }
    }
}

/// Where a work tree lives, from one `git rev-parse --show-toplevel --git-path index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRepo {
    /// The top-level directory of the work tree.
    pub root: PathBuf,
    /// The index file (`$GIT_INDEX_FILE` or the git dir's `index`; may not exist yet).
    pub index: PathBuf,
}

/// What one git invocation did.
enum GitRun {
    /// It exited; `success` = status 0.
    Exited { success: bool, stdout: Vec<u8> },
    /// It ran past the timeout and was killed.
    TimedOut,
    /// It could not be started (no git binary, no thread, no pipe).
    Failed,
}

/// Runs `git -C <cwd> <args>` for at most `timeout`.
fn run_git(cwd: &Path, args: &[&str], timeout: Duration) -> GitRun {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(cwd)
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    let Ok(mut child) = cmd.spawn() else {
        return GitRun::Failed;
    };
    let group = rustix::process::Pid::from_child(&child);
    let stdout = child.stdout.take();
    let (tx, rx) = mpsc::channel();
    // The waiter owns the child: it reads stdout to the end and reaps the process, so a timeout
    // only has to signal the group and wait for the waiter.
    let waiter = std::thread::Builder::new()
        .name("dsh-context-git".into())
        .spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut out) = stdout {
                let _ = out.read_to_end(&mut buf);
            }
            let status = child.wait();
            let _ = tx.send((status, buf));
        });
    if waiter.is_err() {
        kill_group(group);
        return GitRun::Failed;
    }
    match rx.recv_timeout(timeout) {
        Ok((Ok(status), stdout)) => GitRun::Exited {
            success: status.success(),
            stdout,
        },
        Ok((Err(_), _)) | Err(mpsc::RecvTimeoutError::Disconnected) => GitRun::Failed,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            kill_group(group);
            // The waiter reaps the killed process; a grandchild that left the group could
            // still hold the pipe, so the wait for the waiter is bounded too.
            let _ = rx.recv_timeout(Duration::from_secs(1));
            tracing::warn!(
                target: "dsh_context",
                cwd = %cwd.display(),
                command = %args.join(" "),
                timeout_ms = timeout.as_millis() as u64,
                "git did not finish in time; killed"
            );
            GitRun::TimedOut
        }
    }
}

/// SIGKILL to the process group of a git started with `process_group(0)` (its pid).
fn kill_group(group: rustix::process::Pid) {
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
}

/// Runs git and returns its stdout when it exits 0 and is UTF-8.
fn git_stdout(cwd: &Path, args: &[&str], timeout: Duration) -> Option<String> {
    match run_git(cwd, args, timeout) {
        GitRun::Exited {
            success: true,
            stdout,
        } => String::from_utf8(stdout).ok(),
        _ => None,
    }
}

/// The work tree containing `cwd` and its index file, from one `git rev-parse --show-toplevel
/// --git-path index` (capped by `timeout`), or `None` (no git, not a repository, a bare
/// repository, git timed out). A relative index path is resolved against `cwd`.
pub fn locate_repo(cwd: &Path, timeout: Duration) -> Option<GitRepo> {
    let out = git_stdout(
        cwd,
        &["rev-parse", "--show-toplevel", "--git-path", "index"],
        timeout,
    )?;
    let mut lines = out.lines();
    let root = lines.next().filter(|l| !l.is_empty())?;
    let index = lines.next().filter(|l| !l.is_empty())?;
    Some(GitRepo {
        root: PathBuf::from(root),
        index: cwd.join(index),
    })
}

/// The top-level directory of the work tree containing `cwd` ([`locate_repo`] with the default
/// timeout), or `None` (no git, not a repository, bare repository).
pub fn git_root(cwd: &Path) -> Option<PathBuf> {
    locate_repo(cwd, GitOptions::default().timeout).map(|r| r.root)
}

/// The number of entries in a git index file, from its 12-byte header (signature `DIRC`,
/// version, entry count as a big-endian u32; the index format of git's documentation).
/// `None` when the file is missing, short or not an index. A split index counts only the
/// entries of its main file; a sparse index counts a collapsed directory as one entry.
pub fn index_entry_count(index: &Path) -> Option<u64> {
    let mut header = [0u8; 12];
    std::fs::File::open(index)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    if &header[..4] != b"DIRC" {
        return None;
    }
    Some(u64::from(u32::from_be_bytes([
        header[8], header[9], header[10], header[11],
    ])))
}

/// Whether a call of a tool with these declared effects may have changed the work tree (so
/// the git state is read again before the next step): it writes files, runs commands, or has
/// effects it does not name ([`ToolEffects::OTHER`], also what an undeclared tool gets).
/// Read-only and network-only tools do not.
pub fn changes_workspace(effects: ToolEffects) -> bool {
    effects.writes_files() || effects.runs_commands() || effects.has_other_effects()
}

/// The branch named by a porcelain-v1 `## …` header line (without the `## `):
/// `main...origin/main [ahead 1]` → `main`; `No commits yet on main` (or the older
/// `Initial commit on main`) → `main`; `HEAD (no branch)` → `(detached HEAD)`.
pub fn branch_from_header(header: &str) -> String {
    for prefix in ["No commits yet on ", "Initial commit on "] {
        if let Some(b) = header.strip_prefix(prefix) {
            return b.to_owned();
        }
    }
    if header.starts_with("HEAD (no branch)") {
        return "(detached HEAD)".to_owned();
    }
    let end = header
        .find("...")
        .or_else(|| header.find(" ["))
        .unwrap_or(header.len());
    header[..end].to_owned()
}

/// Formats the git context from the repository root and the raw output of
/// `git status --porcelain=v1 --branch` (exact):
///
/// ```text
/// Git repository: <root>
/// Branch: <branch>
/// Status (`git status --porcelain=v1 --branch`):
/// ## main...origin/main [ahead 1]
///  M src/lib.rs
/// ?? notes.txt
/// ```
///
/// A clean tree adds the line `Working tree clean.`; more than [`MAX_STATUS_LINES`] status
/// lines keep the first ones and end with `… <n> more status lines not shown.`
pub fn format_git_context(root: &Path, status: &str) -> String {
    let lines: Vec<&str> = status.lines().filter(|l| !l.is_empty()).collect();
    let branch = lines
        .first()
        .and_then(|l| l.strip_prefix("## "))
        .map_or_else(|| "(unknown)".to_owned(), branch_from_header);
    let mut out = format!(
        "Git repository: {}\nBranch: {branch}\nStatus (`git status --porcelain=v1 --branch`):",
        root.display()
    );
    for line in lines.iter().take(MAX_STATUS_LINES) {
        out.push('\n');
        out.push_str(line);
    }
    if lines.len() > MAX_STATUS_LINES {
        out.push_str(&format!(
            "\n… {} more status lines not shown.",
            lines.len() - MAX_STATUS_LINES
        ));
    }
    let changes = lines.iter().filter(|l| !l.starts_with("## ")).count();
    if changes == 0 {
        out.push_str("\nWorking tree clean.");
    }
    out
}

/// The git context of a large tree, where `git status` was not run (exact):
///
/// ```text
/// Git repository: <root>
/// Branch: <branch>
/// Status: not scanned (the index lists <entries> files, more than git_status_max_files = <limit>); run `git status` to see changes.
/// ```
pub fn format_unscanned_context(root: &Path, branch: &str, entries: u64, limit: u64) -> String {
    format!(
        "Git repository: {}\nBranch: {branch}\nStatus: not scanned (the index lists {entries} \
         files, more than git_status_max_files = {limit}); run `git status` to see changes.",
        root.display()
    )
}

/// The git context when `git status` ran past the timeout (exact):
///
/// ```text
/// Git repository: <root>
/// Status: unavailable (`git status` did not finish within <ms> ms).
/// ```
pub fn format_unavailable_context(root: &Path, timeout: Duration) -> String {
    format!(
        "Git repository: {}\nStatus: unavailable (`git status` did not finish within {} ms).",
        root.display(),
        timeout.as_millis()
    )
}

/// The current branch from `git symbolic-ref -q --short HEAD`: its name, `(detached HEAD)`
/// when HEAD is not a branch (exit 1), else `(unknown)`.
fn current_branch(cwd: &Path, timeout: Duration) -> String {
    match run_git(cwd, &["symbolic-ref", "-q", "--short", "HEAD"], timeout) {
        GitRun::Exited {
            success: true,
            stdout,
        } => match String::from_utf8(stdout) {
            Ok(s) if !s.trim().is_empty() => s.trim_end_matches(['\n', '\r']).to_owned(),
            _ => "(unknown)".to_owned(),
        },
        GitRun::Exited { success: false, .. } => "(detached HEAD)".to_owned(),
        _ => "(unknown)".to_owned(),
    }
}

/// The `context:git` text of `repo` read from `cwd` (one git process): when the index lists
/// at most `options.status_max_files` entries (or cannot be read), [`format_git_context`] of
/// `git status --porcelain=v1 --branch`, or [`format_unavailable_context`] when it times out;
/// above the limit [`format_unscanned_context`] with the branch from `git symbolic-ref`.
/// `None` when `git status` fails.
pub fn git_state(cwd: &Path, repo: &GitRepo, options: &GitOptions) -> Option<String> {
    if let Some(entries) = index_entry_count(&repo.index)
        && entries > options.status_max_files
    {
        let branch = current_branch(cwd, options.timeout);
        return Some(format_unscanned_context(
            &repo.root,
            &branch,
            entries,
            options.status_max_files,
        ));
    }
    match run_git(
        cwd,
        &["status", "--porcelain=v1", "--branch"],
        options.timeout,
    ) {
        GitRun::Exited {
            success: true,
            stdout,
        } => String::from_utf8(stdout)
            .ok()
            .map(|s| format_git_context(&repo.root, &s)),
        GitRun::TimedOut => Some(format_unavailable_context(&repo.root, options.timeout)),
        _ => None,
    }
}

/// The `context:git` text for `cwd` read now with the default [`GitOptions`] ([`locate_repo`]
/// then [`git_state`]: two git processes, nothing cached), or `None` when git is missing or
/// `cwd` is not inside a work tree. The plugin itself reads through
/// [`crate::ContextService::git_text`], which caches.
pub fn git_context(cwd: &Path) -> Option<String> {
    let options = GitOptions::default();
    let repo = locate_repo(cwd, options.timeout)?;
    git_state(cwd, &repo, &options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_headers() {
        assert_eq!(branch_from_header("main"), "main");
        assert_eq!(branch_from_header("main...origin/main [ahead 1]"), "main");
        assert_eq!(branch_from_header("feat/x [gone]"), "feat/x");
        assert_eq!(branch_from_header("No commits yet on trunk"), "trunk");
        assert_eq!(branch_from_header("HEAD (no branch)"), "(detached HEAD)");
    }

    #[test]
    fn status_is_capped() {
        let mut status = String::from("## main\n");
        for i in 0..25 {
            status.push_str(&format!("?? f{i:02}\n"));
        }
        let text = format_git_context(Path::new("/r"), &status);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3 + 20 + 1);
        assert_eq!(lines[3], "## main");
        assert_eq!(lines[22], "?? f18");
        assert_eq!(lines[23], "… 6 more status lines not shown.");
    }

    #[test]
    fn index_header_count() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        let mut bytes = b"DIRC".to_vec();
        bytes.extend(2u32.to_be_bytes());
        bytes.extend(50_000u32.to_be_bytes());
        bytes.extend([0u8; 8]);
        std::fs::write(&index, &bytes).unwrap();
        assert_eq!(index_entry_count(&index), Some(50_000));
        std::fs::write(&index, b"DIRC\0\0\0\x02").unwrap();
        assert_eq!(index_entry_count(&index), None);
        std::fs::write(&index, b"XXXX\0\0\0\x02\0\0\0\x01").unwrap();
        assert_eq!(index_entry_count(&index), None);
        assert_eq!(index_entry_count(&dir.path().join("missing")), None);
    }

    #[test]
    fn which_effects_change_the_workspace() {
        assert!(!changes_workspace(ToolEffects::READ_ONLY));
        assert!(!changes_workspace(ToolEffects::READ_ONLY.parallel_safe()));
        assert!(!changes_workspace(ToolEffects::NETWORK));
        assert!(changes_workspace(
            ToolEffects::WRITES_FILES.target("file_path")
        ));
        assert!(changes_workspace(ToolEffects::RUNS_COMMANDS));
        assert!(changes_workspace(ToolEffects::UNDECLARED));
        assert!(changes_workspace(
            ToolEffects::NETWORK | ToolEffects::WRITES_FILES
        ));
    }

    #[test]
    fn fixed_texts() {
        assert_eq!(
            format_unscanned_context(Path::new("/r"), "main", 50_000, 20_000),
            "Git repository: /r\nBranch: main\nStatus: not scanned (the index lists 50000 files, \
             more than git_status_max_files = 20000); run `git status` to see changes."
        );
        assert_eq!(
            format_unavailable_context(Path::new("/r"), Duration::from_millis(2_000)),
            "Git repository: /r\nStatus: unavailable (`git status` did not finish within 2000 ms)."
        );
    }
}
