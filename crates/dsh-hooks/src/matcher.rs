//! Matchers: which subjects (tool names, session-start sources) a hook group applies to.
//!
//! Both dialects: an absent matcher, `""` and `"*"` match everything. Claude Code: a matcher of
//! only letters, digits, `_` and `|` is a list of exact names (`edit|write`); anything else is a
//! regular expression searched anywhere in the subject (JavaScript's `RegExp.test`). Codex: every
//! other matcher is a regular expression, searched the same way. A pattern longer than 512
//! characters, or one that does not compile, is an error (the whole file is refused).
//!
//! Beyond upstream, Claude Code matchers also take Claude Code's own tool names
//! ([`CLAUDE_CODE_TOOL_NAMES`]: `Bash` matches dsh's `bash`, `Edit|Write` its `edit` and
//! `write`); a regular expression matches a dsh tool when it matches the tool's name or one of
//! its Claude Code names. The `tool_name` a hook receives stays dsh's name. See
//! docs/upstream/hooks.md ("Matchers").

use regex::Regex;

use crate::config::Dialect;

/// Longest accepted regular-expression matcher, in characters (as upstream).
pub const MAX_MATCHER_CHARS: usize = 512;

/// Claude Code's tool names and the dsh tool each stands for (Claude Code dialect matchers
/// only). See docs/upstream/hooks.md ("Matchers").
pub const CLAUDE_CODE_TOOL_NAMES: &[(&str, &str)] = &[
    ("Bash", "bash"),
    ("Read", "read"),
    ("Edit", "edit"),
    ("MultiEdit", "edit"),
    ("Write", "write"),
    ("Grep", "grep"),
    ("Glob", "glob"),
    ("TodoWrite", "todo_write"),
    ("BashOutput", "job_output"),
    ("KillShell", "job_kill"),
    ("KillBash", "job_kill"),
];

/// The tools of dsh's default harness, which a matcher is checked against when the tool
/// registry is not at hand (`dsh hooks list` and boot warnings use the registry's names plus
/// these).
pub const BUILTIN_TOOL_NAMES: &[&str] = &[
    "bash",
    "job_output",
    "job_kill",
    "job_list",
    "read",
    "write",
    "edit",
    "grep",
    "glob",
    "todo_write",
];

#[derive(Debug, Clone)]
enum Kind {
    All,
    Exact(Vec<String>),
    Regex(Regex),
}

/// A compiled matcher (keeps its source text for `hook/invoked` and `dsh hooks list`).
#[derive(Debug, Clone)]
pub struct Matcher {
    source: String,
    kind: Kind,
    dialect: Dialect,
}

impl Matcher {
    /// Compiles `source` in `dialect` (rules in the module docs).
    ///
    /// # Errors
    /// A message saying why the pattern is refused (too long, or the regex error).
    pub fn compile(source: &str, dialect: Dialect) -> Result<Self, String> {
        let kind = if source.is_empty() || source == "*" {
            Kind::All
        } else if dialect == Dialect::ClaudeCode
            && source
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|')
        {
            let mut names: Vec<String> = Vec::new();
            for n in source.split('|') {
                names.push(n.to_owned());
                if let Some((_, dsh)) = CLAUDE_CODE_TOOL_NAMES.iter().find(|(cc, _)| *cc == n) {
                    names.push((*dsh).to_owned());
                }
            }
            Kind::Exact(names)
        } else if source.chars().count() > MAX_MATCHER_CHARS {
            return Err(format!(
                "the matcher is longer than {MAX_MATCHER_CHARS} characters"
            ));
        } else {
            Kind::Regex(Regex::new(source).map_err(|e| {
                // The regex error draws the pattern over several lines; its last line says
                // what is wrong.
                let text = e.to_string();
                let why = text.lines().last().unwrap_or_default().trim();
                let why = why.strip_prefix("error: ").unwrap_or(why);
                format!("the matcher {source:?} is not a valid regex ({why})")
            })?)
        };
        Ok(Self {
            source: source.to_owned(),
            kind,
            dialect,
        })
    }

