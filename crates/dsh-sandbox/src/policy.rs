//! Policy shapes: [`SandboxMode`], [`SandboxPolicy`], [`writable_roots`], the per-session mode
//! resolution ([`resolve_mode`]) and escalation validation ([`validate_escalation`]).
//! Behaviour: `docs/upstream/sandbox.md` ("Policy").

use std::path::{Component, Path, PathBuf};

use dsh_session::{EventData, Session};
use serde::{Deserialize, Serialize};

use crate::SandboxError;

/// Log-only event recording a session's sandbox mode change (`{mode, source?}`); the latest
/// one wins.
pub const EVENT_MODE: &str = "sandbox/mode";

/// What a confined command may modify. Serialized kebab-case: `read-only`, `workspace-write`,
/// `danger-full-access`. Governs file effects; the network of a confined command is governed
/// separately (`[sandbox] network`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Nothing may be written (but `/dev/null`).
    ReadOnly,
    /// The workspace, `/tmp` and `$TMPDIR` may be written.
    WorkspaceWrite,
    /// Unconfined.
    DangerFullAccess,
}

impl SandboxMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::DangerFullAccess => "danger-full-access",
        }
    }

    /// Parses a wire name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "read-only" => Some(Self::ReadOnly),
            "workspace-write" => Some(Self::WorkspaceWrite),
            "danger-full-access" => Some(Self::DangerFullAccess),
            _ => None,
        }
    }
}

impl std::fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The policy one command runs under: the mode and the canonical workspace root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// The mode.
    pub mode: SandboxMode,
    /// Absolute, canonical (realpath, then lexically normalised) workspace root.
    pub workspace_root: PathBuf,
}

impl SandboxPolicy {
    /// A policy for `mode` rooted at `root`, canonicalised with [`canonical`].
    pub fn new(mode: SandboxMode, root: &Path) -> Self {
        Self {
            mode,
            workspace_root: canonical(root),
        }
    }
}

/// `path` made absolute (against the process cwd), resolved through symlinks when it exists
/// (else its longest existing ancestor is, and the rest appended), then lexically normalised.
pub fn canonical(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|c| c.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let abs = normalise(&abs);
    if let Ok(real) = std::fs::canonicalize(&abs) {
        return real;
    }
    let mut rest = Vec::new();
    let mut cur = abs.as_path();
    while let Some(parent) = cur.parent() {
        if let Some(name) = cur.file_name() {
            rest.push(name.to_owned());
        }
        if let Ok(real) = std::fs::canonicalize(parent) {
            let mut out = real;
            for n in rest.iter().rev() {
                out.push(n);
            }
            return out;
        }
        cur = parent;
    }
    abs
}

fn normalise(p: &Path) -> PathBuf {
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

/// The roots a confined command may write: none unless `workspace-write`, then the canonical,
/// de-duplicated `[workspace root, /tmp, $TMPDIR]` (`$TMPDIR` only when set and absolute).
/// The same list the filesystem tools' fence uses.
pub fn writable_roots(policy: &SandboxPolicy) -> Vec<PathBuf> {
    if policy.mode != SandboxMode::WorkspaceWrite {
        return Vec::new();
    }
    let mut roots = vec![policy.workspace_root.clone(), canonical(Path::new("/tmp"))];
    if let Some(t) = std::env::var_os("TMPDIR").map(PathBuf::from)
        && t.is_absolute()
    {
        roots.push(canonical(&t));
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for r in roots {
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

/// The payload of [`EVENT_MODE`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModeData {
    /// The mode from now on.
    pub mode: SandboxMode,
    /// `"delegation"` when a parent agent imposed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The latest [`EVENT_MODE`] of `session`, if any.
pub fn logged_mode(session: &Session) -> Option<SandboxMode> {
    session.events().iter().rev().find_map(|e| {
        if e.kind.as_str() != EVENT_MODE {
            return None;
        }
        match &e.data {
            EventData::Opaque(v) => serde_json::from_value::<ModeData>(v.clone())
                .ok()
                .map(|d| d.mode),
            _ => None,
        }
    })
}

/// The mode of one call: an approved one-shot `escalated` mode, else the session's latest
/// [`EVENT_MODE`], else `configured`.
pub fn resolve_mode(
    escalated: Option<SandboxMode>,
    session: Option<&Session>,
    configured: SandboxMode,
) -> SandboxMode {
    escalated
        .or_else(|| session.and_then(logged_mode))
        .unwrap_or(configured)
}

/// Checks a tool call's escalation fields against the call's effective `mode`: both or neither
/// of `sandbox_permissions` and `justification` (non-blank); a requested mode strictly wider
/// than `mode`. Returns the requested mode and the trimmed justification, or `None` when the
/// call asks for nothing.
///
/// # Errors
/// [`SandboxError::InvalidEscalation`] with a fixed text naming the problem.
pub fn validate_escalation(
    mode: SandboxMode,
    requested: Option<SandboxMode>,
    justification: Option<&str>,
) -> Result<Option<(SandboxMode, String)>, SandboxError> {
    match (requested, justification) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(SandboxError::InvalidEscalation(
            "invalid escalation: sandbox_permissions requires a justification".into(),
        )),
        (None, Some(_)) => Err(SandboxError::InvalidEscalation(
            "invalid escalation: justification requires sandbox_permissions".into(),
        )),
        (Some(_), Some(j)) if j.trim().is_empty() => Err(SandboxError::InvalidEscalation(
            "invalid escalation: justification must not be blank".into(),
        )),
        (Some(r), Some(_)) if r <= mode => Err(SandboxError::InvalidEscalation(format!(
            "invalid escalation: \"{r}\" is not wider than the current sandbox mode \"{mode}\""
        ))),
        (Some(r), Some(j)) => Ok(Some((r, j.trim().to_owned()))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn writable_roots_by_mode() {
        let dir = tempfile::tempdir().unwrap();
        let ro = SandboxPolicy::new(SandboxMode::ReadOnly, dir.path());
        assert_eq!(writable_roots(&ro), Vec::<PathBuf>::new());
        let ws = SandboxPolicy::new(SandboxMode::WorkspaceWrite, dir.path());
        let roots = writable_roots(&ws);
        assert_eq!(roots[0], std::fs::canonicalize(dir.path()).unwrap());
        assert_eq!(roots[1], PathBuf::from("/tmp"));
    }

    #[test]
    fn escalation_rules() {
        use SandboxMode::*;
        assert_eq!(validate_escalation(ReadOnly, None, None), Ok(None));
        assert_eq!(
            validate_escalation(ReadOnly, Some(WorkspaceWrite), Some(" why ")),
            Ok(Some((WorkspaceWrite, "why".into())))
        );
        assert_eq!(
            validate_escalation(WorkspaceWrite, Some(WorkspaceWrite), Some("x"))
                .unwrap_err()
                .to_string(),
            "invalid escalation: \"workspace-write\" is not wider than the current sandbox mode \"workspace-write\""
        );
        assert_eq!(
            validate_escalation(ReadOnly, Some(DangerFullAccess), None)
                .unwrap_err()
                .to_string(),
            "invalid escalation: sandbox_permissions requires a justification"
        );
    }

    #[test]
    fn canonical_of_missing_tail() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(canonical(&dir.path().join("a/../b")), real.join("b"));
    }
}
