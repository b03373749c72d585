//! The glob engine: files (never directories) whose path matches one glob, including hidden and
//! ignored files but never inside VCS directories, newest modification time first (ties by
//! path), keeping only the first `max_results` in memory while counting all.
//!
//! Glob semantics are ripgrep's `--glob` (gitignore-style): a pattern without `/` matches the
//! basename at any depth (`*.rs`, `*`), one with `/` is anchored at the search directory
//! (`src/**/*.rs`); `*` never crosses `/`, `**` does.
//!
//! Behaviour notes: `docs/tools.md` ("Search tools") — parameters `{pattern, path?}`,
//! `--files --no-ignore --hidden` with VCS excludes, cap 100, `No files found`, an over-cap
//! note. Ordering note: upstream passes `--sort=modified`, which is ripgrep's ascending order;
//! dsh shows newest first as the issue asks (see the report).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::UNIX_EPOCH;

use ignore::WalkState;
use ignore::overrides::OverrideBuilder;
use serde::{Deserialize, Serialize};

use crate::error::SearchError;
use crate::grep::VCS_DIRS;
use crate::paths;

/// Default cap on paths kept and shown (upstream `GLOB_MAX_RESULTS`).
pub const GLOB_MAX_RESULTS: usize = 100;

/// Glob arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GlobRequest {
    /// Glob pattern to match file paths against (e.g. "**/*.rs", "src/**/*.test.js"). A
    /// pattern with no "/" matches the basename at any depth, so "*" and "*.rs" search the
    /// whole tree; include a separator to anchor the depth.
    pub pattern: String,
    /// Directory to search in. Defaults to the session workspace; a relative path resolves
    /// against it and must stay inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Engine limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobOptions {
    /// Paths kept.
    pub max_results: usize,
    /// Worker threads (0 = automatic).
    pub threads: usize,
}

impl Default for GlobOptions {
    fn default() -> Self {
        Self {
            max_results: GLOB_MAX_RESULTS,
            threads: 0,
        }
    }
}

/// The canonical glob value (JSON camelCase).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GlobOutput {
    /// The searched directory, relative to the session's `cwd` (`.` for the cwd itself).
    pub root: String,
    /// The first `max_results` matching files, newest first, ties by path; workspace-relative.
    pub paths: Vec<String>,
    /// Every matching file.
    pub total_paths: u64,
    /// True when `total_paths > paths.len()`.
    pub truncated: bool,
}

/// Sort key: newest first, then path ascending. `Ord` puts the best entry first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key(Reverse<u128>, String);

/// Finds files under the workspace `root` (canonical) matching `req.pattern`: [`glob_in`] with
/// the root as the base.
///
/// # Errors
/// As [`glob_in`].
pub fn glob(
    root: &Path,
    req: &GlobRequest,
    opts: &GlobOptions,
    cancel: Option<&AtomicBool>,
) -> Result<GlobOutput, SearchError> {
    glob_in(root, root, req, opts, cancel)
}

/// Finds files under `req.path` (default `base`, a relative path against `base`) matching
/// `req.pattern`, confined to the workspace `root`; `base` (the session's `cwd`) is canonical
/// and inside the canonical `root`, and paths are shown relative to it
/// ([`paths::display_from`]).
///
/// # Errors
/// [`SearchError::InvalidArgs`] for a blank pattern/path; [`SearchError::InvalidPattern`] for a
/// bad glob; [`paths::resolve_in`]'s errors; [`SearchError::NotADirectory`] when `path` is
/// a file; [`SearchError::Cancelled`].
pub fn glob_in(
    root: &Path,
    base: &Path,
    req: &GlobRequest,
    opts: &GlobOptions,
    cancel: Option<&AtomicBool>,
) -> Result<GlobOutput, SearchError> {
    if req.pattern.trim().is_empty() {
        return Err(SearchError::InvalidArgs(
            "pattern must be a non-empty string".into(),
        ));
    }
    let target = paths::resolve_in(root, base, req.path.as_deref())?;
    if !target.is_dir() {
        return Err(SearchError::NotADirectory(
            req.path.clone().unwrap_or_default(),
        ));
    }
    let mut ob = OverrideBuilder::new(&target);
    ob.add(&req.pattern)
        .map_err(|e| SearchError::InvalidPattern(e.to_string()))?;
    let over = ob
        .build()
        .map_err(|e| SearchError::InvalidPattern(e.to_string()))?;
    let mut walk = ignore::WalkBuilder::new(&target);
    walk.standard_filters(false)
        .hidden(false)
        .threads(opts.threads)
        .filter_entry(|e| {
            !(e.file_type().is_some_and(|t| t.is_dir())
                && VCS_DIRS.iter().any(|v| e.file_name() == *v))
        });
    let best = Arc::new(Mutex::new((BinaryHeap::<Key>::new(), 0u64)));
    let cancelled = AtomicBool::new(false);
    let cap = opts.max_results;
    walk.build_parallel().run(|| {
        let (best, over, cancelled) = (best.clone(), over.clone(), &cancelled);
        Box::new(move |entry| {
            if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                cancelled.store(true, Ordering::Relaxed);
                return WalkState::Quit;
            }
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            if !over.matched(entry.path(), false).is_whitelist() {
                return WalkState::Continue;
            }
            let mtime = entry
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            let key = Key(
                Reverse(mtime),
                paths::display_from(root, base, entry.path()),
            );
            let mut g = best.lock().unwrap_or_else(PoisonError::into_inner);
            g.1 += 1;
            // Max-heap of the kept entries: the top is the worst kept one.
            if g.0.len() < cap {
                g.0.push(key);
            } else if g.0.peek().is_some_and(|worst| key < *worst) {
                g.0.pop();
                g.0.push(key);
            }
            WalkState::Continue
        })
    });
    if cancelled.load(Ordering::Relaxed) {
        return Err(SearchError::Cancelled);
    }
    let (heap, total) = std::mem::take(&mut *best.lock().unwrap_or_else(PoisonError::into_inner));
    let paths: Vec<String> = heap.into_sorted_vec().into_iter().map(|k| k.1).collect();
    Ok(GlobOutput {
        root: paths::display_from(root, base, &target),
        truncated: total > paths.len() as u64,
        total_paths: total,
        paths,
    })
}

/// The model-facing text: `No files found`; the paths one per line; or, over the cap, the kept
/// paths, a blank line and `(Showing <k> of <n> paths, newest first; narrow pattern or path to
/// see more.)`.
pub fn render(out: &GlobOutput) -> String {
    if out.total_paths == 0 {
        return "No files found".to_string();
    }
    let body = out.paths.join("\n");
    if !out.truncated {
        return body;
    }
    format!(
        "{body}\n\n(Showing {} of {} paths, newest first; narrow pattern or path to see more.)",
        out.paths.len(),
        out.total_paths
    )
}
