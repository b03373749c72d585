//! Custom commands from Markdown files: `<dir>/<name>.md`, the file stem is the name
//! (lowercased), optional YAML frontmatter `description` and `argument-hint`, the body is the
//! prompt template. See docs/upstream/commands.md ("Custom commands").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{CommandDef, CommandSource};

/// A custom command loaded from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkdownCommand {
    /// Name, description, hint, file.
    pub def: CommandDef,
    /// The prompt template (the body after the frontmatter, trimmed).
    pub template: String,
}

/// Errors reading one command file.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum CommandFileError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    #[code("COMMAND_FILE_READ")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// The frontmatter is not a YAML mapping.
    #[error("invalid frontmatter in {path}: {message}")]
    #[code("COMMAND_FILE_FRONTMATTER")]
    Frontmatter {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
}

/// Splits an optional `---` frontmatter block off `text`.
fn split(text: &str) -> (Option<&str>, &str) {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (None, text);
    };
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return (Some(&rest[..offset]), &rest[offset + line.len()..]);
        }
        offset += line.len();
    }
    (None, text)
}

/// Parses one command file's text; `name` is its stem.
///
/// # Errors
/// [`CommandFileError::Frontmatter`] when a frontmatter block is not a YAML mapping.
pub fn parse_command(
    name: &str,
    path: &Path,
    text: &str,
) -> Result<MarkdownCommand, CommandFileError> {
    let (front, body) = split(text);
    let meta: serde_json::Map<String, Value> = match front {
        None => serde_json::Map::new(),
        Some(f) if f.trim().is_empty() => serde_json::Map::new(),
        Some(f) => match serde_yaml_ng::from_str::<Value>(f) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                return Err(CommandFileError::Frontmatter {
                    path: path.to_path_buf(),
                    message: "not a mapping".into(),
                });
            }
            Err(e) => {
                return Err(CommandFileError::Frontmatter {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                });
            }
        },
    };
    let template = body.trim().to_owned();
    let description = meta
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| {
            template
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .chars()
                .take(80)
                .collect()
        });
    Ok(MarkdownCommand {
        def: CommandDef {
            name: name.to_owned(),
            description,
            argument_hint: meta
                .get("argument-hint")
                .and_then(Value::as_str)
                .map(str::to_owned),
            source: CommandSource::File(path.to_path_buf()),
        },
        template,
    })
}

/// The prompt of `template` for `raw` arguments: `$ARGUMENTS` is the whole raw input
/// (trimmed), `$1` … `$9` the whitespace-separated words (missing ones: empty). A template
/// without any placeholder gets non-empty arguments appended as `\n\nARGUMENTS: <raw>` (Claude
/// Code's rule).
pub fn expand(template: &str, raw: &str) -> String {
    let raw = raw.trim();
    let words: Vec<&str> = raw.split_whitespace().collect();
    let mut out = String::with_capacity(template.len() + raw.len());
    let mut used = false;
    let mut rest = template;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            out.push_str(raw);
            used = true;
            rest = tail;
        } else if let Some(d) = after.chars().next().filter(|c| ('1'..='9').contains(c)) {
            let n = (d as usize) - ('0' as usize);
            out.push_str(words.get(n - 1).copied().unwrap_or(""));
            used = true;
            rest = &after[1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    if !used && !raw.is_empty() {
        out.push_str("\n\nARGUMENTS: ");
        out.push_str(raw);
    }
    out
}

/// Loads every `*.md` directly in each of `dirs` (earlier dirs win a duplicate name); a file
/// whose stem is not a valid command name is skipped; unreadable or invalid files are returned
/// as errors beside the commands.
pub fn load(dirs: &[PathBuf]) -> (BTreeMap<String, MarkdownCommand>, Vec<CommandFileError>) {
    let mut out = BTreeMap::new();
    let mut errors = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for path in files {
            if path.extension().and_then(|e| e.to_str()) != Some("md") || !path.is_file() {
                continue;
            }
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            let name = stem.to_ascii_lowercase();
            if crate::parse(&format!("/{name}")).is_none_or(|i| i.name != name)
                || out.contains_key(&name)
            {
                continue;
            }
            match std::fs::read_to_string(&path) {
                Ok(text) => match parse_command(&name, &path, &text) {
                    Ok(c) => {
                        out.insert(name, c);
                    }
                    Err(e) => errors.push(e),
                },
                Err(e) => errors.push(CommandFileError::Read {
                    path: path.clone(),
                    message: e.to_string(),
                }),
            }
        }
    }
    (out, errors)
}

/// The command directories, by precedence: `<project>/.dsh/commands`,
/// `<project>/.claude/commands`, `<dsh_home>/commands`, `<home>/.claude/commands`.
pub fn command_dirs(
    project: Option<&Path>,
    dsh_home: Option<&Path>,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(p) = project {
        dirs.push(p.join(".dsh/commands"));
        dirs.push(p.join(".claude/commands"));
    }
    if let Some(h) = dsh_home {
        dirs.push(h.join("commands"));
    }
    if let Some(h) = home {
        dirs.push(h.join(".claude/commands"));
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion() {
        assert_eq!(
            expand(
                "Review $ARGUMENTS carefully; first $1, then $2.$3",
                "  a.rs  b.rs "
            ),
            "Review a.rs  b.rs carefully; first a.rs, then b.rs."
        );
        assert_eq!(expand("Costs $5 and $x", ""), "Costs  and $x");
        assert_eq!(
            expand("Fix the bug.", "in parser"),
            "Fix the bug.\n\nARGUMENTS: in parser"
        );
        assert_eq!(expand("Fix the bug.", ""), "Fix the bug.");
    }

    #[test]
    fn files_load_with_precedence() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let b = d.path().join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(
            a.join("review.md"),
            "---\ndescription: Review a file\nargument-hint: <file>\n---\nReview $ARGUMENTS\n",
        )
        .unwrap();
        std::fs::write(b.join("review.md"), "other").unwrap();
        std::fs::write(b.join("Plain.md"), "Just do it.\n").unwrap();
        std::fs::write(b.join("bad name.md"), "x").unwrap();
        std::fs::write(b.join("broken.md"), "---\n[x\n---\nbody").unwrap();
        let (cmds, errors) = load(&[a.clone(), b.clone()]);
        assert_eq!(cmds.keys().collect::<Vec<_>>(), ["plain", "review"]);
        assert_eq!(cmds["review"].def.description, "Review a file");
        assert_eq!(cmds["review"].def.argument_hint.as_deref(), Some("<file>"));
        assert_eq!(cmds["review"].template, "Review $ARGUMENTS");
        assert_eq!(cmds["plain"].def.description, "Just do it.");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().starts_with("invalid frontmatter in "));
    }
}
