//! The model-facing `grep` and `glob` tools ([`Grep`], [`Glob`]: [`dsh_tools::Tool`]s declared
//! read-only and parallel-safe). A call searches below the caller's session `cwd` (else the
//! configured `root`, else the run's workspace root, else the process's current directory),
//! fenced by the workspace root (`dsh_fs::Workspace`: `-C DIR` or the nearest `.git`
//! ancestor), so `path: ".."` from a repository's subdirectory is inside. Searches run on the
//! blocking pool; the call's cancellation stops the walk (`ABORTED`).
//!
//! Names, parameters, caps (250 matches / 2000 bytes per line / 100 paths) and wording follow
//! upstream: `docs/tools.md` ("Search tools").

use dsh_kernel::ErrorCode;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dsh_kernel::{Context, Registration};
use dsh_llm::ContentBlock;
use dsh_tools::{Tool, ToolEffects, ToolFailure, ToolRegistry, ToolRunContext, ToolsError};
use serde::{Deserialize, Serialize};

use crate::error::SearchError;
use crate::glob::{self, GLOB_MAX_RESULTS, GlobOptions, GlobOutput, GlobRequest};
use crate::grep::{
    self, GREP_MAX_LINE_BYTES, GREP_MAX_MATCHES, GrepOptions, GrepOutput, GrepRequest,
};
use crate::paths;

/// Plugin configuration (settings section `dsh-tool-search`, snake_case keys, all optional,
/// unknown keys rejected): `root`, `grep_max_matches`, `grep_max_line_bytes`,
/// `glob_max_results`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// The search base when the caller has no session `cwd` (default: the run's workspace
    /// root, else the process cwd).
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

/// The `(root, base)` of a call, both canonical: the workspace root that fences it and the
/// session's `cwd` that relative paths resolve against ([`dsh_fs::Workspace::for_context`]; no
/// session `cwd` ⇒ the configured `root`, else the run's workspace root, else the process's
/// current directory).
fn workspace_dirs(
    cfg: &SearchConfig,
    cx: &ToolRunContext,
) -> Result<(PathBuf, PathBuf), ToolFailure> {
    let caller = cx.exec.caller.as_ref();
    let session_cwd = caller
        .and_then(|c| c.session.header().cwd.clone())
        .map(PathBuf::from);
    let fallback = cfg.root.as_deref();
    let ws = match caller {
        Some(c) => dsh_fs::Workspace::for_context(&c.ctx, session_cwd.as_deref(), fallback),
        None => dsh_fs::Workspace::for_session(None, None, fallback),
    }
    .map_err(|e| fail(&SearchError::Io(e)))?;
    let root = paths::canonical_root(&ws.root).map_err(|e| fail(&e))?;
    let base = paths::canonical_root(&ws.cwd).map_err(|e| fail(&e))?;
    Ok((root, base))
}

/// The read root granted on the filesystem service (`dsh_fs::FsService::grant_read_root`, e.g. a
/// session's spill folder) that holds the absolute search `path`, if any: `grep` searches such a
/// path with that root in place of the workspace (paths shown relative to it), as `read` may
/// read it. See docs/tools.md ("Spill").
fn granted_root(cx: &ToolRunContext, path: Option<&str>) -> Option<PathBuf> {
    let path = std::path::Path::new(path?);
    if !path.is_absolute() {
        return None;
    }
    let canon = path.canonicalize().ok()?;
    let fs = cx.exec.caller.as_ref()?.ctx.get::<dsh_fs::FsService>()?;
    fs.read_roots().into_iter().find(|r| canon.starts_with(r))
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

/// The `grep` tool over a shared [`SearchConfig`].
#[derive(Debug, Clone)]
pub struct Grep {
    /// Caps and fallback root.
    pub cfg: Arc<SearchConfig>,
}

impl Tool for Grep {
    const NAME: &'static str = "grep";
    type Args = GrepRequest;
    type Output = GrepOutput;

    fn description(&self) -> String {
        format!(
            "Search file contents with a ripgrep regular expression. Returns matching lines with line \
             numbers, grouped by file, in path order. Respects .gitignore and skips hidden and binary \
             files. Returns the first {} matches inline and says how many more exist. Use read on a \
             matched file for surrounding context.",
            self.cfg.grep_max_matches
        )
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::READ_ONLY.parallel_safe()
    }

    async fn call(&self, args: GrepRequest, cx: ToolRunContext) -> Result<GrepOutput, ToolFailure> {
        let (root, base) = match granted_root(&cx, args.path.as_deref()) {
            Some(granted) => (granted.clone(), granted),
            None => workspace_dirs(&self.cfg, &cx)?,
        };
        let opts = GrepOptions {
            max_matches: self.cfg.grep_max_matches,
            max_line_bytes: self.cfg.grep_max_line_bytes,
            threads: 0,
        };
        blocking(&cx, move |flag| {
            grep::grep_in(&root, &base, &args, &opts, Some(flag))
        })
        .await
    }

    fn render(&self, _args: &GrepRequest, out: &GrepOutput) -> Vec<ContentBlock> {
        vec![ContentBlock::text(grep::render(out))]
    }
}

/// The `glob` tool over a shared [`SearchConfig`].
#[derive(Debug, Clone)]
pub struct Glob {
    /// Caps and fallback root.
    pub cfg: Arc<SearchConfig>,
}

impl Tool for Glob {
    const NAME: &'static str = "glob";
    type Args = GlobRequest;
    type Output = GlobOutput;

    fn description(&self) -> String {
        format!(
            "Find files whose paths match a glob pattern. Returns matching file paths — never \
             directories — including hidden and ignored files (VCS metadata directories are \
             excluded), newest modification time first. Up to {} paths are returned; a larger \
             result says how many exist.",
            self.cfg.glob_max_results
        )
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::READ_ONLY.parallel_safe()
    }

    async fn call(&self, args: GlobRequest, cx: ToolRunContext) -> Result<GlobOutput, ToolFailure> {
        let (root, base) = workspace_dirs(&self.cfg, &cx)?;
        let opts = GlobOptions {
            max_results: self.cfg.glob_max_results,
            threads: 0,
        };
        blocking(&cx, move |flag| {
            glob::glob_in(&root, &base, &args, &opts, Some(flag))
        })
        .await
    }

    fn render(&self, _args: &GlobRequest, out: &GlobOutput) -> Vec<ContentBlock> {
        vec![ContentBlock::text(glob::render(out))]
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
    Ok(vec![
        registry.register_tool(ctx, Grep { cfg: cfg.clone() })?,
        registry.register_tool(ctx, Glob { cfg })?,
    ])
}
