//! Path encoding of the JSONL layout: [`encode_segment`], [`project_key`] and the
//! `<root>/--<projectKey(cwd)>--/<encodeSegment(id)>/session.jsonl` layout.
//!
//! Behaviour: `docs/persistence.md` ("JSONL backend"). Both encoders work on UTF-16 code
//! units, exactly like upstream, so a non-BMP character becomes two `~XXXX` escapes.

use std::path::{Path, PathBuf};

use dsh_persistence::{PersistenceError, Result};

fn is_safe(unit: u16) -> bool {
    matches!(unit, 0x30..=0x39 | 0x41..=0x5A | 0x61..=0x7A | 0x2E | 0x5F | 0x2D)
}

fn push_escape(out: &mut String, unit: u16) {
    out.push('~');
    out.push_str(&format!("{unit:04X}"));
}

/// Encodes an arbitrary string (a session id) as one safe path segment, injectively.
///
/// `[A-Za-z0-9._-]` are kept; every other UTF-16 code unit (including `~`) becomes `~XXXX`
/// (uppercase hex, 4 digits); `.` ⇒ `~002E`, `..` ⇒ `~002E~002E`.
///
/// # Errors
/// [`PersistenceError::InvalidArgument`] for the empty string.
pub fn encode_segment(raw: &str) -> Result<String> {
    if raw.is_empty() {
        return Err(PersistenceError::InvalidArgument {
            detail: "cannot encode an empty path segment".into(),
        });
    }
    if raw == "." {
        return Ok("~002E".into());
    }
    if raw == ".." {
        return Ok("~002E~002E".into());
    }
    let mut out = String::with_capacity(raw.len());
    for unit in raw.encode_utf16() {
        if is_safe(unit) {
            out.push(char::from(unit as u8));
        } else {
            push_escape(&mut out, unit);
        }
    }
    Ok(out)
}

/// Builds the readable project directory name `--<slug>--` for a working directory.
///
/// Runs of `/`, `\`, `:` become one `-`; safe characters are kept; others become `~XXXX`; leading
/// `-` are stripped (empty ⇒ `root`); the slug is truncated to 251 characters. Lossy by design.
///
/// # Errors
/// [`PersistenceError::InvalidArgument`] for the empty string.
pub fn project_key(cwd: &str) -> Result<String> {
    if cwd.is_empty() {
        return Err(PersistenceError::InvalidArgument {
            detail: "cannot encode an empty project path".into(),
        });
    }
    let mut readable = String::with_capacity(cwd.len());
    let mut separator_run = false;
    for unit in cwd.encode_utf16() {
        if unit == u16::from(b'/') || unit == u16::from(b'\\') || unit == u16::from(b':') {
            if !separator_run {
                readable.push('-');
            }
            separator_run = true;
        } else if is_safe(unit) {
            readable.push(char::from(unit as u8));
            separator_run = false;
        } else {
            push_escape(&mut readable, unit);
            separator_run = false;
        }
    }
    let slug = readable.trim_start_matches('-');
    let slug = if slug.is_empty() { "root" } else { slug };
    // The slug is pure ASCII, so byte slicing is char slicing.
    let cut = &slug[..slug.len().min(251)];
    Ok(format!("--{cut}--"))
}

/// The project directory under `root`: `_no-cwd` without a cwd, else [`project_key`].
///
/// # Errors
/// As [`project_key`].
pub fn project_dir(root: &Path, cwd: Option<&str>) -> Result<PathBuf> {
    match cwd {
        None => Ok(root.join("_no-cwd")),
        Some(cwd) => Ok(root.join(project_key(cwd)?)),
    }
}

/// The directory owned by one session: `project_dir/encode_segment(id)`.
///
/// # Errors
/// As [`encode_segment`] / [`project_key`].
pub fn session_dir(root: &Path, cwd: Option<&str>, id: &str) -> Result<PathBuf> {
    Ok(project_dir(root, cwd)?.join(encode_segment(id)?))
}

/// File name of the plain log (`session.jsonl`).
pub const LOG_FILE_NAME: &str = "session.jsonl";
/// File name of the zstd-framed log (`session.jsonl.zstd`).
pub const ZSTD_LOG_FILE_NAME: &str = "session.jsonl.zstd";
/// File name of the per-session writer lock.
pub const LOCK_FILE_NAME: &str = "session.lock";

/// The plain log path of a session: `session_dir/session.jsonl`.
///
/// # Errors
/// As [`session_dir`].
pub fn log_path(root: &Path, cwd: Option<&str>, id: &str) -> Result<PathBuf> {
    Ok(session_dir(root, cwd, id)?.join(LOG_FILE_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_kernel::ErrorCode;

    #[test]
    fn encode_segment_cases() {
        assert_eq!(encode_segment("abc-DEF_1.2").unwrap(), "abc-DEF_1.2");
        assert_eq!(encode_segment(".").unwrap(), "~002E");
        assert_eq!(encode_segment("..").unwrap(), "~002E~002E");
        assert_eq!(encode_segment("../x").unwrap(), "..~002Fx");
        assert_eq!(encode_segment("a~b").unwrap(), "a~007Eb");
        assert_eq!(encode_segment("a b\0").unwrap(), "a~0020b~0000");
        assert_eq!(encode_segment("é").unwrap(), "~00E9");
        assert_eq!(encode_segment("😀").unwrap(), "~D83D~DE00");
        assert_eq!(encode_segment("").unwrap_err().code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn encode_segment_is_injective_on_samples() {
        let samples = [
            "a", "~0061", "a~", ".", "~002E", "..", "...", "a/b", "a\\b", "A", "a b",
        ];
        let encoded: std::collections::BTreeSet<_> =
            samples.iter().map(|s| encode_segment(s).unwrap()).collect();
        assert_eq!(encoded.len(), samples.len());
    }

    #[test]
    fn project_key_cases() {
        assert_eq!(project_key("/home/u/proj").unwrap(), "--home-u-proj--");
        assert_eq!(project_key("C:\\Users\\me").unwrap(), "--C-Users-me--");
        assert_eq!(project_key("//a//b/").unwrap(), "--a-b---");
        assert_eq!(project_key("/").unwrap(), "--root--");
        assert_eq!(project_key("/a b~").unwrap(), "--a~0020b~007E--");
        let long = format!("/{}", "x".repeat(400));
        assert_eq!(
            project_key(&long).unwrap(),
            format!("--{}--", "x".repeat(251))
        );
        assert_eq!(project_key("").unwrap_err().code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn layout() {
        let root = Path::new("/r");
        assert_eq!(
            log_path(root, Some("/w/p"), "s/1").unwrap(),
            PathBuf::from("/r/--w-p--/s~002F1/session.jsonl")
        );
        assert_eq!(
            log_path(root, None, "x").unwrap(),
            PathBuf::from("/r/_no-cwd/x/session.jsonl")
        );
    }
}
