//! The interactive shell's approval question (docs/tools.md, "The approval question"): what
//! the call would do (a unified diff for `write`/`edit`, the command for `bash`), the four
//! answers — allow once, allow the call's path or the tool for the rest of the session, deny
//! with a reason for the model — and the session grants those answers leave.
//!
//! A session grant is kept by the shell for the session's lifetime in this process (not across
//! a resume). Every call it lets through is still asked of the approval service, which logs it
//! as upstream logs any approved call: `approval/asked {…}` then `approval/decided {outcome:
//! "allowed-once"}` — upstream's outcome vocabulary has no session-wide grant.
//!
//! On a terminal the question is wrapped at word boundaries to the terminal's width (diff
//! lines are cut to it instead); on a pipe it is not wrapped.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use dsh_session::{EventData, Session};
use serde_json::Value;

/// Most diff lines the question shows (the rest is counted).
pub const MAX_DIFF_LINES: usize = 40;

/// One answer to the question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `y`: this call only.
    Once,
    /// `p`: any call whose target is this path (or below it), for the rest of the session.
    SessionPath,
    /// `s`: any call of this tool, for the rest of the session.
    SessionTool,
    /// `n [REASON]`, an empty line or anything else: deny; the reason goes to the model.
    Deny(Option<String>),
}

/// The start of the permission preset's questions (a target outside the workspace, a tool
/// that uses the network): the only questions a session grant (`p`, `s`) may answer.
pub const GRANTABLE_PREFIX: &str = "permission preset workspace-write: ";

/// Whether a question with approval `reason` may be answered by a session grant: only the
/// permission preset's workspace questions ([`GRANTABLE_PREFIX`]). A hook's ask, a sandbox
/// escalation or any other question depends on the call's content, so it always asks and
/// offers only `y` / `n` (a grant neither answers it nor is offered for it).
pub fn grantable(reason: Option<&str>) -> bool {
    reason.is_some_and(|r| r.starts_with(GRANTABLE_PREFIX))
}

/// [`parse_answer`] for a question that offers session grants only when `grantable`: without
/// them, `p` and `s` are not answers but deny, with the text as the reason.
pub fn parse_offered(line: &str, has_path: bool, grantable: bool) -> Answer {
    match parse_answer(line, has_path && grantable) {
        Answer::SessionTool if !grantable => Answer::Deny(Some(line.trim().to_owned())),
        a => a,
    }
}

