//! The grep engine: a parallel, `.gitignore`-aware regex search (ripgrep's defaults: hidden
//! files, ignored files and binary files are skipped; symlinks are not followed; VCS
//! directories are always excluded) with exact totals, a deterministic result (sorted by path,
//! then line) and bounded memory (only the matches that can be shown are kept).
//!
//! Behaviour notes: `docs/tools.md` ("Search tools") — parameters `{pattern, path?,
//! include?}`, one positive include glob (rg `--glob` semantics), defaults 250 matches and 2000
//! bytes per line preview, output `Found N matches` grouped by file as `Line N: text`,
//! `No matches found`, non-UTF-8 lines shown as `(line is not valid UTF-8)`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Bytes;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::WalkState;
use ignore::overrides::OverrideBuilder;
use serde::{Deserialize, Serialize};

use crate::error::SearchError;
use crate::paths;

/// Directory names never searched or listed.
pub const VCS_DIRS: &[&str] = &[".git", ".svn", ".hg", ".bzr", ".jj", ".sl"];

/// Default cap on matches kept and shown (upstream `GREP_MAX_MATCHES`).
pub const GREP_MAX_MATCHES: usize = 250;

/// Default cap on one line preview (bytes; upstream `GREP_MAX_LINE_BYTES`).
pub const GREP_MAX_LINE_BYTES: usize = 2000;

/// Validated grep arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GrepRequest {
    /// Regular expression to search for (ripgrep syntax).
    pub pattern: String,
    /// File or directory to search. Defaults to the session workspace; a relative path
    /// resolves against it and must stay inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// One glob filter for which files to search (e.g. "*.rs", "*.{ts,tsx}"). Not a list;
    /// negation is not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<String>,
}

/// Engine limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepOptions {
    /// Matches kept (the first ones in path/line order).
    pub max_matches: usize,
    /// Bytes kept per line preview.
    pub max_line_bytes: usize,
    /// Worker threads (0 = automatic, like ripgrep).
    pub threads: usize,
}

impl Default for GrepOptions {
    fn default() -> Self {
        Self {
            max_matches: GREP_MAX_MATCHES,
            max_line_bytes: GREP_MAX_LINE_BYTES,
            threads: 0,
        }
    }
}

/// One match (JSON camelCase).
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct GrepMatch {
    /// Workspace-relative path with `/` separators.
    pub path: String,
    /// 1-based line number.
    pub line_number: u64,
    /// The line without its terminator, cut to the preview cap with ` (line truncated)`.
    pub line: String,
}

/// The canonical grep value (JSON camelCase).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrepOutput {
    /// The first `max_matches` matches in (path, line) order.
    pub matches: Vec<GrepMatch>,
    /// Every match found.
    pub total_matches: u64,
    /// True when `total_matches > matches.len()`.
    pub truncated: bool,
}

