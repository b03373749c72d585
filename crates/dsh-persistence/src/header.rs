//! [`SessionHeader`]: the immutable per-session metadata kept outside the event log, and its JSONL
//! header-line form (`{"type":"session",…}`).
//!
//! Behaviour: `docs/persistence.md` ("Session header").

use std::path::Path;

use serde_json::Value;

use crate::error::{PersistenceError, Result, UnsupportedReason};

/// The session log format version this build reads and writes (upstream v0, pre-release).
pub use dsh_session::SESSION_FORMAT_VERSION;

/// Largest integer exactly representable as a JS number (`2^53 - 1`); bound for `createdAt`.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Immutable session metadata: re-exported from `dsh-session`, the one
/// header type shared by the session log and every backend.
pub use dsh_session::SessionHeader;

/// Validates a header for storage: [`check_version`] first (a typed, direction-aware refusal),
/// then the one header validator, `SessionHeader::validate` of `dsh-session` (type, id,
/// `createdAt`/`delegationDepth` ≤ 2^53-1, absolute `cwd`, `origin` ∈ {`subagent`}, no retired
/// `sandboxMode`/`approvalPolicy` fields).
///
/// # Errors
/// [`PersistenceError::FormatUnsupported`] for another version;
/// [`PersistenceError::InvalidHeader`] for a shape defect.
pub fn validate_header(header: &SessionHeader) -> Result<()> {
    check_version(&header.id, header.version, None)?;
    header
        .validate()
        .map_err(|e| PersistenceError::InvalidHeader {
            detail: match e {
                dsh_session::SessionError::FormatUnsupported { message } => message,
                other => other.to_string(),
            },
        })
}

/// The header as stored: `delegationDepth` always present (absent ⇒ 0), `type` = `session`.
pub fn normalize_header(header: &SessionHeader) -> SessionHeader {
    let mut h = header.clone();
    h.delegation_depth = Some(h.depth());
    h.record_type = "session".into();
    h
}

/// Serializes the JSONL header line (no newline) in the upstream key order
/// (`type, version, id, createdAt, cwd?, parentSession?, seedLength?, origin?, delegationDepth,
/// agentPreset?`, then extra fields verbatim); `delegationDepth` is always written.
pub fn header_to_line(header: &SessionHeader) -> String {
    serde_json::to_string(&normalize_header(header)).unwrap_or_default()
}

/// Parses a JSONL header line (without its newline). `id_hint` names the session in errors and
/// `location` is attached to a format-unsupported error. A foreign `version` is refused before
/// any shape check.
///
/// # Errors
/// [`PersistenceError::FormatUnsupported`] (newer/older version);
/// [`PersistenceError::Corruption`] (line 1) for invalid JSON or a non-header first line.
pub fn parse_header_line(
    line: &[u8],
    id_hint: &str,
    location: Option<&Path>,
) -> Result<SessionHeader> {
    let value: Value = serde_json::from_slice(line).map_err(|e| {
        PersistenceError::corruption(
            id_hint,
            Some(1),
            format!("header line is not valid JSON: {e}"),
        )
    })?;
    parse_header_value(value, id_hint, location)
}

/// Like [`parse_header_line`] from an already parsed value.
///
/// # Errors
/// As [`parse_header_line`].
pub fn parse_header_value(
    value: Value,
    id_hint: &str,
    location: Option<&Path>,
) -> Result<SessionHeader> {
    let corrupt = |d: &str| {
        PersistenceError::corruption(
            id_hint,
            Some(1),
            format!("first line is not a session header: {d}"),
        )
    };
    let Value::Object(obj) = value else {
        return Err(corrupt("not an object"));
    };
    let id_for_msg = obj
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or(id_hint)
        .to_owned();
    if let Some(v) = obj.get("version").and_then(Value::as_u64) {
        check_version(&id_for_msg, v, location)?;
    }
    if obj.get("type").and_then(Value::as_str) != Some("session") {
        return Err(corrupt("type is not \"session\""));
    }
    let header: SessionHeader =
        serde_json::from_value(Value::Object(obj)).map_err(|e| corrupt(&e.to_string()))?;
    validate_header(&header).map_err(|e| match e {
        PersistenceError::InvalidHeader { detail } => corrupt(&detail),
        other => other,
    })?;
    Ok(header)
}

