//! The three tools ([`Read`], [`Write`], [`Edit`], each a [`dsh_tools::Tool`]) and their shared
//! state (config, service, observations).

use dsh_kernel::ErrorCode;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_fs::{
    Access, EditRequest, FsConfig, FsError, FsService, Observation, Observations, Observed,
    WindowCaps, Workspace, WriteIntent, text,
};
use dsh_kernel::{BoxError, Context};
use dsh_llm::ContentBlock;
use dsh_tools::{Tool, ToolEffects, ToolFailure, ToolRunContext, ToolsError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Settings of the plugin (section `dsh-tool-fs`, snake_case keys, unknown keys rejected).
/// Defaults follow upstream: 2000 lines, 2000 chars per line, 50 KiB per read; service caps as
/// [`FsConfig::default`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FsToolsConfig {
    /// The top-level `permission_mode`: `danger-full-access` lifts the workspace fence for
    /// reads and writes (as `allow_outside_workspace`); other modes leave the fence as set.
    pub permission_mode: Option<String>,
    /// The directory relative paths resolve against when the session header has no `cwd`
    /// (the fence is still the run's workspace root when it contains it).
    pub workspace: Option<PathBuf>,
    /// Default and maximum `limit` of one read (lines).
    pub read_limit: usize,
    /// Maximum characters kept of one line.
    pub read_max_line_length: usize,
    /// Maximum bytes of selected line text per read.
    pub read_max_bytes: usize,
    /// Largest readable file (bytes).
    pub max_read_file_bytes: u64,
    /// Largest editable/overwritable file and largest written content (bytes).
    pub max_edit_file_bytes: u64,
    /// Policy: reads and writes anywhere.
    pub allow_outside_workspace: bool,
    /// Policy: reads anywhere.
    pub allow_read_outside_workspace: bool,
    /// Require a read of the current version before `edit` or an overwriting `write`.
    pub require_read_before_write: bool,
}

impl Default for FsToolsConfig {
    fn default() -> Self {
        let fs = FsConfig::default();
        Self {
            permission_mode: None,
            workspace: None,
            read_limit: 2000,
            read_max_line_length: 2000,
            read_max_bytes: 50 * 1024,
            max_read_file_bytes: fs.max_read_file_bytes,
            max_edit_file_bytes: fs.max_edit_file_bytes,
            allow_outside_workspace: false,
            allow_read_outside_workspace: false,
            require_read_before_write: true,
        }
    }
}

/// `read` arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// Path to read, relative to the session workspace or absolute.
    pub file_path: String,
    /// 1-based first line to return. Defaults to 1.
    pub offset: Option<u64>,
    /// Maximum number of lines to return. Defaults to 2000.
    pub limit: Option<u64>,
}

/// One returned line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LineValue {
    /// 1-based line number.
    pub number: u64,
    /// Line text without its ending.
    pub text: String,
}

/// `read` output value (upstream shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadValue {
    /// Display path.
    pub path: String,
    /// 1-based first line requested.
    pub offset: u64,
    /// Returned lines.
    pub lines: Vec<LineValue>,
    /// Exact number of lines in the file.
    #[serde(rename = "totalLines")]
    pub total_lines: u64,
}

/// `write` arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// Path to write, relative to the session workspace or absolute.
    pub file_path: String,
    /// Full UTF-8 text content to write.
    pub content: String,
}

/// `write` output value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteValue {
    /// Display path.
    pub path: String,
    /// `create` or `update`.
    pub operation: String,
    /// LF text before (absent for a create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// LF text after.
    pub after: String,
}

/// `edit` arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// Path to edit, relative to the session workspace or absolute.
    pub file_path: String,
    /// Literal text to replace. Must match exactly (tabs and spaces included).
    pub old_string: String,
    /// Literal replacement text. Use an empty string to delete the match.
    pub new_string: String,
    /// Replace all matches. Defaults to false; when false, old_string must appear exactly once.
    pub replace_all: Option<bool>,
}

/// `edit` output value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditValue {
    /// Display path.
    pub path: String,
    /// LF text before.
    pub before: String,
    /// LF text after.
    pub after: String,
    /// Number of replaced spans.
    pub replacements: u64,
}

/// A typed tool failure for `e`: message = the error text, `info = {name: "FsError", code}`.
pub fn fs_failure(e: &FsError) -> ToolFailure {
    ToolFailure::typed(e.to_string(), "FsError", e.code())
}

