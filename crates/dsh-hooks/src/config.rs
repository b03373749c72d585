//! Hook files: the Claude Code / Codex JSON shape, read once when a bridge starts.
//!
//! A file is either a settings file with a top-level `hooks` object or the bare map:
//! `{"<Event>": [{"matcher"?: string, "hooks": [{"type"?: "command", "command": string,
//! "timeout"?: seconds}]}]}`. Events the dialect does not support are ignored; entries of a
//! type other than `command` (and, in Codex, `async: true` entries) are skipped with a warning;
//! entries without a string `command`, groups without a `hooks` array and groups left empty are
//! dropped. A file that does not parse, has the wrong shape or holds a matcher that does not
//! compile registers none of its hooks ([`HooksError::File`] names the file and the entry).
//! See docs/upstream/hooks.md ("Configuration").

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::HooksError;
use crate::matcher::Matcher;

/// Which hook dialect a file is read in (and which bridge runs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// Claude Code (`dialect: "claude-code"` in the records).
    ClaudeCode,
    /// Codex (`dialect: "codex"`).
    Codex,
}

impl Dialect {
    /// The record name: `claude-code` or `codex` (also the handler-id prefix).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
        }
    }

    /// The `plugin` of the messages the bridge injects (`hooks-claude-code` / `hooks-codex`,
    /// as upstream records them).
    pub fn message_plugin(self) -> &'static str {
        match self {
            Self::ClaudeCode => "hooks-claude-code",
            Self::Codex => "hooks-codex",
        }
    }

    /// The events this dialect supports, in upstream order.
    pub fn events(self) -> &'static [HookEvent] {
        match self {
            Self::ClaudeCode => &[
                HookEvent::SessionStart,
                HookEvent::UserPromptSubmit,
                HookEvent::PreToolUse,
                HookEvent::PostToolUse,
                HookEvent::Stop,
                HookEvent::SubagentStart,
                HookEvent::SubagentStop,
            ],
            Self::Codex => &[
                HookEvent::PreToolUse,
                HookEvent::PostToolUse,
                HookEvent::SessionStart,
                HookEvent::UserPromptSubmit,
                HookEvent::Stop,
            ],
        }
    }
}

/// A hook event (the `hook_event_name` a hook receives, and the record's `point`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookEvent {
    /// An agent's session began (startup, resume, clear, compact). Matcher subject: the source.
    SessionStart,
    /// A user prompt is about to enter a step. No matcher.
    UserPromptSubmit,
    /// Before a tool call is allowed. Matcher subject: the tool name.
    PreToolUse,
    /// After a tool call produced its result. Matcher subject: the tool name.
    PostToolUse,
    /// The turn is about to end. No matcher.
    Stop,
    /// A subagent started (Claude Code; parsed, not bridged: dsh has no subagents yet).
    SubagentStart,
    /// A subagent ended (Claude Code; parsed, not bridged).
    SubagentStop,
}

impl HookEvent {
    /// The event's name as hook files and payloads spell it (`PreToolUse`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionStart => "SessionStart",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::Stop => "Stop",
            Self::SubagentStart => "SubagentStart",
            Self::SubagentStop => "SubagentStop",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "SessionStart" => Self::SessionStart,
            "UserPromptSubmit" => Self::UserPromptSubmit,
            "PreToolUse" => Self::PreToolUse,
            "PostToolUse" => Self::PostToolUse,
            "Stop" => Self::Stop,
            "SubagentStart" => Self::SubagentStart,
            "SubagentStop" => Self::SubagentStop,
            _ => return None,
        })
    }

    /// Whether a group's `matcher` is read for this event (it is discarded, and so never
    /// validated, for `UserPromptSubmit` and `Stop`).
    pub fn uses_matcher(self) -> bool {
        !matches!(self, Self::UserPromptSubmit | Self::Stop)
    }
}

/// One command hook of a file.
#[derive(Debug, Clone)]
pub struct HookCommand {
    /// The event it runs on.
    pub event: HookEvent,
    /// Its group's matcher (`None` = every subject).
    pub matcher: Option<Matcher>,
    /// The command line, run as `bash -c <command>` (after `${CLAUDE_PLUGIN_ROOT}` substitution
    /// in the Claude Code dialect; `${CLAUDE_PROJECT_DIR}` is left to bash).
    pub command: String,
    /// The hook's own timeout in milliseconds (`timeout` seconds × 1000; Codex also reads
    /// `timeoutSec`); `None` = the bridge's default (10 minutes).
    pub timeout_ms: Option<u64>,
    /// The file it came from.
    pub source: PathBuf,
    /// Where in the file: `hooks.<Event>[<group>].hooks[<entry>]`.
    pub entry: String,
}

