//! dsh-hooks: Claude Code and Codex command hooks, run unchanged.
//!
//! The protocol both hook dialects share, and the bridge the two hook plugins
//! (`dsh-hooks-claude-code`, `dsh-hooks-codex`) install:
//! - [`config`]: hook files (a settings file with a `hooks` key, or the bare map), read once;
//!   a file that does not parse or holds a bad matcher registers nothing;
//! - [`matcher`]: which tool names / session-start sources a group applies to;
//! - [`payload`]: the JSON a hook reads on stdin, with Claude Code's field names (`session_id`,
//!   `transcript_path`, `cwd`, `hook_event_name`, `tool_name`, `tool_input`, `tool_response`, …);
//! - [`runner`]: one hook through the process executor (`dsh-process`): own process group,
//!   timeout (the hook's, else 10 minutes), the turn's cancel signal, scrubbed environment;
//! - [`output`]: exit code 2, exactly one JSON object, `hookSpecificOutput`, and merging with
//!   deny > ask > allow;
//! - [`bridge`]: SessionStart, UserPromptSubmit, PreToolUse, PostToolUse and Stop on the loop's
//!   and the tool pipeline's extension points, the durable `hook/invoked` / `hook/result`
//!   records (upstream's log-only types, known to the session's catalog), the Stop guard, and
//!   [`HookNotice`] for what the user should see;
//! - [`records`]: the typed `hook/invoked` / `hook/result` declarations;
//! - [`settings`]: the `[hooks]` settings of both plugins and the files they read.
//!
//! Behaviour notes: docs/upstream/hooks.md.

pub mod bridge;
pub mod config;
mod error;
pub mod matcher;
pub mod output;
pub mod payload;
pub mod records;
pub mod runner;
pub mod settings;

pub use bridge::{
    BridgeConfig, HookNotice, HookNoticePayload, HookSet, POST_TOOL_FALLBACK, PRE_TOOL_FALLBACK,
    STOP_FALLBACK, install,
};
pub use config::{Dialect, HookCommand, HookEvent};
pub use error::HooksError;
pub use settings::{ClaudeCodeSettings, CodexSettings, DEFAULT_MAX_STOP_BLOCKS};

use std::path::{Path, PathBuf};

use dsh_kernel::{BoxError, Context, Settings};

/// Where relative paths of `<plugin_id> <key>` resolve: the directory of the settings file
/// that set the key (run fact `setting_origins`), else `launch` (`-c`, the command line).
fn base_dir(s: &Settings, plugin_id: &str, key: &str, launch: &Path) -> PathBuf {
    s.fact("setting_origins")
        .and_then(|o| o.get(format!("{plugin_id} {key}")))
        .and_then(serde_json::Value::as_str)
        .map(Path::new)
        .filter(|p| p.is_absolute())
        .and_then(Path::parent)
        .map_or_else(|| launch.to_path_buf(), Path::to_path_buf)
}

fn facts(s: &Settings) -> (PathBuf, PathBuf, Option<PathBuf>) {
    let workspace = s
        .fact_str("workspace")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("/"));
    let launch = s
        .fact_str("launch_dir")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.clone());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    (workspace, launch, home)
}

fn section<T: serde::de::DeserializeOwned + Default>(
    s: &Settings,
    plugin_id: &str,
) -> Result<T, BoxError> {
    match s.section(plugin_id) {
        Some(v) => Ok(serde_json::from_value(v.clone())
            .map_err(|e| format!("settings of {plugin_id}: {e}"))?),
        None => Ok(T::default()),
    }
}

/// The Claude Code bridge's configuration from `settings` (section `plugin_id`,
/// [`ClaudeCodeSettings`], and the `workspace` / `launch_dir` / `setting_origins` run facts;
/// `$HOME` for `~/` and discovery). Relative hook paths resolve against the directory of the
/// settings file that named them, or the launch directory for `-c` and command-line values.
///
/// # Errors
/// An ill-typed settings section.
pub fn claude_code_config(settings: &Settings, plugin_id: &str) -> Result<BridgeConfig, BoxError> {
    let s: ClaudeCodeSettings = section(settings, plugin_id)?;
    let (workspace, launch, home) = facts(settings);
    let base = base_dir(settings, plugin_id, "claude_code", &launch);
    let files = settings::claude_code_files(&s, &base, &workspace, home.as_deref());
    let mut config = BridgeConfig::new(Dialect::ClaudeCode, files, workspace);
    config.max_stop_blocks = s.max_stop_blocks.unwrap_or(DEFAULT_MAX_STOP_BLOCKS);
    Ok(config)
}

/// The Codex bridge's configuration from `settings` ([`CodexSettings`]).
///
/// # Errors
/// An ill-typed settings section.
pub fn codex_config(settings: &Settings, plugin_id: &str) -> Result<BridgeConfig, BoxError> {
    let s: CodexSettings = section(settings, plugin_id)?;
    let (workspace, launch, home) = facts(settings);
    let base = base_dir(settings, plugin_id, "codex", &launch);
    let files = settings::codex_files(&s, &base, home.as_deref());
    let mut config = BridgeConfig::new(Dialect::Codex, files, workspace);
    config.max_stop_blocks = s.max_stop_blocks.unwrap_or(DEFAULT_MAX_STOP_BLOCKS);
    Ok(config)
}

/// The `start` hook of `dsh-hooks-claude-code`: [`claude_code_config`] from the booted
/// settings, then [`install`] under `ctx`.
///
/// # Errors
/// As [`claude_code_config`] and [`install`].
pub fn start_claude_code(ctx: &Context, plugin_id: &str) -> Result<(), BoxError> {
    install(ctx, claude_code_config(&ctx.settings(), plugin_id)?)?;
    Ok(())
}

/// The `start` hook of `dsh-hooks-codex` ([`codex_config`], then [`install`]).
///
/// # Errors
/// As [`codex_config`] and [`install`].
pub fn start_codex(ctx: &Context, plugin_id: &str) -> Result<(), BoxError> {
    install(ctx, codex_config(&ctx.settings(), plugin_id)?)?;
    Ok(())
}

/// The hooks `config` loads (what [`install`] would put in force; for `dsh hooks list`
/// without booting).
pub fn load_set(config: &BridgeConfig) -> HookSet {
    HookSet::load(
        config.dialect,
        &config.files,
        &config::Substitutions { plugin_root: None },
    )
}
