//! What text mode shows of a tool call on stderr (docs/tools.md, "What the terminal shows"):
//! the call ([`call_lines`]), its finished result ([`result_lines`]) and a `todo_write` list as
//! a checklist ([`checklist`]). Pure functions of the call's name, JSON arguments and result
//! text; the renderer writes the lines.

use dsh_session::{TodoItem, TodoStatus};
use serde_json::Value;
use std::fmt::Write as _;

use crate::render::summarize_args;

/// Most output lines a result shows (its tail).
pub const TAIL_LINES: usize = 5;

/// Longest shown line, in characters (longer ones end in `…`).
pub const MAX_LINE_CHARS: usize = 160;

/// The trailing marker lines the bash tool puts after a command's output (see the shell
/// plugin's result text): what they start with.
const BASH_MARKERS: &[&str] = &[
    "[exit code: ",
    "[killed by signal: ",
    "[timed out after ",
    "[still running after the call: ",
    "[output contained invalid UTF-8",
    "[no terminal: ",
];

/// `text` with every character that could drive the terminal shown as a visible escape, so
/// model-controlled text (a call's arguments, a command's output, a diff, an approval
/// question) cannot move the cursor, erase a line or recolour the screen
/// (docs/tools.md, "What the terminal shows"):
///
/// - C0 controls other than tab (`ESC` → `\x1b`, `CR` → `\r`, `BS` → `\x08`, a newline →
///   `\n`) and `DEL` → `\x7f`;
/// - C1 controls (U+0080–U+009F, e.g. the one-byte CSI) → `\u{9b}`;
/// - the bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069), which reorder
///   what is shown → `\u{202e}`.
///
/// Other text, tabs included, is returned unchanged.
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\0'..='\u{1f}' | '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            _ => out.push(c),
        }
    }
    out
}

/// Longest shown failure line, in characters: a refusal names the paths and the flag that
/// would allow the call, at its end.
pub const MAX_ERROR_CHARS: usize = 480;

fn clip(line: &str) -> String {
    clip_to(line, MAX_LINE_CHARS)
}