/// The state the three tools share: settings, the filesystem service and the per-session
/// observations (read-before-write).
#[derive(Debug)]
pub struct Shared {
    cfg: FsToolsConfig,
    fs: Arc<FsService>,
    obs: Arc<Observations>,
}

impl Shared {
    /// Resolves a write target; see [`Shared::resolve_for`].
    fn resolve_write(
        &self,
        path: &str,
        ws: &Workspace,
        approved: bool,
    ) -> Result<dsh_fs::FsTarget, ToolFailure> {
        self.resolve_for(path, ws, Access::Write, approved)
    }

    /// Resolves a target for `access`: through the workspace fence, unless a person approved
    /// this very call (`approved`, see [`approved_call`]) — then a target outside the workspace
    /// is let through for this call only (a `read` as a `write`/`edit`).
    fn resolve_for(
        &self,
        path: &str,
        ws: &Workspace,
        access: Access,
        approved: bool,
    ) -> Result<dsh_fs::FsTarget, ToolFailure> {
        match self.fs.resolve(path, ws, access) {
            Err(FsError::OutsideWorkspace { .. }) if approved => self
                .fs
                .resolve_approved(path, ws, access)
                .map_err(|e| fs_failure(&e)),
            r => r.map_err(|e| fs_failure(&e)),
        }
    }

    /// `(owner, workspace)` of the call: the session's `cwd` (else this plugin's `workspace`
    /// setting, else the run's workspace root, else the process directory) for relative paths,
    /// fenced by the run's workspace root ([`Workspace::for_context`]).
    fn who(&self, cx: &ToolRunContext) -> Result<(String, Workspace), ToolFailure> {
        let caller = cx.exec.caller.as_ref();
        let owner = caller.map_or_else(String::new, |c| c.session_id.as_str().to_owned());
        let session_cwd = caller
            .and_then(|c| c.session.header().cwd.clone())
            .map(PathBuf::from);
        let fallback = self.cfg.workspace.as_deref();
        let ws = match caller {
            Some(c) => Workspace::for_context(&c.ctx, session_cwd.as_deref(), fallback),
            None => Workspace::for_session(None, None, fallback),
        }
        .map_err(|e| {
            fs_failure(&FsError::Io(format!(
                "cannot determine the workspace directory: {e}"
            )))
        })?;
        Ok((owner, ws))
    }
}

/// Takes the `allowed-once` grant of this call from the approval service, if a person approved
/// it (the permission preset asks before a read or write outside the workspace): true at most
/// once per call, so a later call is fenced again. See docs/tools.md ("File tools").
fn approved_call(cx: &ToolRunContext) -> bool {
    let Some(caller) = cx.exec.caller.as_ref() else {
        return false;
    };
    caller
        .ctx
        .get::<dsh_approval::ApprovalService>()
        .is_some_and(|a| a.take_grant(&caller.session_id, &cx.exec.call_id))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolFailure> + Send + 'static,
) -> Result<T, ToolFailure> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(fs_failure(&FsError::Io(format!(
            "filesystem task failed: {e}"
        )))),
    }
}

fn invalid(tool: &str, message: impl Into<String>) -> ToolFailure {
    ToolsError::InvalidArgs {
        tool: tool.to_owned(),
        message: message.into(),
    }
    .into()
}

/// Provides the service (unless present) and the observation store, registers the tools.
pub(crate) fn install(ctx: &Context, cfg: FsToolsConfig) -> Result<(), BoxError> {
    let full_access = cfg.permission_mode.as_deref() == Some("danger-full-access");
    let fs = match ctx.get::<FsService>() {
        Some(fs) => fs,
        None => {
            let fs = Arc::new(FsService::new(FsConfig {
                max_read_file_bytes: cfg.max_read_file_bytes,
                max_edit_file_bytes: cfg.max_edit_file_bytes,
                allow_outside_workspace: cfg.allow_outside_workspace || full_access,
                allow_read_outside_workspace: cfg.allow_read_outside_workspace || full_access,
            }));
            ctx.provide(fs.clone())?.detach();
            fs
        }
    };
    let obs = match ctx.get::<Observations>() {
        Some(o) => o,
        None => {
            let o = Arc::new(Observations::new());
            ctx.provide(o.clone())?.detach();
            o
        }
    };
    // a disposed session's observations are dropped (bounded memory over many sessions)
    let forget = obs.clone();
    ctx.on_emit::<dsh_session::SessionDisposed>(move |n| forget.forget_owner(n.session.id()))?
        .detach();
    let shared = Arc::new(Shared { cfg, fs, obs });
    dsh_tools::register(ctx, Read(shared.clone()))?;
    dsh_tools::register(ctx, Write(shared.clone()))?;
    dsh_tools::register(ctx, Edit(shared))?;
    Ok(())
}

