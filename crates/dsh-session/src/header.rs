//! The session header: immutable creation metadata kept outside the event log (line 1 of a JSONL
//! log).
//!
//! See docs/upstream/session.md (Session header; Seeds, fork, end-seed).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::SessionError;
use crate::event::SESSION_FORMAT_VERSION;
use crate::lossless::MAX_SAFE_INTEGER;

/// Session creation metadata. JSON (key order dsh writes):
/// `{"type":"session","version":0,"id","createdAt","cwd"?,"parentSession"?,"seedLength"?,
/// "origin"?,"delegationDepth"?,"agentPreset"?, …extra}`; `createdAt` in epoch ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    /// Always `"session"` on the wire.
    #[serde(rename = "type", default = "session_tag")]
    pub record_type: String,
    /// Format version (must be [`SESSION_FORMAT_VERSION`]).
    pub version: u64,
    /// The session id.
    pub id: String,
    /// Creation time, epoch ms (safe integer).
    pub created_at: u64,
    /// Absolute working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The session this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// Number of seed events copied from the parent (durable fork boundary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_length: Option<u64>,
    /// `"subagent"` for delegated sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Delegation depth (absent ⇒ 0 when reading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_depth: Option<u64>,
    /// The agent preset the session was created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_preset: Option<String>,
    /// Any other header field, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn session_tag() -> String {
    "session".to_owned()
}

impl SessionHeader {
    /// A minimal header: version 0, `id`, `createdAt` = `created_at_ms`, delegation depth 0.
    pub fn new(id: impl Into<String>, created_at_ms: u64) -> Self {
        Self {
            record_type: session_tag(),
            version: SESSION_FORMAT_VERSION,
            id: id.into(),
            created_at: created_at_ms,
            cwd: None,
            parent_session: None,
            seed_length: None,
            origin: None,
            delegation_depth: Some(0),
            agent_preset: None,
            extra: Map::new(),
        }
    }

    /// Delegation depth, absent read as 0.
    pub fn depth(&self) -> u64 {
        self.delegation_depth.unwrap_or(0)
    }

    /// Validates the header: the one header validator of dsh (the session log and every storage
    /// backend apply it).
    ///
    /// # Errors
    /// [`SessionError::FormatUnsupported`] when `type` is not `session`, `version` is not 0
    /// (message says "newer, upgrade dsh" or "older, no upgrade path"), `id` is empty,
    /// `createdAt` or `delegationDepth` is not a safe integer, `cwd` is not absolute, `origin` is
    /// neither absent nor `subagent`, or the retired `sandboxMode`/`approvalPolicy` fields are
    /// present.
    pub fn validate(&self) -> Result<(), SessionError> {
        let bad = |m: String| Err(SessionError::FormatUnsupported { message: m });
        if self.record_type != "session" {
            return bad(format!(
                "header type `{}` is not `session`",
                self.record_type
            ));
        }
        if self.version != SESSION_FORMAT_VERSION {
            let which = if self.version > SESSION_FORMAT_VERSION {
                "newer; upgrade dsh"
            } else {
                "older; no upgrade path"
            };
            return bad(format!(
                "log format version {} is not {SESSION_FORMAT_VERSION} ({which})",
                self.version
            ));
        }
        if self.id.is_empty() {
            return bad("empty session id".to_owned());
        }
        if self.created_at > MAX_SAFE_INTEGER {
            return bad("createdAt is not a safe integer".to_owned());
        }
        if self.depth() > MAX_SAFE_INTEGER {
            return bad("delegationDepth is not a safe integer".to_owned());
        }
        if let Some(cwd) = &self.cwd
            && !is_absolute(cwd)
        {
            return bad(format!("cwd `{cwd}` is not absolute"));
        }
        if let Some(origin) = &self.origin
            && origin != "subagent"
        {
            return bad(format!("origin `{origin}` is not `subagent`"));
        }
        if self.extra.contains_key("sandboxMode") || self.extra.contains_key("approvalPolicy") {
            return bad("uses retired policy baseline fields".to_owned());
        }
        Ok(())
    }
}

/// True for a POSIX absolute path or a Windows drive/UNC absolute path.
pub(crate) fn is_absolute(p: &str) -> bool {
    let b = p.as_bytes();
    p.starts_with('/')
        || p.starts_with("\\\\")
        || (b.len() >= 3
            && b[0].is_ascii_alphabetic()
            && b[1] == b':'
            && (b[2] == b'\\' || b[2] == b'/'))
}