/// Parses one typed line: `y`/`yes` ⇒ [`Answer::Once`], `p` ⇒ [`Answer::SessionPath`] (only
/// when the call has a path, else a denial), `s` ⇒ [`Answer::SessionTool`], `n`/`no` ⇒ deny
/// without a reason, `n REASON` / `no REASON` ⇒ deny with REASON; an empty line denies (the
/// default), and any other text denies with that text as the reason (fail closed).
pub fn parse_answer(line: &str, has_path: bool) -> Answer {
    let line = line.trim();
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((w, r)) => (w, r.trim()),
        None => (line, ""),
    };
    match (word.to_ascii_lowercase().as_str(), rest.is_empty()) {
        ("y" | "yes", true) => Answer::Once,
        ("p", true) if has_path => Answer::SessionPath,
        ("s", true) => Answer::SessionTool,
        ("n" | "no", true) | ("", _) => Answer::Deny(None),
        ("n" | "no", false) => Answer::Deny(Some(rest.to_owned())),
        _ => Answer::Deny(Some(line.to_owned())),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Grant {
    Tool(String),
    Path(PathBuf),
}

/// The session grants of one shell: per session id, the tools and paths allowed for the rest
/// of that session.
#[derive(Debug, Default)]
pub struct Grants {
    by_session: Mutex<HashMap<String, Vec<Grant>>>,
}

impl Grants {
    /// Allows every later call of `tool` in session `session`.
    pub fn allow_tool(&self, session: &str, tool: &str) {
        self.add(session, Grant::Tool(tool.to_owned()));
    }

    /// Allows every later call in session `session` whose target is `path` or lies below it.
    pub fn allow_path(&self, session: &str, path: &Path) {
        self.add(session, Grant::Path(path.to_path_buf()));
    }

    fn add(&self, session: &str, g: Grant) {
        let mut map = self
            .by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let list = map.entry(session.to_owned()).or_default();
        if !list.contains(&g) {
            list.push(g);
        }
    }

    /// What lets a call of `tool` targeting `path` through in `session`, if anything: `` `tool`
    /// `` or the granted path, as the shell says it.
    pub fn covering(&self, session: &str, tool: &str, path: Option<&Path>) -> Option<String> {
        let map = self
            .by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(session)?.iter().find_map(|g| match g {
            Grant::Tool(t) if t == tool => Some(format!("`{t}`")),
            Grant::Path(p) if path.is_some_and(|x| x.starts_with(p)) => {
                Some(p.display().to_string())
            }
            _ => None,
        })
    }
}

/// The name and parsed arguments of call `call_id` in `session`'s log (its `tool/call`).
pub fn call_of(session: &Session, call_id: &str) -> Option<(String, Value)> {
    session.events().iter().rev().find_map(|e| match &e.data {
        EventData::ToolCall(c) if c.call_id.as_str() == call_id => Some((
            c.name.clone(),
            serde_json::from_str(&c.arguments).unwrap_or(Value::Null),
        )),
        _ => None,
    })
}

/// `p` with `.` and `..` applied lexically (no filesystem access).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `p` at its real location: the longest leading part of `p` that exists, with its symlinks
/// and `..` resolved by the filesystem, then the rest of `p` with `.`/`..` applied lexically
/// (the rest does not exist, so it holds no symlink). A `p` no part of which resolves is
/// returned [`normalize`]d.
fn resolve(p: &Path) -> PathBuf {
    let mut head = p.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&head) {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return normalize(&out);
        }
        match (head.file_name().map(ToOwned::to_owned), head.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                head = parent.to_path_buf();
            }
            _ => return normalize(p),
        }
    }
}

/// The path a call targets: its `file_path`, `path` or `workdir` string argument (first
/// present), relative ones taken against `cwd`, at its real location (symlinks and `..` of its
/// existing part resolved, as the permission preset does), so a path grant cannot be escaped
/// through a symlink below it (docs/tools.md, "The approval question").
pub fn target_path(args: &Value, cwd: &Path) -> Option<PathBuf> {
    let s = ["file_path", "path", "workdir"]
        .iter()
        .find_map(|k| args.get(*k).and_then(Value::as_str))
        .filter(|s| !s.is_empty())?;
    Some(resolve(&cwd.join(s)))
}

