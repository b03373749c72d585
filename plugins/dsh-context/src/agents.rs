//! AGENTS.md discovery and the per-file section text.
//!
//! Spec: issue "dsh-context": the `AGENTS.md` of every directory from the git root down to the
//! agent's cwd (root first), then `$DSH_HOME/AGENTS.md`; each file becomes its own system-prompt
//! section headed by its path; at most [`MAX_AGENTS_FILE_BYTES`] of each file are included,
//! with a note when truncated. Without a repository only the cwd's own file is considered.

use std::path::{Path, PathBuf};

use crate::git::git_root;

/// The file name looked up in each directory.
pub const AGENTS_FILE_NAME: &str = "AGENTS.md";

/// Per-file cap (bytes); longer files are cut at the last UTF-8 character boundary at or below
/// it.
pub const MAX_AGENTS_FILE_BYTES: usize = 32 * 1024;

/// One loaded AGENTS.md file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentsFile {
    /// The path as discovered (git root / cwd chain, or `$DSH_HOME/AGENTS.md`).
    pub path: PathBuf,
    /// The (possibly truncated) text; invalid UTF-8 is replaced by U+FFFD.
    pub text: String,
    /// The file's full size in bytes.
    pub total_bytes: usize,
    /// Whether `text` was cut to [`MAX_AGENTS_FILE_BYTES`].
    pub truncated: bool,
}

/// The directories whose AGENTS.md applies to `cwd`: from the git root of `cwd` down to `cwd`
/// itself (root first), or just `cwd` when it is not inside a work tree (or lies outside the
/// reported root, e.g. through an unresolvable link).
pub fn chain_dirs(cwd: &Path) -> Vec<PathBuf> {
    chain_dirs_under(cwd, git_root(cwd))
}

/// [`chain_dirs`] with the work-tree root already known (`None`: not in a work tree).
fn chain_dirs_under(cwd: &Path, root: Option<PathBuf>) -> Vec<PathBuf> {
    let Some(root) = root else {
        return vec![cwd.to_path_buf()];
    };
    let real_cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let real_root = std::fs::canonicalize(&root).unwrap_or(root);
    let Ok(rel) = real_cwd.strip_prefix(&real_root) else {
        return vec![cwd.to_path_buf()];
    };
    let mut dirs = vec![real_root.clone()];
    let mut cur = real_root;
    for comp in rel.components() {
        cur.push(comp);
        dirs.push(cur.clone());
    }
    dirs
}

/// The AGENTS.md paths that exist for `cwd`, in order: [`chain_dirs`] files, then
/// `<dsh_home>/AGENTS.md`. A file reached twice (same canonical path, e.g. `$DSH_HOME` inside
/// the repository) is listed once, at its first position.
pub fn discover_agents_files(cwd: &Path, dsh_home: Option<&Path>) -> Vec<PathBuf> {
    discover_under(cwd, git_root(cwd), dsh_home)
}

/// [`discover_agents_files`] with the work-tree root already known.
fn discover_under(cwd: &Path, root: Option<PathBuf>, dsh_home: Option<&Path>) -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = chain_dirs_under(cwd, root)
        .into_iter()
        .map(|d| d.join(AGENTS_FILE_NAME))
        .collect();
    if let Some(home) = dsh_home {
        candidates.push(home.join(AGENTS_FILE_NAME));
    }
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for path in candidates {
        if !path.is_file() {
            continue;
        }
        let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if seen.contains(&canonical) {
            continue;
        }
        seen.push(canonical);
        out.push(path);
    }
    out
}

/// Loads one file with the [`MAX_AGENTS_FILE_BYTES`] cap. `None` when it cannot be read or is
/// empty (whitespace only).
pub fn load_agents_file(path: &Path) -> Option<AgentsFile> {
    let bytes = std::fs::read(path).ok()?;
    let total_bytes = bytes.len();
    let full = String::from_utf8_lossy(&bytes);
    let (text, truncated) = if full.len() > MAX_AGENTS_FILE_BYTES {
        let mut cut = MAX_AGENTS_FILE_BYTES;
        while !full.is_char_boundary(cut) {
            cut -= 1;
        }
        (full[..cut].to_owned(), true)
    } else {
        (full.into_owned(), false)
    };
    if text.trim().is_empty() {
        return None;
    }
    Some(AgentsFile {
        path: path.to_path_buf(),
        text,
        total_bytes,
        truncated,
    })
}

/// [`discover_agents_files`] then [`load_agents_file`] for each, in order.
pub fn load_agents_files(cwd: &Path, dsh_home: Option<&Path>) -> Vec<AgentsFile> {
    load_agents_files_under(cwd, git_root(cwd), dsh_home)
}

/// [`load_agents_files`] with the work-tree root already known (the service passes the root
/// it located once for the git context, so discovery spawns no git of its own).
pub(crate) fn load_agents_files_under(
    cwd: &Path,
    root: Option<PathBuf>,
    dsh_home: Option<&Path>,
) -> Vec<AgentsFile> {
    discover_under(cwd, root, dsh_home)
        .iter()
        .filter_map(|p| load_agents_file(p))
        .collect()
}

/// The section text of one file (exact):
///
/// ```text
/// # AGENTS.md: <path>
///
/// <text, trailing whitespace trimmed>
/// ```
///
/// followed, when truncated, by a blank line and
/// `[truncated: only the first <n> of <total> bytes of <path> are included]` (n = the bytes
/// kept).
pub fn agents_section_text(file: &AgentsFile) -> String {
    let mut out = format!(
        "# AGENTS.md: {}\n\n{}",
        file.path.display(),
        file.text.trim_end()
    );
    if file.truncated {
        out.push_str(&format!(
            "\n\n[truncated: only the first {} of {} bytes of {} are included]",
            file.text.len(),
            file.total_bytes,
            file.path.display()
        ));
    }
    out
}