/// Refuses a foreign format version with a direction-aware [`PersistenceError::FormatUnsupported`].
///
/// # Errors
/// `FormatUnsupported { reason: NewerVersion | OlderVersion }` when `version` ≠
/// [`SESSION_FORMAT_VERSION`].
pub fn check_version(id: &str, version: u64, location: Option<&Path>) -> Result<()> {
    if version == SESSION_FORMAT_VERSION {
        return Ok(());
    }
    let reason = if version > SESSION_FORMAT_VERSION {
        UnsupportedReason::NewerVersion { version }
    } else {
        UnsupportedReason::OlderVersion { version }
    };
    Err(PersistenceError::FormatUnsupported {
        id: id.to_owned(),
        reason,
        location: location.map(ToOwned::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_kernel::ErrorCode;

    #[test]
    fn header_line_round_trip_and_order() {
        let mut h = SessionHeader::new("s1", 5);
        h.cwd = Some("/w".into());
        h.parent_session = Some("p".into());
        h.origin = Some("subagent".into());
        h.delegation_depth = Some(1);
        let line = header_to_line(&h);
        assert_eq!(
            line,
            r#"{"type":"session","version":0,"id":"s1","createdAt":5,"cwd":"/w","parentSession":"p","origin":"subagent","delegationDepth":1}"#
        );
        assert_eq!(parse_header_line(line.as_bytes(), "s1", None).unwrap(), h);
    }

    #[test]
    fn missing_delegation_depth_reads_zero_and_is_written() {
        let h = parse_header_line(
            br#"{"type":"session","version":0,"id":"x","createdAt":0}"#,
            "x",
            None,
        )
        .unwrap();
        assert_eq!(h.depth(), 0);
        assert_eq!(
            header_to_line(&h),
            r#"{"type":"session","version":0,"id":"x","createdAt":0,"delegationDepth":0}"#
        );
    }

    #[test]
    fn newer_and_older_versions() {
        let e = parse_header_line(
            br#"{"type":"session","version":7,"id":"x","whatever":[]}"#,
            "x",
            None,
        )
        .unwrap_err();
        assert_eq!(e.code(), "SESSION_FORMAT_UNSUPPORTED");
        assert!(e.to_string().contains("newer"), "{e}");
        assert!(matches!(
            e,
            PersistenceError::FormatUnsupported {
                reason: UnsupportedReason::NewerVersion { version: 7 },
                ..
            }
        ));
        // No version below v0 exists; "older" becomes reachable once the current version rises.
        let msg = UnsupportedReason::OlderVersion { version: 0 }.to_string();
        assert!(msg.contains("older"), "{msg}");
    }

    #[test]
    fn invalid_headers_are_corruption() {
        for bad in [
            &br#"{"type":"session","version":0,"id":"x","createdAt":-1}"#[..],
            br#"{"type":"session","version":0,"id":"x","createdAt":9007199254740992}"#,
            br#"{"type":"session","version":0,"id":"x","createdAt":1,"cwd":"rel"}"#,
            br#"{"type":"session","version":0,"id":"x","createdAt":1,"origin":"other"}"#,
            br#"{"type":"session","version":0,"id":"x","createdAt":1,"sandboxMode":"x"}"#,
            br#"{"type":"turn/start","seq":0}"#,
            b"not json",
        ] {
            let e = parse_header_line(bad, "x", None).unwrap_err();
            assert_eq!(
                e.code(),
                "SESSION_PERSISTENCE_CORRUPTION",
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
