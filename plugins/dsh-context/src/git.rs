//! Quick `git` invocations: the repository root (for AGENTS.md discovery) and the
//! `context:git` runtime-context text (branch + a capped `git status` summary).
//!
//! Spec: issue "dsh-context". git runs as `git -C <cwd> …` with stdin, stderr null and
//! `GIT_OPTIONAL_LOCKS=0` (status never takes the index lock, so it cannot disturb a
//! concurrent git command); a missing git binary, a failing command or a directory outside any
//! repository yields `None` (the context is omitted). No timeout: these commands are local and
//! quick.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// At most this many lines of `git status` output (the `## branch` line included) appear in the
/// git context; the rest is counted in a closing line.
pub const MAX_STATUS_LINES: usize = 20;

/// Runs `git -C <cwd> <args>` and returns its stdout when it exits 0 and is UTF-8.
fn git(cwd: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(cwd)
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}

/// The top-level directory of the work tree containing `cwd` (`git rev-parse
/// --show-toplevel`), or `None` (no git, not a repository, bare repository).
pub fn git_root(cwd: &Path) -> Option<PathBuf> {
    let out = git(cwd, &["rev-parse", "--show-toplevel"])?;
    let line = out.trim_end_matches(['\n', '\r']);
    (!line.is_empty()).then(|| PathBuf::from(line))
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

/// The work-tree root of `cwd`, looked up once per directory per process: the context is
/// assembled every step, and a `git rev-parse` spawn costs about a millisecond of CPU.
fn cached_git_root(cwd: &Path) -> Option<PathBuf> {
    static ROOTS: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<PathBuf, Option<PathBuf>>>,
    > = std::sync::OnceLock::new();
    let roots = ROOTS.get_or_init(Default::default);
    if let Some(hit) = roots
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(cwd)
        .cloned()
    {
        return hit;
    }
    let root = git_root(cwd);
    roots
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(cwd.to_path_buf(), root.clone());
    root
}

/// The `context:git` text for `cwd` ([`format_git_context`]), or `None` when git is missing
/// or `cwd` is not inside a work tree (the root is cached per directory; the status is read
/// each call so the context follows the work tree).
pub fn git_context(cwd: &Path) -> Option<String> {
    let root = cached_git_root(cwd)?;
    let status = git(cwd, &["status", "--porcelain=v1", "--branch"])?;
    Some(format_git_context(&root, &status))
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
}
