//! Workspace confinement and display paths: a search path resolves against the session's
//! `cwd` (the base, inside the workspace root), is canonicalised (so `..` and symlinks cannot
//! escape), and must stay inside the root; results are shown relative to the base with `/`
//! separators (`../x` for a file of the root outside the base), so a shown path can be passed to
//! `read` as it is.
//!
//! Spec: the `path` parameter of upstream `grep`/`glob` ("defaults to the session workspace; a
//! relative path resolves against it"); confinement is a dsh rule (issue text).

use std::path::{Component, Path, PathBuf};

use crate::error::SearchError;

/// The canonical workspace root.
///
/// # Errors
/// [`SearchError::PathNotFound`] when the root does not exist.
pub fn canonical_root(root: &Path) -> Result<PathBuf, SearchError> {
    root.canonicalize()
        .map_err(|_| SearchError::PathNotFound(root.display().to_string()))
}

/// Resolves `path` (default: the root) against the canonical `root`: [`resolve_in`] with the
/// root as the base.
///
/// # Errors
/// As [`resolve_in`].
pub fn resolve_in_root(root: &Path, path: Option<&str>) -> Result<PathBuf, SearchError> {
    resolve_in(root, root, path)
}

/// Resolves `path` (default: `base`) against `base` (canonical, inside the canonical `root`),
/// confined to `root`.
///
/// # Errors
/// [`SearchError::InvalidArgs`] for a blank path, [`SearchError::PathNotFound`] when it does not
/// exist, [`SearchError::OutsideWorkspace`] when its canonical form is not under `root`.
pub fn resolve_in(root: &Path, base: &Path, path: Option<&str>) -> Result<PathBuf, SearchError> {
    let Some(p) = path else {
        return Ok(base.to_path_buf());
    };
    if p.trim().is_empty() {
        return Err(SearchError::InvalidArgs(
            "path must be a non-empty string when given".into(),
        ));
    }
    let joined = base.join(p);
    // Reject lexical escapes even when the target does not exist (no existence oracle outside).
    if !lexically_inside(root, &joined) && !Path::new(p).is_absolute() {
        return Err(SearchError::OutsideWorkspace(p.to_string()));
    }
    let canon = joined.canonicalize().map_err(|_| {
        if lexically_inside(root, &joined) {
            SearchError::PathNotFound(p.to_string())
        } else {
            SearchError::OutsideWorkspace(p.to_string())
        }
    })?;
    if !canon.starts_with(root) {
        return Err(SearchError::OutsideWorkspace(p.to_string()));
    }
    Ok(canon)
}

fn lexically_inside(root: &Path, p: &Path) -> bool {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return false;
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out.starts_with(root)
}

/// `path` relative to `root` with `/` separators (`.` for the root itself); a path outside the
/// root is returned as-is.
pub fn display(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => {
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            parts.join("/")
        }
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

/// `path` relative to `base` with `/` separators (`.` for `base` itself), climbing with `..`
/// out of `base` while staying inside `root` (`base` lies in `root`); a path outside `root` is
/// returned as-is.
pub fn display_from(root: &Path, base: &Path, path: &Path) -> String {
    if path.strip_prefix(base).is_ok() || !path.starts_with(root) {
        return display(base, path);
    }
    let mut up = 0usize;
    let mut anchor = base;
    while !path.starts_with(anchor) {
        match anchor.parent() {
            Some(parent) if parent.starts_with(root) => {
                anchor = parent;
                up += 1;
            }
            _ => return display(root, path),
        }
    }
    let mut parts = vec![".."; up].join("/");
    let rest = display(anchor, path);
    if rest != "." {
        parts.push('/');
        parts.push_str(&rest);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_paths_are_relative_to_the_base() {
        let root = Path::new("/ws");
        let base = Path::new("/ws/a/b");
        assert_eq!(
            display_from(root, base, Path::new("/ws/a/b/c.txt")),
            "c.txt"
        );
        assert_eq!(display_from(root, base, Path::new("/ws/a/b")), ".");
        assert_eq!(
            display_from(root, base, Path::new("/ws/a/x.txt")),
            "../x.txt"
        );
        assert_eq!(
            display_from(root, base, Path::new("/ws/top.txt")),
            "../../top.txt"
        );
        assert_eq!(display_from(root, base, Path::new("/ws")), "../..");
        assert_eq!(display_from(root, base, Path::new("/ws/d/e")), "../../d/e");
        assert_eq!(
            display_from(root, base, Path::new("/elsewhere/f")),
            "/elsewhere/f"
        );
        assert_eq!(
            display_from(root, root, Path::new("/ws/a/x.txt")),
            "a/x.txt"
        );
    }
}
