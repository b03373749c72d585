//! The self-contained-repository rule: no `.rs` comment points outside the repository
//! (`docs/ARCHITECTURE.md`, "Self-contained repository"). Upstream behaviour is described in
//! `docs/upstream/`, and comments cite those pages.

use std::path::{Path, PathBuf};

use anyhow::Result;

/// Path prefixes (relative to the workspace root) whose comments other engineers are cleaning
/// right now. Their findings are reported and counted but fail only under `--strict`; an entry
/// with no findings left is reported as stale (remove it).
pub const PENDING_PATHS: &[&str] = &[];

/// One comment line pointing outside the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file, relative to the workspace root (`/`-separated).
    pub path: String,
    /// 1-based line number.
    pub line: usize,
    /// What it points at.
    pub why: &'static str,
}

impl Finding {
    /// Whether the file is under one of the [`PENDING_PATHS`].
    #[must_use]
    pub fn is_pending(&self) -> bool {
        pending_entry(&self.path).is_some()
    }
}

/// The [`PENDING_PATHS`] entry covering `path`, if any.
#[must_use]
pub fn pending_entry(path: &str) -> Option<&'static str> {
    PENDING_PATHS.iter().copied().find(|p| {
        if p.starts_with('/') {
            path.ends_with(p)
        } else {
            path.starts_with(p)
        }
    })
}

/// Why the comment text `comment` (a line whose trimmed start is `//`) points outside the
/// repository, or `None`. `doc_exists` answers whether a cited `docs/…` path exists in the
/// repository.
#[must_use]
pub fn outside_pointer(comment: &str, doc_exists: &dyn Fn(&str) -> bool) -> Option<&'static str> {
    if comment.contains("../shared") {
        return Some("points into ../shared (describe it in docs/upstream/ and cite that)");
    }
    for notes in [
        "shared/spec/",
        "shared/seeds/",
        "shared/design/",
        "bugcases.md",
        "fixtures/wire/README",
    ] {
        if comment.contains(notes) {
            return Some("cites the shared reference notes (cite docs/upstream/ instead)");
        }
    }
    for token in tokens(comment) {
        if let Some(rest) = token
            .find("packages/")
            .map(|i| &token[i + "packages/".len()..])
            && rest.starts_with(|c: char| c.is_ascii_lowercase())
        {
            return Some("cites an upstream source path (name it in docs/upstream/)");
        }
        if token.len() > 3
            && token.ends_with(".ts")
            && token[..token.len() - 3]
                .ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Some("cites an upstream TypeScript file (name it in docs/upstream/)");
        }
        if is_seed_file(token) {
            return Some("cites a seed file of the shared notes (cite docs/upstream/ instead)");
        }
        if let Some(doc) = token.find("docs/").map(|i| &token[i..])
            && i_is_start(token, doc)
            && doc.ends_with(".md")
            && !doc_exists(doc)
        {
            return Some("cites a docs/ page that is not in this repository (upstream docs?)");
        }
    }
    None
}

/// `docs/` must start the (trimmed) token: `crates/x/docs/a.md` is some other folder.
fn i_is_start(token: &str, doc: &str) -> bool {
    token.len() == doc.len()
}

/// Splits on characters that cannot be part of a path.
fn tokens(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || "_-./*@~`'\"(".contains(c)))
        .map(|t| t.trim_matches(|c| "`'\"(.".contains(c)))
        .filter(|t| !t.is_empty())
}

/// `NNN_…txt` (three digits, an underscore, `.txt`): the seed files of the shared notes.
fn is_seed_file(token: &str) -> bool {
    let name = token.rsplit('/').next().unwrap_or(token);
    let b = name.as_bytes();
    b.len() > 8 && b[..3].iter().all(u8::is_ascii_digit) && b[3] == b'_' && name.ends_with(".txt")
}

/// Every finding in the `.rs` files under `crates/`, `plugins/`, `tests/` and `xtask/` of `root`
/// (`target/` folders skipped), sorted by path and line.
///
/// # Errors
/// A folder or file that cannot be read.
pub fn scan(root: &Path) -> Result<Vec<Finding>> {
    let mut files = Vec::new();
    for top in ["crates", "plugins", "tests", "xtask"] {
        collect_rs(&root.join(top), &mut files)?;
    }
    files.sort();
    let doc_exists = |doc: &str| root.join(doc).is_file();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let rel = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .to_string_lossy()
            .replace('\\', "/");
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("//")
                && let Some(why) = outside_pointer(trimmed, &doc_exists)
            {
                out.push(Finding {
                    path: rel.clone(),
                    line: i + 1,
                    why,
                });
            }
        }
    }
    Ok(out)
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                collect_rs(&p, out)?;
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(s: &str) -> Option<&'static str> {
        outside_pointer(s, &|d| {
            d == "docs/upstream/session.md" || d == "docs/formats.md"
        })
    }

    #[test]
    fn outside_pointers_are_recognised() {
        let shared = Some("points into ../shared (describe it in docs/upstream/ and cite that)");
        let notes = Some("cites the shared reference notes (cite docs/upstream/ instead)");
        let src = Some("cites an upstream source path (name it in docs/upstream/)");
        let ts = Some("cites an upstream TypeScript file (name it in docs/upstream/)");
        let seed = Some("cites a seed file of the shared notes (cite docs/upstream/ instead)");
        let doc = Some("cites a docs/ page that is not in this repository (upstream docs?)");
        assert_eq!(
            check("//! Spec: `../shared/spec/session.md` (\"Surface\")."),
            shared
        );
        assert_eq!(check("//! shared/spec/session.md"), notes);
        assert_eq!(check("/// see bugcases.md BC-01"), notes);
        assert_eq!(
            check("//! upstream `packages/llm/llm/src/assembler.ts`."),
            src
        );
        assert_eq!(check("//! and upstream `runtime-context.ts`."), ts);
        assert_eq!(check("//! seeds `003_*.txt` (\"Agent handle\")"), seed);
        assert_eq!(check("//! seed 001_2fceec215ab04f62.txt"), seed);
        assert_eq!(
            check("/// upstream `docs/persistence-catalog.md`: the payload"),
            doc
        );
        assert_eq!(check("/// (docs/subsystems/permission-presets.md)"), doc);
    }

    #[test]
    fn in_repository_citations_and_prose_pass() {
        for ok in [
            "//! See docs/upstream/session.md (Surface).",
            "//! The key order is documented in `docs/formats.md`.",
            "// upstream order; the upstream corpus record, verbatim",
            "/// The plugin's id (upstream uses npm names, e.g. `@deepseek-ai/dsh-system-prompt`).",
            "//! read at run time from `shared/conformance/upstream-sessions/` beside the repository",
            "/// `*.rs,*.ts` globs and `a.tsx` files",
            "///  M src/lib.rs",
            "// 12_notes.txt and 1234 items",
        ] {
            assert_eq!(check(ok), None, "{ok}");
        }
    }

    #[test]
    fn nothing_is_pending_any_more() {
        assert!(PENDING_PATHS.is_empty());
        assert_eq!(pending_entry("crates/dsh-tools/src/lib.rs"), None);
        assert_eq!(pending_entry("crates/dsh-llm/src/error.rs"), None);
    }
}