fn clip_to(line: &str, max: usize) -> String {
    let line = &visible(line);
    if line.chars().count() > max {
        let cut: String = line.chars().take(max - 1).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The stderr lines announcing a call of `name` with raw JSON `arguments`:
///
/// - `bash` with a `description`: `• bash <description>` then `  $ <command>` (one line, ` ⏎ `
///   for newlines, at most 120 characters);
/// - `todo_write`: `• todo_write <n> items` (the list follows as a [`checklist`]);
/// - anything else: `• <name> <summary>` ([`summarize_args`]).
///
/// Control characters in the lines are shown as escapes ([`visible`]).
pub fn call_lines(name: &str, arguments: &str) -> Vec<String> {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let lines = match name {
        "bash" => match str_arg(&args, "description") {
            Some(desc) => vec![
                format!("• bash {}", clip(&desc.replace('\n', " "))),
                format!("  $ {}", summarize_args(arguments)),
            ],
            None => vec![format!("• bash {}", summarize_args(arguments))],
        },
        "todo_write" => {
            let n = args
                .get("todos")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            vec![format!(
                "• todo_write {n} item{}",
                if n == 1 { "" } else { "s" }
            )]
        }
        _ => vec![format!("• {name} {}", summarize_args(arguments))],
    };
    lines.iter().map(|l| visible(l)).collect()
}

/// The tail of `lines`: the last [`TAIL_LINES`], each `  │ <line>`, after `  │ … <k> earlier
/// lines` when some were left out.
fn tail(lines: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let skip = lines.len().saturating_sub(TAIL_LINES);
    if skip > 0 {
        out.push(format!(
            "  │ … {skip} earlier line{}",
            if skip == 1 { "" } else { "s" }
        ));
    }
    out.extend(lines[skip..].iter().map(|l| format!("  │ {}", clip(l))));
    out
}

/// The stderr lines of a finished call of `name` (raw JSON `arguments`) whose result text is
/// `text` (`is_error`: the tool failed):
///
/// - a failure: `  ✗ <first line of the text>` (up to [`MAX_ERROR_CHARS`] characters);
/// - `todo_write`: nothing (its [`checklist`] is shown from the `todo/write` event);
/// - `bash` in the foreground: `  ✓ exit 0`, `  ✗ exit <code>`, `  ✗ killed by signal: <sig>` or
///   `  ✗ timed out after <ms>ms` (from the result's trailing markers), then the output's
///   [`TAIL_LINES`]-line tail (none for `(no output)`);
/// - `read`: `  ✓ <its footer>` (`End of file - total <n> lines`, `Showing lines a-b of n. …`);
/// - anything else: `  ✓ <the text>` when it is one line, else `  ✓ <n> lines`.
///
/// Control characters in the text are shown as escapes ([`visible`]).
pub fn result_lines(name: &str, arguments: &str, text: &str, is_error: bool) -> Vec<String> {
    raw_result_lines(name, arguments, text, is_error)
        .iter()
        .map(|l| visible(l))
        .collect()
}

fn raw_result_lines(name: &str, arguments: &str, text: &str, is_error: bool) -> Vec<String> {
    if is_error {
        return vec![format!(
            "  ✗ {}",
            clip_to(text.lines().next().unwrap_or_default(), MAX_ERROR_CHARS)
        )];
    }
    match name {
        "todo_write" => Vec::new(),
        "bash" => {
            let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
            if args.get("run_in_background").and_then(Value::as_bool) == Some(true) {
                return vec![format!(
                    "  ✓ {}",
                    clip(text.lines().next().unwrap_or_default())
                )];
            }
            bash_result(text)
        }
        "read" => match text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix('(')?.strip_suffix(')'))
        {
            Some(footer) => vec![format!("  ✓ {}", clip(footer))],
            None => generic_result(text),
        },
        _ => generic_result(text),
    }
}

fn generic_result(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    match lines.len() {
        0 => vec!["  ✓ (empty)".to_owned()],
        1 => vec![format!("  ✓ {}", clip(lines[0]))],
        n => vec![format!("  ✓ {n} lines")],
    }
}

fn bash_result(text: &str) -> Vec<String> {
    let mut lines: Vec<&str> = text.lines().collect();
    let mut status = "  ✓ exit 0".to_owned();
    let mut failed = false;
    while let Some(last) = lines.last().copied() {
        if !BASH_MARKERS.iter().any(|m| last.starts_with(m)) {
            break;
        }
        lines.pop();
        let inner = last.trim_start_matches('[').trim_end_matches(']');
        if let Some(code) = inner.strip_prefix("exit code: ") {
            status = format!("  ✗ exit {code}");
            failed = true;
        } else if (inner.starts_with("killed by signal: ") || inner.starts_with("timed out after "))
            && !failed
        {
            status = format!("  ✗ {inner}");
            failed = true;
        }
    }
    let mut out = vec![status];
    if lines != ["(no output)"] {
        out.extend(tail(&lines));
    }
    out
}

/// A `todo_write` list, one line per item: `  [x] <done>`, `  [>] <in progress>`, `  [ ]
/// <pending>`.
pub fn checklist(todos: &[TodoItem]) -> Vec<String> {
    todos
        .iter()
        .map(|t| {
            let mark = match t.status {
                TodoStatus::Completed => "[x]",
                TodoStatus::InProgress => "[>]",
                TodoStatus::Pending => "[ ]",
            };
            format!("  {mark} {}", clip(&t.content))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bash_killed_by_a_signal_says_so_and_keeps_its_tail() {
        assert_eq!(
            result_lines(
                "bash",
                "{}",
                "partial\n[timed out after 100ms]\n[killed by signal: SIGKILL]",
                false
            ),
            ["  ✗ killed by signal: SIGKILL", "  │ partial"]
        );
    }

    #[test]
    fn a_quiet_bash_shows_only_its_status() {
        assert_eq!(
            result_lines("bash", "{}", "(no output)", false),
            ["  ✓ exit 0"]
        );
    }

    #[test]
    fn other_tools_show_one_line_or_a_count() {
        assert_eq!(
            result_lines("write", "{}", "Wrote 3 lines", false),
            ["  ✓ Wrote 3 lines"]
        );
        assert_eq!(
            result_lines("read", "{}", "a\nb\nc\n", false),
            ["  ✓ 3 lines"]
        );
        assert_eq!(
            result_lines("read", "{}", "Error: no such file\nmore", true),
            ["  ✗ Error: no such file"]
        );
    }

    #[test]
    fn terminal_controls_are_shown_as_escapes() {
        assert_eq!(
            visible("a\u{1b}[1A\u{1b}[2K\r\tb\u{7f}\u{9b}\u{202e}c\nd"),
            "a\\x1b[1A\\x1b[2K\\r\tb\\x7f\\u{9b}\\u{202e}c\\nd"
        );
        assert_eq!(
            call_lines(
                "bash",
                r#"{"command":"rm -rf k\u001b[1A\u001b[2K\r  $ ls","description":"x\u001b[2K"}"#
            ),
            ["• bash x\\x1b[2K", "  $ rm -rf k\\x1b[1A\\x1b[2K\\r  $ ls"]
        );
        assert_eq!(
            result_lines(
                "bash",
                "{}",
                "\u{1b}[31mred\u{1b}[0m\n[exit code: 1]",
                false
            ),
            ["  ✗ exit 1", "  │ \\x1b[31mred\\x1b[0m"]
        );
    }

    #[test]
    fn a_bash_without_description_is_one_line() {
        assert_eq!(call_lines("bash", r#"{"command":"ls"}"#), ["• bash ls"]);
    }
}