/// The `read` tool (read-only, parallel-safe, target `file_path`).
#[derive(Debug, Clone)]
pub struct Read(pub Arc<Shared>);

impl Tool for Read {
    const NAME: &'static str = "read";
    type Args = ReadArgs;
    type Output = ReadValue;

    fn description(&self) -> String {
        "Read a UTF-8 text file and return line-numbered content.".to_owned()
    }

    fn effects(&self) -> ToolEffects {
        // The target lets the permission preset ask before a read outside the workspace.
        ToolEffects::READ_ONLY.parallel_safe().target("file_path")
    }

    async fn call(&self, args: ReadArgs, cx: ToolRunContext) -> Result<ReadValue, ToolFailure> {
        let sh = self.0.clone();
        let limit_cap = sh.cfg.read_limit;
        if args.file_path.trim().is_empty() {
            return Err(invalid("read", "file_path must be a non-empty string"));
        }
        let offset = args.offset.unwrap_or(1);
        let limit = args.limit.unwrap_or(limit_cap as u64);
        if offset < 1 {
            return Err(invalid("read", "offset must be a positive integer"));
        }
        if limit < 1 {
            return Err(invalid("read", "limit must be a positive integer"));
        }
        if limit > limit_cap as u64 {
            return Err(invalid(
                "read",
                format!("limit must be less than or equal to {limit_cap}"),
            ));
        }
        let (owner, ws) = sh.who(&cx)?;
        let signal = cx.signal.clone();
        let approved = approved_call(&cx);
        blocking(move || {
            let t = sh.resolve_for(&args.file_path, &ws, Access::Read, approved)?;
            let caps = WindowCaps {
                offset: offset as usize,
                limit: limit as usize,
                max_line_chars: sh.cfg.read_max_line_length,
                max_bytes: sh.cfg.read_max_bytes,
            };
            match sh.fs.read_text_with(&t, caps, &signal) {
                Ok(out) => {
                    sh.obs
                        .record(&owner, &t, Observation::Present(out.observed.clone()));
                    Ok(ReadValue {
                        path: t.display_path.clone(),
                        offset,
                        lines: out
                            .window
                            .lines
                            .into_iter()
                            .map(|l| LineValue {
                                number: l.number as u64,
                                text: l.text,
                            })
                            .collect(),
                        total_lines: out.window.total_lines as u64,
                    })
                }
                Err(e) => {
                    if matches!(sh.fs.stat(&t), Ok(None)) {
                        sh.obs.record(&owner, &t, Observation::Absent);
                    }
                    Err(fs_failure(&e))
                }
            }
        })
        .await
    }

    fn render(&self, args: &ReadArgs, v: &ReadValue) -> Vec<ContentBlock> {
        let limit = args.limit.map_or(self.0.cfg.read_limit, |l| l as usize);
        let end = v
            .lines
            .last()
            .map_or(v.offset.saturating_sub(1), |l| l.number);
        let window = text::ReadWindow {
            offset: v.offset as usize,
            lines: v
                .lines
                .iter()
                .map(|l| text::WindowLine {
                    number: l.number as usize,
                    text: l.text.clone(),
                })
                .collect(),
            total_lines: v.total_lines as usize,
            truncated_by_bytes: v.lines.len() < limit && end < v.total_lines,
        };
        vec![ContentBlock::text(text::format_read(&v.path, &window))]
    }

    fn meta(&self, _args: &ReadArgs, v: &ReadValue) -> Option<serde_json::Value> {
        let mut meta = json!({
            "path": v.path,
            "offset": v.offset,
            "lines": v.lines.iter().map(|l| json!({"number": l.number, "text": l.text})).collect::<Vec<_>>(),
            "totalLines": v.total_lines,
        });
        if let (Some(lang), Some(m)) = (lang_from_path(&v.path), meta.as_object_mut()) {
            m.insert("lang".into(), json!(lang));
        }
        Some(meta)
    }