/// The hooks of one parsed file and what was skipped in it.
#[derive(Debug, Clone, Default)]
pub struct LoadedFile {
    /// The command hooks, in file order (events in the order the file lists them).
    pub hooks: Vec<HookCommand>,
    /// Entries skipped with a warning (`<entry>: <why>`), e.g. a `type: "http"` hook.
    pub warnings: Vec<String>,
}

/// Where `${CLAUDE_PLUGIN_ROOT}` points in Claude Code command strings (a literal substitution
/// at parse time; `None` leaves the placeholder as written). `${CLAUDE_PROJECT_DIR}` is never
/// substituted: the hook's `bash` expands it from the environment variable of that name, so a
/// directory name with quotes or `$(…)` cannot inject commands (docs/upstream/hooks.md,
/// "Configuration").
#[derive(Debug, Clone, Default)]
pub struct Substitutions {
    /// The plugin root.
    pub plugin_root: Option<String>,
}

/// Reads and parses the hook file at `path` in `dialect`.
///
/// # Errors
/// [`HooksError::File`] when the file cannot be read, is not JSON, has the wrong shape, or a
/// matcher does not compile; the error names the file and the entry.
pub fn load_file(
    path: &Path,
    dialect: Dialect,
    subst: &Substitutions,
) -> Result<LoadedFile, HooksError> {
    let text = std::fs::read_to_string(path).map_err(|e| HooksError::File {
        file: path.display().to_string(),
        entry: String::new(),
        message: format!("cannot read it: {e}"),
    })?;
    parse(&text, path, dialect, subst)
}

/// Parses hook-file `text` (read from `path`) in `dialect`. See the module docs for the shape.
///
/// # Errors
/// As [`load_file`].
pub fn parse(
    text: &str,
    path: &Path,
    dialect: Dialect,
    subst: &Substitutions,
) -> Result<LoadedFile, HooksError> {
    let file = path.display().to_string();
    let bad = |entry: &str, message: String| HooksError::File {
        file: file.clone(),
        entry: entry.to_owned(),
        message,
    };
    let root: Value =
        serde_json::from_str(text).map_err(|e| bad("", format!("not valid JSON: {e}")))?;
    let Value::Object(root) = root else {
        return Err(bad("", "expected a JSON object".to_owned()));
    };
    let map = match root.get("hooks") {
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(bad("hooks", "expected an object of events".to_owned())),
        None => root,
    };
    let mut out = LoadedFile::default();
    for (name, groups) in &map {
        let Some(event) = HookEvent::from_name(name) else {
            continue;
        };
        if !dialect.events().contains(&event) {
            continue;
        }
        let Value::Array(groups) = groups else {
            return Err(bad(
                &format!("hooks.{name}"),
                "expected an array of matcher groups".to_owned(),
            ));
        };
        for (gi, group) in groups.iter().enumerate() {
            let gpath = format!("hooks.{name}[{gi}]");
            let Value::Object(group) = group else {
                return Err(bad(&gpath, "expected a matcher group object".to_owned()));
            };
            let Some(Value::Array(entries)) = group.get("hooks") else {
                continue;
            };
            let matcher = match (event.uses_matcher(), group.get("matcher")) {
                (true, Some(Value::String(m))) => Some(
                    Matcher::compile(m, dialect)
                        .map_err(|e| bad(&format!("{gpath}.matcher"), e))?,
                ),
                (true, Some(Value::Null) | None) | (false, _) => None,
                (true, Some(_)) => {
                    return Err(bad(
                        &format!("{gpath}.matcher"),
                        "expected a string".to_owned(),
                    ));
                }
            };
            for (hi, entry) in entries.iter().enumerate() {
                let epath = format!("{gpath}.hooks[{hi}]");
                let Value::Object(entry) = entry else {
                    continue;
                };
                match entry.get("type").and_then(Value::as_str) {
                    None | Some("command") => {}
                    Some(other) => {
                        out.warnings.push(format!(
                            "{epath}: hooks of type \"{other}\" are not supported; skipped"
                        ));
                        continue;
                    }
                }
                if dialect == Dialect::Codex && entry.get("async") == Some(&Value::Bool(true)) {
                    out.warnings
                        .push(format!("{epath}: async hooks are not supported; skipped"));
                    continue;
                }
                let Some(command) = entry.get("command").and_then(Value::as_str) else {
                    continue;
                };
                let timeout = entry.get("timeout").or_else(|| match dialect {
                    Dialect::Codex => entry.get("timeoutSec"),
                    Dialect::ClaudeCode => None,
                });
                let timeout_ms = match timeout {
                    None | Some(Value::Null) => None,
                    Some(v) => match v.as_f64() {
                        Some(s) if s.is_finite() && s > 0.0 => {
                            // Saturating: a huge timeout is "practically none", never a panic.
                            Some((s * 1000.0).min(u64::MAX as f64) as u64)
                        }
                        _ => {
                            return Err(bad(
                                &format!("{epath}.timeout"),
                                "expected a positive number of seconds".to_owned(),
                            ));
                        }
                    },
                };
                let command = match dialect {
                    Dialect::ClaudeCode => substitute(command, subst),
                    Dialect::Codex => command.to_owned(),
                };
                out.hooks.push(HookCommand {
                    event,
                    matcher: matcher.clone(),
                    command,
                    timeout_ms,
                    source: path.to_path_buf(),
                    entry: epath,
                });
            }
        }
    }
    Ok(out)
}