/// Validates arguments the schema cannot express (upstream `parseGrepArgs`).
///
/// # Errors
/// [`SearchError::InvalidArgs`] for an empty pattern, a blank path, or an include that is blank,
/// negated (`!…`) or a top-level comma list.
pub fn validate(req: &GrepRequest) -> Result<(), SearchError> {
    if req.pattern.is_empty() {
        return Err(SearchError::InvalidArgs(
            "pattern must be a non-empty string".into(),
        ));
    }
    if req.path.as_deref().is_some_and(|p| p.trim().is_empty()) {
        return Err(SearchError::InvalidArgs(
            "path must be a non-empty string when given".into(),
        ));
    }
    if let Some(inc) = &req.include {
        if inc.trim().is_empty() {
            return Err(SearchError::InvalidArgs(
                "include must be a non-empty glob when given".into(),
            ));
        }
        if inc.starts_with('!') {
            return Err(SearchError::InvalidArgs(
                "include must be a positive glob filter; negated patterns (\"!…\") are not supported".into(),
            ));
        }
        let mut depth = 0usize;
        for c in inc.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    return Err(SearchError::InvalidArgs(
                        "include must be one glob, not a comma-separated list (use {a,b} alternation instead)".into(),
                    ));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Keeps only the matches that can be shown: the files with the smallest paths whose counts
/// reach the cap (memory stays bounded, the result is independent of thread scheduling).
struct Keep {
    cap: usize,
    files: BTreeMap<String, Vec<GrepMatch>>,
    stored: usize,
    total: u64,
}

impl Keep {
    fn add(&mut self, path: String, matches: Vec<GrepMatch>, count: u64) {
        self.total += count;
        if matches.is_empty() {
            return;
        }
        if self.stored >= self.cap && self.files.last_key_value().is_some_and(|(k, _)| *k < path) {
            return;
        }
        self.stored += matches.len();
        self.files.insert(path, matches);
        while let Some((_, last)) = self.files.last_key_value() {
            if self.stored - last.len() >= self.cap {
                let n = last.len();
                self.files.pop_last();
                self.stored -= n;
            } else {
                break;
            }
        }
    }
}

fn preview(bytes: &[u8], max: usize) -> String {
    let line = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(text) = std::str::from_utf8(line) else {
        return "(line is not valid UTF-8)".to_string();
    };
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{} (line truncated)", &text[..cut])
}

/// Searches under the workspace `root` (a canonical directory, see [`paths::canonical_root`]):
/// [`grep_in`] with the root as the base.
///
/// # Errors
/// As [`grep_in`].
pub fn grep(
    root: &Path,
    req: &GrepRequest,
    opts: &GrepOptions,
    cancel: Option<&AtomicBool>,
) -> Result<GrepOutput, SearchError> {
    grep_in(root, root, req, opts, cancel)
}

/// Searches `req.path` (default `base`, a relative path against `base`) confined to the
/// workspace `root`; `base` (the session's `cwd`) is canonical and inside the canonical `root`,
/// and matched paths are shown relative to it ([`paths::display_from`]).
///
/// # Errors
/// [`validate`]'s errors; [`SearchError::InvalidPattern`] for a bad regex or include glob;
/// the [`paths::resolve_in`] errors; [`SearchError::Cancelled`] when `cancel` was set.
pub fn grep_in(
    root: &Path,
    base: &Path,
    req: &GrepRequest,
    opts: &GrepOptions,
    cancel: Option<&AtomicBool>,
) -> Result<GrepOutput, SearchError> {
    validate(req)?;
    let target = paths::resolve_in(root, base, req.path.as_deref())?;
    let matcher = RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .build(&req.pattern)
        .map_err(|e| SearchError::InvalidPattern(e.to_string()))?;
    let mut walk = ignore::WalkBuilder::new(&target);
    walk.require_git(false)
        .threads(opts.threads)
        .filter_entry(|e| {
            !(e.file_type().is_some_and(|t| t.is_dir())
                && VCS_DIRS.iter().any(|v| e.file_name() == *v))
        });
    if let Some(inc) = &req.include {
        let search_root = if target.is_dir() {
            target.as_path()
        } else {
            base
        };
        let mut ob = OverrideBuilder::new(search_root);
        ob.add(inc)
            .map_err(|e| SearchError::InvalidPattern(e.to_string()))?;
        walk.overrides(
            ob.build()
                .map_err(|e| SearchError::InvalidPattern(e.to_string()))?,
        );
    }
    let keep = Arc::new(Mutex::new(Keep {
        cap: opts.max_matches,
        files: BTreeMap::new(),
        stored: 0,
        total: 0,
    }));
    let cancelled = AtomicBool::new(false);
    let max_line = opts.max_line_bytes;
    let cap = opts.max_matches;
    walk.build_parallel().run(|| {
        let matcher = matcher.clone();
        let keep = keep.clone();
        let cancelled = &cancelled;
        let mut searcher = SearcherBuilder::new()
            .line_number(true)
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .build();
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
            let shown = paths::display_from(root, base, entry.path());
            let mut found = Vec::new();
            let mut count = 0u64;
            let res = searcher.search_path(
                &matcher,
                entry.path(),
                Bytes(|lnum, line| {
                    count += 1;
                    if found.len() < cap {
                        found.push(GrepMatch {
                            path: shown.clone(),
                            line_number: lnum,
                            line: preview(line, max_line),
                        });
                    }
                    Ok(true)
                }),
            );
            if res.is_ok() && count > 0 {
                keep.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .add(shown, found, count);
            }
            WalkState::Continue
        })
    });
    if cancelled.load(Ordering::Relaxed) {
        return Err(SearchError::Cancelled);
    }
    let keep = std::mem::replace(
        &mut *keep.lock().unwrap_or_else(PoisonError::into_inner),
        Keep {
            cap: 0,
            files: BTreeMap::new(),
            stored: 0,
            total: 0,
        },
    );
    let mut matches: Vec<GrepMatch> = keep.files.into_values().flatten().collect();
    matches.truncate(opts.max_matches);
    Ok(GrepOutput {
        truncated: keep.total > matches.len() as u64,
        total_matches: keep.total,
        matches,
    })
}

/// The model-facing text: `No matches found`; or `Found <n> match(es)` + blank line + the
/// matches grouped by file (`<path>\nLine <n>: <text>`, groups separated by a blank line); when
/// capped the header is `Found <kept> of <total> matches` and a final line says
/// `(Showing the first <kept> of <total> matches in path order; narrow pattern, path, or include to see more.)`.
pub fn render(out: &GrepOutput) -> String {
    if out.total_matches == 0 {
        return "No matches found".to_string();
    }
    let mut sections: Vec<String> = Vec::new();
    let mut current: Option<&str> = None;
    for m in &out.matches {
        if current != Some(m.path.as_str()) {
            sections.push(m.path.clone());
            current = Some(m.path.as_str());
        }
        if let Some(last) = sections.last_mut() {
            last.push_str(&format!("\nLine {}: {}", m.line_number, m.line));
        }
    }
    let body = sections.join("\n\n");
    let kept = out.matches.len();
    if !out.truncated {
        let noun = if out.total_matches == 1 {
            "match"
        } else {
            "matches"
        };
        return format!("Found {} {noun}\n\n{body}", out.total_matches);
    }
    format!(
        "Found {kept} of {total} matches\n\n{body}\n\n(Showing the first {kept} of {total} matches in path order; narrow pattern, path, or include to see more.)",
        total = out.total_matches
    )
}