    /// The matcher as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether `subject` (a tool name, a session-start source) matches.
    pub fn matches(&self, subject: &str) -> bool {
        match &self.kind {
            Kind::All => true,
            Kind::Exact(names) => names.iter().any(|n| n == subject),
            Kind::Regex(re) => {
                re.is_match(subject)
                    || (self.dialect == Dialect::ClaudeCode
                        && CLAUDE_CODE_TOOL_NAMES
                            .iter()
                            .any(|(cc, dsh)| *dsh == subject && re.is_match(cc)))
            }
        }
    }

    /// Whether this matcher can match any of the tool names `known` (a regex that names MCP
    /// tools, `mcp…`, is taken to match: those tools come and go with their servers).
    pub fn can_match_a_tool<'a>(&self, mut known: impl Iterator<Item = &'a str>) -> bool {
        match &self.kind {
            Kind::All => true,
            Kind::Regex(_) if self.source.contains("mcp") => true,
            _ => known.any(|k| self.matches(k)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(s: &str) -> Matcher {
        Matcher::compile(s, Dialect::ClaudeCode).unwrap()
    }

    #[test]
    fn claude_code_rules() {
        for all in ["", "*"] {
            assert!(cc(all).matches("bash"));
        }
        let exact = cc("edit|write");
        assert!(exact.matches("edit") && exact.matches("write"));
        assert!(!exact.matches("edit_notebook") && !exact.matches("read"));
        // Not only name characters: a regex, searched anywhere.
        let re = cc("mcp__.*");
        assert!(re.matches("mcp__github__list") && re.matches("x_mcp__y"));
        assert!(!re.matches("bash"));
        let anchored = cc("^(read|grep)$");
        assert!(anchored.matches("grep") && !anchored.matches("greps"));
    }

    #[test]
    fn claude_code_tool_names_match_dsh_tools() {
        let bash = cc("Bash");
        assert!(bash.matches("bash") && bash.matches("Bash") && !bash.matches("read"));
        let ew = cc("Edit|Write|MultiEdit");
        assert!(ew.matches("edit") && ew.matches("write") && !ew.matches("read"));
        assert!(cc("TodoWrite").matches("todo_write"));
        let re = cc("^(Read|Grep)$");
        assert!(re.matches("read") && re.matches("grep") && !re.matches("bash"));
        // Codex matchers are not translated.
        assert!(
            !Matcher::compile("Bash", Dialect::Codex)
                .unwrap()
                .matches("bash")
        );
        let known = BUILTIN_TOOL_NAMES.iter().copied();
        assert!(cc("Bash").can_match_a_tool(known.clone()));
        assert!(!cc("Bsh").can_match_a_tool(known.clone()));
        assert!(!cc("^Shell$").can_match_a_tool(known.clone()));
        assert!(cc("mcp__github__.*").can_match_a_tool(known));
    }

    #[test]
    fn codex_rules() {
        let m = Matcher::compile("bash", Dialect::Codex).unwrap();
        assert!(m.matches("bash") && m.matches("bash_output"));
        assert!(Matcher::compile("*", Dialect::Codex).unwrap().matches("x"));
    }

    #[test]
    fn refusals() {
        let e = Matcher::compile("[unclosed", Dialect::ClaudeCode).unwrap_err();
        assert!(
            e.starts_with("the matcher \"[unclosed\" is not a valid regex"),
            "{e}"
        );
        let long = format!("({})", "a.".repeat(300));
        assert_eq!(
            Matcher::compile(&long, Dialect::Codex).unwrap_err(),
            "the matcher is longer than 512 characters"
        );
        // Lookbehind is not supported by the regex engine: refused, as upstream refuses it.
        assert!(Matcher::compile("(?<=a)b", Dialect::ClaudeCode).is_err());
    }
}
