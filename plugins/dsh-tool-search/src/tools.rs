//! The model-facing `grep` and `glob` tools (both parallel-safe), built with the typed DSL of
//! `dsh-tools`. The workspace root of a call is the caller's session `cwd`, else the configured
//! `root`, else the process's current directory. Searches run on the blocking pool; the call's
//! cancellation stops the walk (`ABORTED`).
//!
//! Spec: `../shared/spec/tools.md`; upstream `packages/fs/tool-fs-search` (names, parameters,
//! caps 250 matches / 2000 bytes per line / 100 paths, wording).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dsh_kernel::{Context, Registration};
use dsh_llm::ContentBlock;
use dsh_tools::{ToolFailure, ToolRegistry, ToolRunContext, ToolsError, define_tool};
use serde::{Deserialize, Serialize};

use crate::error::SearchError;
use crate::glob::{self, GLOB_MAX_RESULTS, GlobOptions, GlobOutput, GlobRequest};
use crate::grep::{
    self, GREP_MAX_LINE_BYTES, GREP_MAX_MATCHES, GrepOptions, GrepOutput, GrepRequest,
};
use crate::paths;

/// Plugin configuration (settings section `dsh-tool-search`, JSON camelCase, all optional).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SearchConfig {
    /// Workspace root when the caller has no session `cwd` (default: the process cwd).
    pub root: Option<PathBuf>,
    /// Matches shown by `grep` (default 250).
    pub grep_max_matches: usize,
    /// Bytes per matched-line preview (default 2000).
    pub grep_max_line_bytes: usize,
    /// Paths shown by `glob` (default 100).
    pub glob_max_results: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            root: None,
            grep_max_matches: GREP_MAX_MATCHES,
            grep_max_line_bytes: GREP_MAX_LINE_BYTES,
            glob_max_results: GLOB_MAX_RESULTS,
        }
    }
}

fn fail(e: &SearchError) -> ToolFailure {
    match e {
        SearchError::Cancelled => ToolsError::Aborted.into(),
        other => ToolFailure::typed(other.to_string(), "SearchError", other.code()),
    }
}

fn workspace_root(cfg: &SearchConfig, cx: &ToolRunContext) -> Result<PathBuf, ToolFailure> {
    let from_session = cx
        .exec
        .caller
        .as_ref()
        .and_then(|c| c.session.header().cwd.clone())
        .map(PathBuf::from);
    let root = match from_session.or_else(|| cfg.root.clone()) {
        Some(r) => r,
        None => std::env::current_dir().map_err(|e| fail(&SearchError::Io(e)))?,
    };
    paths::canonical_root(&root).map_err(|e| fail(&e))
}

/// Runs a blocking search with a cancel flag wired to the call's signal.
async fn blocking<T: Send + 'static>(
    cx: &ToolRunContext,
    f: impl FnOnce(&AtomicBool) -> Result<T, SearchError> + Send + 'static,
) -> Result<T, ToolFailure> {
    let flag = Arc::new(AtomicBool::new(false));
    let (f2, signal) = (flag.clone(), cx.signal.clone());
    let watcher = tokio::spawn(async move {
        signal.cancelled().await;
        f2.store(true, Ordering::Relaxed);
    });
    let res = tokio::task::spawn_blocking(move || f(&flag)).await;
    watcher.abort();
    match res {
        Ok(r) => r.map_err(|e| fail(&e)),
        Err(e) => Err(ToolFailure::message(format!("search task failed: {e}"))),
    }
}

/// Registers `grep` and `glob` through `ctx` (global when untagged).
///
/// # Errors
/// [`ToolsError`] from building or registering a tool.
pub fn register_tools(
    ctx: &Context,
    registry: &ToolRegistry,
    cfg: SearchConfig,
) -> Result<Vec<Registration>, ToolsError> {
    let cfg = Arc::new(cfg);
    let c = cfg.clone();
    let grep_tool = define_tool::<GrepRequest, GrepOutput>(
        "grep",
        format!(
            "Search file contents with a ripgrep regular expression. Returns matching lines with line \
             numbers, grouped by file, in path order. Respects .gitignore and skips hidden and binary \
             files. Returns the first {} matches inline and says how many more exist. Use read on a \
             matched file for surrounding context.",
            cfg.grep_max_matches
        ),
    )
    .render(|_, out| vec![ContentBlock::text(grep::render(out))])
    .always_concurrency_safe()
    .execute(move |args: GrepRequest, cx: ToolRunContext| {
        let c = c.clone();
        async move {
            let root = workspace_root(&c, &cx)?;
            let opts = GrepOptions { max_matches: c.grep_max_matches, max_line_bytes: c.grep_max_line_bytes, threads: 0 };
            blocking(&cx, move |flag| grep::grep(&root, &args, &opts, Some(flag))).await
        }
    })?;
    let c = cfg.clone();
    let glob_tool = define_tool::<GlobRequest, GlobOutput>(
        "glob",
        format!(
            "Find files whose paths match a glob pattern. Returns matching file paths — never \
             directories — including hidden and ignored files (VCS metadata directories are \
             excluded), newest modification time first. Up to {} paths are returned; a larger \
             result says how many exist.",
            cfg.glob_max_results
        ),
    )
    .render(|_, out| vec![ContentBlock::text(glob::render(out))])
    .always_concurrency_safe()
    .execute(move |args: GlobRequest, cx: ToolRunContext| {
        let c = c.clone();
        async move {
            let root = workspace_root(&c, &cx)?;
            let opts = GlobOptions {
                max_results: c.glob_max_results,
                threads: 0,
            };
            blocking(&cx, move |flag| glob::glob(&root, &args, &opts, Some(flag))).await
        }
    })?;
    Ok(vec![
        registry.register(ctx, grep_tool)?,
        registry.register(ctx, glob_tool)?,
    ])
}