fn substitute(command: &str, subst: &Substitutions) -> String {
    let mut s = command.to_owned();
    if let Some(root) = &subst.plugin_root {
        s = s.replace("${CLAUDE_PLUGIN_ROOT}", root);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_cc(text: &str) -> Result<LoadedFile, HooksError> {
        parse(
            text,
            Path::new("/p/hooks.json"),
            Dialect::ClaudeCode,
            &Substitutions { plugin_root: None },
        )
    }

    #[test]
    fn settings_file_and_bare_map_read_the_same() {
        let bare = r#"{"PreToolUse":[{"matcher":"bash","hooks":[{"type":"command","command":"a","timeout":2}]}]}"#;
        let wrapped = format!(r#"{{"model":"x","hooks":{bare}}}"#);
        for text in [bare, wrapped.as_str()] {
            let f = parse_cc(text).unwrap();
            assert_eq!(f.hooks.len(), 1);
            let h = &f.hooks[0];
            assert_eq!(h.event, HookEvent::PreToolUse);
            assert_eq!(h.command, "a");
            assert_eq!(h.timeout_ms, Some(2000));
            assert_eq!(h.entry, "hooks.PreToolUse[0].hooks[0]");
            assert_eq!(h.matcher.as_ref().unwrap().source(), "bash");
        }
    }

    #[test]
    fn skips_and_drops_as_upstream() {
        let f = parse_cc(
            r#"{"hooks":{
              "Notification":[{"hooks":[{"command":"n"}]}],
              "Stop":[{"matcher":"((","hooks":[{"command":"s"},{"type":"http","url":"x"},{"command":7}]}],
              "PostToolUse":[{"matcher":"edit"},{"hooks":[]},{"hooks":[{"command":"${CLAUDE_PROJECT_DIR}/lint.sh"}]}]
            }}"#,
        )
        .unwrap();
        let got: Vec<(&str, &str, bool)> = f
            .hooks
            .iter()
            .map(|h| (h.event.as_str(), h.command.as_str(), h.matcher.is_some()))
            .collect();
        // Stop's matcher is discarded (never compiled); the post-tool group has no matcher.
        assert_eq!(
            got,
            vec![
                ("Stop", "s", false),
                // Left to bash, which expands the environment variable.
                ("PostToolUse", "${CLAUDE_PROJECT_DIR}/lint.sh", false)
            ]
        );
        assert_eq!(
            f.warnings,
            vec![
                "hooks.Stop[0].hooks[1]: hooks of type \"http\" are not supported; skipped"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn a_bad_matcher_or_shape_fails_the_whole_file() {
        let e = parse_cc(
            r#"{"hooks":{"PreToolUse":[{"matcher":"bash","hooks":[{"command":"ok"}]},{"matcher":"[unclosed","hooks":[{"command":"x"}]}]}}"#,
        )
        .unwrap_err();
        let HooksError::File { file, entry, .. } = &e;
        assert_eq!(file, "/p/hooks.json");
        assert_eq!(entry, "hooks.PreToolUse[1].matcher");
        let e = parse_cc("{not json").unwrap_err();
        assert!(
            e.to_string().starts_with("/p/hooks.json: not valid JSON"),
            "{e}"
        );
        let e = parse_cc(r#"{"hooks":{"Stop":{}}}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/p/hooks.json: hooks.Stop: expected an array of matcher groups"
        );
    }

    #[test]
    fn codex_reads_timeout_sec_and_skips_async() {
        let f = parse(
            r#"{"hooks":{"PreToolUse":[{"hooks":[{"command":"a","timeoutSec":3},{"command":"b","async":true}]}],"SubagentStart":[{"hooks":[{"command":"c"}]}]}}"#,
            Path::new("/c.json"),
            Dialect::Codex,
            &Substitutions::default(),
        )
        .unwrap();
        assert_eq!(f.hooks.len(), 1);
        assert_eq!(f.hooks[0].timeout_ms, Some(3000));
        assert_eq!(
            f.warnings,
            vec!["hooks.PreToolUse[0].hooks[1]: async hooks are not supported; skipped".to_owned()]
        );
    }
}