    fn present_call(&self, a: &ReadArgs) -> Option<serde_json::Value> {
        let window = match (a.offset, a.limit) {
            (o, Some(l)) if l > 0 => {
                let o = o.unwrap_or(1);
                format!(" ({o} - {})", o + l - 1)
            }
            (Some(o), _) => format!(" (from line {o})"),
            _ => String::new(),
        };
        Some(json!({
            "card": "generic",
            "title": format!("Read {}{window}", a.file_path),
            "kind": "read",
            "locations": [{"path": a.file_path, "line": a.offset.unwrap_or(1)}],
        }))
    }
}

/// The `write` tool (writes files, target `file_path`, exclusive).
#[derive(Debug, Clone)]
pub struct Write(pub Arc<Shared>);

impl Tool for Write {
    const NAME: &'static str = "write";
    type Args = WriteArgs;
    type Output = WriteValue;

    fn description(&self) -> String {
        "Create or fully replace a UTF-8 text file.".to_owned()
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::WRITES_FILES.target("file_path")
    }

    async fn call(&self, args: WriteArgs, cx: ToolRunContext) -> Result<WriteValue, ToolFailure> {
        let sh = self.0.clone();
        if args.file_path.trim().is_empty() {
            return Err(invalid("write", "file_path must be a non-empty string"));
        }
        let (owner, ws) = sh.who(&cx)?;
        let approved = approved_call(&cx);
        blocking(move || {
            let t = sh.resolve_write(&args.file_path, &ws, approved)?;
            let intent = if sh.cfg.require_read_before_write {
                sh.obs.write_intent(&owner, &t)
            } else {
                WriteIntent::Unconditional
            };
            let out = sh
                .fs
                .write_text(&t, &args.content, &intent)
                .map_err(|e| fs_failure(&e))?;
            sh.obs.record(
                &owner,
                &t,
                Observation::Present(Observed {
                    version: out.version.clone(),
                    snapshot: snapshot(&out.after),
                }),
            );
            Ok(WriteValue {
                path: t.display_path.clone(),
                operation: out.operation.as_str().to_owned(),
                before: out.before,
                after: out.after,
            })
        })
        .await
    }

    fn render(&self, _args: &WriteArgs, v: &WriteValue) -> Vec<ContentBlock> {
        let verb = if v.operation == "create" {
            "Created"
        } else {
            "Updated"
        };
        vec![ContentBlock::text(format!(
            "<path>{}</path>\n<type>file</type>\n<content>\n{verb} file\n</content>",
            v.path
        ))]
    }

    fn meta(&self, _args: &WriteArgs, v: &WriteValue) -> Option<serde_json::Value> {
        let diff = v
            .before
            .as_deref()
            .map(|b| text::unified_diff(&v.path, b, &v.after))
            .unwrap_or_default();
        if diff.len() <= WRITE_DIFF_MAX_BYTES {
            return Some(json!({"path": v.path, "operation": v.operation, "diff": diff}));
        }
        let (added, removed) = diff_line_counts(&diff);
        Some(json!({
            "path": v.path,
            "operation": v.operation,
            "diffStat": {"addedLines": added, "removedLines": removed, "diffBytes": diff.len()},
        }))
    }

    fn present_call(&self, a: &WriteArgs) -> Option<serde_json::Value> {
        Some(json!({
            "card": "diff",
            "title": format!("Write {}", a.file_path),
            "diffs": [{"path": a.file_path, "oldText": null, "newText": a.content}],
            "locations": [{"path": a.file_path}],
        }))
    }
}

/// The largest unified diff (bytes) a `write`'s `meta.diff` stores. A larger diff — a file
/// replaced by very different text — would be one more copy of the content in the session log
/// (the `tool/call` arguments hold the new text already), so the meta holds its
/// `diffStat {addedLines, removedLines, diffBytes}` instead. A dsh rule; upstream stores a
/// `diffs` list (docs/tools.md, "File tools").
pub const WRITE_DIFF_MAX_BYTES: usize = 8 * 1024;

/// `(added, removed)` lines of a [`text::unified_diff`]: its `+`/`-` lines after the two header
/// lines (`--- a/…`, `+++ b/…`, which only open the diff).
fn diff_line_counts(diff: &str) -> (usize, usize) {
    diff.lines()
        .skip(2)
        .fold((0, 0), |(a, r), l| match l.as_bytes().first() {
            Some(b'+') => (a + 1, r),
            Some(b'-') => (a, r + 1),
            _ => (a, r),
        })
}