/// What the call would do, as lines: for `write` a unified diff of the file's current text (or
/// nothing) against `content`; for `edit` of the file's text against the text with
/// `old_string` replaced (every occurrence with `replace_all`); for `bash` `$ <command>`.
/// Other tools show nothing. At most [`MAX_DIFF_LINES`] lines, then `… <n> more lines`.
pub fn preview(tool: &str, args: &Value, path: Option<&Path>) -> Vec<String> {
    let s = |k: &str| args.get(k).and_then(Value::as_str);
    let diff = |before: &str, after: &str, shown: &Path| -> Vec<String> {
        let name = shown.display().to_string();
        let text = similar::TextDiff::from_lines(before, after)
            .unified_diff()
            .context_radius(3)
            .header(&name, &name)
            .to_string();
        text.lines().map(str::to_owned).collect()
    };
    let mut lines = match (tool, path) {
        ("write", Some(p)) => {
            let before = std::fs::read_to_string(p).unwrap_or_default();
            diff(&before, s("content").unwrap_or_default(), p)
        }
        ("edit", Some(p)) => match std::fs::read_to_string(p) {
            Ok(before) => {
                let old = s("old_string").unwrap_or_default();
                let new = s("new_string").unwrap_or_default();
                if old.is_empty() || !before.contains(old) {
                    vec!["(old_string is not in the file: the edit will fail)".to_owned()]
                } else {
                    let after = if args.get("replace_all").and_then(Value::as_bool) == Some(true) {
                        before.replace(old, new)
                    } else {
                        before.replacen(old, new, 1)
                    };
                    diff(&before, &after, p)
                }
            }
            Err(e) => vec![format!("(cannot read {}: {e})", p.display())],
        },
        ("bash", _) => s("command")
            .map(|c| c.lines().map(|l| format!("$ {l}")).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    if lines.len() > MAX_DIFF_LINES {
        let more = lines.len() - MAX_DIFF_LINES;
        lines.truncate(MAX_DIFF_LINES);
        lines.push(format!("… {more} more lines"));
    }
    lines
}

/// Wraps `text` at word boundaries to `width` columns (characters): a line is broken only
/// between words, the text's own leading spaces are kept, continuation lines are indented by
/// `indent` spaces, and a single word longer than the room is put on a line of its own (never
/// cut).
pub fn wrap(text: &str, width: usize, indent: usize) -> Vec<String> {
    let mut out = Vec::new();
    let lead = text.len() - text.trim_start_matches(' ').len();
    let mut line = " ".repeat(lead);
    let mut len = lead;
    for word in text.split_whitespace() {
        let w = word.chars().count();
        let at_start = line.trim().is_empty();
        if !at_start && len + 1 + w > width {
            out.push(std::mem::take(&mut line));
            line.push_str(&" ".repeat(indent));
            len = indent;
        } else if !at_start {
            line.push(' ');
            len += 1;
        }
        line.push_str(word);
        len += w;
    }
    if !line.trim().is_empty() {
        out.push(line);
    }
    out
}

fn cut(line: &str, width: usize) -> String {
    if line.chars().count() > width {
        let head: String = line.chars().take(width.saturating_sub(1)).collect();
        format!("{head}…")
    } else {
        line.to_owned()
    }
}

/// The question for a call of `tool` (approval `reason`, target `path`, [`preview`] lines), as
/// the lines to print: `allow tool `<tool>` (<reason>)?`, the preview indented by two spaces,
/// then one line per answer (`[y] allow once`, `[p] allow <path> for this session` when there
/// is a path, ``[s] allow `<tool>` for this session``, ``[n] deny — `n REASON` tells the model
/// why``). With `width` (a terminal) the text lines are wrapped at word boundaries
/// ([`wrap`]) and preview lines cut to the width; without, nothing is wrapped. Control
/// characters (the model writes the command, the content and the paths) are shown as escapes
/// ([`crate::toolview::visible`]), so a command cannot hide itself from the question.
pub fn question_lines(
    tool: &str,
    reason: Option<&str>,
    path: Option<&Path>,
    preview: &[String],
    width: Option<usize>,
) -> Vec<String> {
    use crate::toolview::visible;
    let grantable = grantable(reason);
    let path = path.filter(|_| grantable);
    let head = visible(&format!(
        "allow tool `{tool}`{}?",
        reason.map(|r| format!(" ({r})")).unwrap_or_default()
    ));
    let preview: Vec<String> = preview.iter().map(|l| visible(l)).collect();
    let mut answers = vec!["[y] allow once".to_owned()];
    if let Some(p) = path {
        answers.push(visible(&format!(
            "[p] allow {} for this session",
            p.display()
        )));
    }
    if grantable {
        answers.push(visible(&format!("[s] allow `{tool}` for this session")));
    }
    answers.push("[n] deny — `n REASON` tells the model why".to_owned());
    let mut out = Vec::new();
    match width {
        Some(w) => {
            out.extend(wrap(&head, w, 2));
            out.extend(preview.iter().map(|l| cut(&format!("  {l}"), w)));
            for a in &answers {
                out.extend(wrap(&format!("  {a}"), w, 6));
            }
        }
        None => {
            out.push(head);
            out.extend(preview.iter().map(|l| format!("  {l}")));
            out.extend(answers.iter().map(|a| format!("  {a}")));
        }
    }
    out
}

/// The width of the terminal on stderr, in columns; `None` when stderr is not a terminal (or
/// reports no size).
pub fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal;
    let err = std::io::stderr();
    if !err.is_terminal() {
        return None;
    }
    let ws = rustix::termios::tcgetwinsize(&err).ok()?;
    (ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn answers() {
        assert_eq!(parse_answer("y", false), Answer::Once);
        assert_eq!(parse_answer(" P ", true), Answer::SessionPath);
        assert_eq!(parse_answer("p", false), Answer::Deny(Some("p".into())));
        assert_eq!(parse_answer("s", false), Answer::SessionTool);
        assert_eq!(parse_answer("", true), Answer::Deny(None));
        assert_eq!(parse_answer("n", true), Answer::Deny(None));
        assert_eq!(
            parse_answer("n  use  the tests", true),
            Answer::Deny(Some("use  the tests".into()))
        );
        assert_eq!(
            parse_answer("do not", true),
            Answer::Deny(Some("do not".into()))
        );
    }

    #[test]
    fn wrapping_never_cuts_a_word() {
        assert_eq!(
            wrap("allow tool `write` (outside the workspace)?", 20, 2),
            ["allow tool `write`", "  (outside the", "  workspace)?"]
        );
        assert_eq!(
            wrap("  [y] allow once", 12, 6),
            ["  [y] allow", "      once"]
        );
        assert_eq!(
            wrap("a verylongwordthatdoesnotfit b", 10, 2),
            ["a", "  verylongwordthatdoesnotfit", "  b"]
        );
    }

    #[test]
    fn an_edit_preview_is_a_unified_diff() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("notes.txt");
        std::fs::write(&f, "one\ncolour: red\nthree\n").unwrap();
        let lines = preview(
            "edit",
            &json!({"file_path": "notes.txt", "old_string": "red", "new_string": "blue"}),
            Some(&f),
        );
        let name = f.display().to_string();
        assert_eq!(
            lines,
            [
                format!("--- {name}"),
                format!("+++ {name}"),
                "@@ -1,3 +1,3 @@".to_owned(),
                " one".to_owned(),
                "-colour: red".to_owned(),
                "+colour: blue".to_owned(),
                " three".to_owned(),
            ]
        );
    }

    #[test]
    fn grants_cover_a_tool_or_a_path_below() {
        let g = Grants::default();
        g.allow_path("s1", Path::new("/w/out"));
        g.allow_tool("s1", "write");
        assert_eq!(
            g.covering("s1", "bash", Some(Path::new("/w/out/x"))),
            Some("/w/out".to_owned())
        );
        assert_eq!(g.covering("s1", "bash", Some(Path::new("/w/outer"))), None);
        assert_eq!(g.covering("s1", "write", None), Some("`write`".to_owned()));
        assert_eq!(g.covering("s2", "write", None), None);
        assert_eq!(
            target_path(&json!({"file_path": "../a/./b"}), Path::new("/w/proj")),
            Some(PathBuf::from("/w/a/b"))
        );
    }

    #[test]
    fn only_the_presets_workspace_questions_offer_session_grants() {
        let preset = "permission preset workspace-write: write target /x is outside the workspace /w; approve this call to allow it once, or rerun with --permission-mode danger-full-access";
        assert!(grantable(Some(preset)));
        assert!(!grantable(Some("pushes need a human")));
        assert!(!grantable(Some(
            "escalate sandbox to danger-full-access: why"
        )));
        assert!(!grantable(None));
        let hook = question_lines(
            "bash",
            Some("pushes need a human"),
            Some(Path::new("/x")),
            &[],
            None,
        );
        assert_eq!(
            hook,
            [
                "allow tool `bash` (pushes need a human)?",
                "  [y] allow once",
                "  [n] deny — `n REASON` tells the model why"
            ]
        );
        assert_eq!(
            parse_offered("s", true, false),
            Answer::Deny(Some("s".into()))
        );
        assert_eq!(
            parse_offered("p", true, false),
            Answer::Deny(Some("p".into()))
        );
        assert_eq!(parse_offered("s", true, true), Answer::SessionTool);
        assert_eq!(parse_offered("p", true, true), Answer::SessionPath);
    }
}
