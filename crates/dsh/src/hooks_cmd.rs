//! `dsh hooks list`: the command hooks in force (Claude Code and Codex dialects), with their
//! source file, entry and matcher; and, for every run that boots the harness, the hook lines on
//! stderr: files refused at boot (once, with the file and the entry) and the bridges' notices
//! (`  ! hook: …`: a hook that failed or timed out, output that is not one JSON object, a
//! blocked prompt, the Stop guard). See docs/upstream/hooks.md.

use std::io::Write as _;
use std::sync::Arc;

use anyhow::Result;
use clap::Subcommand;
use dsh_hooks::{Dialect, HookNotice, HookSet};
use dsh_kernel::{Kernel, ListenOptions, Registration};
use serde_json::json;

use crate::settings::Config;

/// `dsh hooks …`.
#[derive(Subcommand, Debug)]
pub enum HooksCommand {
    /// The hooks in force: dialect, event, matcher, timeout, command, source file and entry;
    /// then the files refused (none of their hooks run) and the entries skipped.
    List {
        /// One JSON object: `{hooks: [{dialect, event, matcher, timeoutMs, command, file,
        /// entry}], refused: [{file, entry, message}], skipped: [text]}`.
        #[arg(long)]
        json: bool,
    },
}

/// The hook sets the booted bridges provide, Claude Code first.
fn sets(kernel: &Kernel) -> Vec<Arc<HookSet>> {
    [Dialect::ClaudeCode, Dialect::Codex]
        .iter()
        .filter_map(|d| kernel.root().get_named::<HookSet>(d.as_str()))
        .collect()
}

/// Runs `dsh hooks …`: boots the plugins of `config` (a plugin that fails to start is logged,
/// as for the session commands; no provider is needed) and prints what the hook bridges loaded.
///
/// # Errors
/// The settings service cannot be provided; stdout cannot be written.
pub async fn run(config: &Config, cmd: HooksCommand) -> Result<i32> {
    let HooksCommand::List { json: as_json } = cmd;
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(config.kernel_settings()))
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .detach();
    if let Err(e) = kernel.boot_with(&config.plugins).await {
        tracing::warn!(error = %e, "some plugins failed to start; listing the hooks of the others");
    }
    let sets = sets(&kernel);
    let mut out = std::io::stdout().lock();
    if as_json {
        let hooks: Vec<_> = sets
            .iter()
            .flat_map(|s| {
                s.hooks.iter().map(|h| {
                    json!({
                        "dialect": s.dialect.as_str(),
                        "event": h.event.as_str(),
                        "matcher": h.matcher.as_ref().map(|m| m.source()),
                        "timeoutMs": h.timeout_ms,
                        "command": h.command,
                        "file": h.source.display().to_string(),
                        "entry": h.entry,
                    })
                })
            })
            .collect();
        let refused: Vec<_> = sets
            .iter()
            .flat_map(|s| s.problems.iter())
            .map(|p| match p {
                dsh_hooks::HooksError::File {
                    file,
                    entry,
                    message,
                } => json!({"file": file, "entry": entry, "message": message}),
                other => json!({"message": other.to_string()}),
            })
            .collect();
        let skipped: Vec<_> = sets.iter().flat_map(|s| s.warnings.iter()).collect();
        let _ = writeln!(
            out,
            "{}",
            json!({"hooks": hooks, "refused": refused, "skipped": skipped})
        );
    } else {
        let mut any = false;
        for s in &sets {
            for h in &s.hooks {
                any = true;
                let timeout = h.timeout_ms.map_or_else(
                    || "default timeout".to_owned(),
                    |t| format!("timeout {t} ms"),
                );
                let _ = writeln!(
                    out,
                    "{} {} [{}] {timeout}: {}\n    from {} ({})",
                    s.dialect.as_str(),
                    h.event.as_str(),
                    h.matcher.as_ref().map_or("*", |m| m.source()),
                    h.command,
                    h.source.display(),
                    h.entry
                );
            }
        }
        if !any {
            let _ = writeln!(out, "no hooks in force");
        }
        for s in &sets {
            for p in &s.problems {
                let _ = writeln!(out, "refused: {p} (none of its hooks run)");
            }
            for w in &s.warnings {
                let _ = writeln!(out, "skipped: {w}");
            }
        }
    }
    kernel.dispose().await;
    Ok(0)
}

/// After boot: prints each refused hook file once on stderr (`warning: hooks: <file>: <entry>:
/// <why>; none of its hooks run`) and every skipped entry, and prints the bridges' notices
/// (`  ! hook: <text>`) for as long as the returned registration lives.
///
/// # Errors
/// The kernel refused the listener (root disposed).
pub fn attach(kernel: &Kernel) -> Result<Registration> {
    let mut err = std::io::stderr().lock();
    for s in sets(kernel) {
        for p in &s.problems {
            let _ = writeln!(err, "warning: hooks: {p}; none of its hooks run");
        }
        for w in &s.warnings {
            let _ = writeln!(err, "warning: hooks: {w}");
        }
    }
    kernel
        .root()
        .on_emit_with::<HookNotice>(ListenOptions::global(), |n| {
            let _ = writeln!(std::io::stderr().lock(), "  ! hook: {}", n.text);
        })
        .map_err(|e| anyhow::anyhow!("{e}"))
}