fn snapshot(lf: &str) -> Option<Arc<str>> {
    (lf.len() as u64 <= dsh_fs::SNAPSHOT_MAX_BYTES).then(|| Arc::from(lf))
}

/// The `edit` tool (writes files, target `file_path`, exclusive).
#[derive(Debug, Clone)]
pub struct Edit(pub Arc<Shared>);

impl Tool for Edit {
    const NAME: &'static str = "edit";
    type Args = EditArgs;
    type Output = EditValue;

    fn description(&self) -> String {
        "Edit an existing UTF-8 text file by replacing literal text.".to_owned()
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::WRITES_FILES.target("file_path")
    }

    async fn call(&self, args: EditArgs, cx: ToolRunContext) -> Result<EditValue, ToolFailure> {
        let sh = self.0.clone();
        if args.file_path.trim().is_empty() {
            return Err(invalid("edit", "file_path must be a non-empty string"));
        }
        let (owner, ws) = sh.who(&cx)?;
        let approved = approved_call(&cx);
        blocking(move || {
            let t = sh.resolve_write(&args.file_path, &ws, approved)?;
            let guard = if sh.cfg.require_read_before_write {
                Some(sh.obs.edit_guard(&owner, &t).map_err(|e| fs_failure(&e))?)
            } else {
                None
            };
            let req = EditRequest {
                old_string: args.old_string,
                new_string: args.new_string,
                replace_all: args.replace_all.unwrap_or(false),
            };
            let out = sh
                .fs
                .edit_text(&t, &req, guard.as_ref())
                .map_err(|e| fs_failure(&e))?;
            sh.obs.record(
                &owner,
                &t,
                Observation::Present(Observed {
                    version: out.version.clone(),
                    snapshot: snapshot(&out.after),
                }),
            );
            Ok(EditValue {
                path: t.display_path.clone(),
                before: out.before,
                after: out.after,
                replacements: out.replacements as u64,
            })
        })
        .await
    }

    fn render(&self, args: &EditArgs, v: &EditValue) -> Vec<ContentBlock> {
        let text = if args.replace_all.unwrap_or(false) {
            format!(
                "The file {} has been updated. All {} occurrences were successfully replaced.",
                v.path, v.replacements
            )
        } else {
            format!("The file {} has been updated successfully.", v.path)
        };
        vec![ContentBlock::text(text)]
    }

    fn meta(&self, _args: &EditArgs, v: &EditValue) -> Option<serde_json::Value> {
        Some(json!({
            "path": v.path,
            "replacements": v.replacements,
            "diff": text::unified_diff(&v.path, &v.before, &v.after),
        }))
    }

    fn present_call(&self, a: &EditArgs) -> Option<serde_json::Value> {
        let old = if a.old_string.is_empty() {
            serde_json::Value::Null
        } else {
            json!(a.old_string)
        };
        Some(json!({
            "card": "diff",
            "title": format!("Edit {}", a.file_path),
            "diffs": [{"path": a.file_path, "oldText": old, "newText": a.new_string}],
            "locations": [{"path": a.file_path}],
        }))
    }
}

/// Syntax-highlighting hint from a path's extension (upstream `langFromPath`, same table);
/// `None` for dotfiles and unknown extensions.
pub fn lang_from_path(path: &str) -> Option<&'static str> {
    let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let dot = base.rfind('.')?;
    if dot == 0 {
        return None;
    }
    let ext = base[dot + 1..].to_ascii_lowercase();
    Some(match ext.as_str() {
        "ts" | "mts" | "cts" => "ts",
        "tsx" => "tsx",
        "js" | "mjs" | "cjs" => "js",
        "jsx" => "jsx",
        "json" | "jsonc" => "json",
        "py" => "py",
        "rb" => "rb",
        "go" => "go",
        "rs" => "rs",
        "java" => "java",
        "c" | "h" => "c",
        "cc" | "cpp" | "hpp" | "cxx" => "cpp",
        "cs" => "cs",
        "kt" => "kotlin",
        "swift" => "swift",
        "php" => "php",
        "sh" | "bash" | "zsh" => "sh",
        "yaml" | "yml" => "yaml",
        "toml" => "toml",
        "ini" => "ini",
        "md" | "markdown" => "md",
        "mdx" => "mdx",
        "html" | "htm" => "html",
        "css" => "css",
        "scss" => "scss",
        "less" => "less",
        "sql" => "sql",
        "xml" => "xml",
        "lua" => "lua",
        _ => return None,
    })
}
