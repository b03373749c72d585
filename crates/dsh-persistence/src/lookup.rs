//! Finding stored sessions the way a person names them: by any unambiguous prefix of the id, and
//! in the order people look for them (last activity, newest first).
//!
//! Session ids are time-ordered UUIDs (version 7), so the first 8 characters of sessions made the
//! same day often coincide: a prefix that matches several ids is an error listing them
//! ([`IdLookupError::Ambiguous`]). Behaviour: `docs/persistence.md` ("Finding a session").

use crate::inspect::SessionSummary;

/// At most this many candidates are named in an [`IdLookupError::Ambiguous`] message.
pub const MAX_LISTED_CANDIDATES: usize = 10;

/// Why a session id (or prefix) names no single stored session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum IdLookupError {
    /// No stored id starts with the prefix (or the prefix is empty). Code `SESSION_NOT_FOUND`.
    #[error("no stored session `{prefix}` (see `dsh sessions list`)")]
    #[code("SESSION_NOT_FOUND")]
    NotFound {
        /// What the user typed.
        prefix: String,
    },
    /// Several stored ids start with the prefix. Code `SESSION_ID_AMBIGUOUS`. `candidates` holds
    /// every match, in the order given to [`resolve_id`]; the message names at most
    /// [`MAX_LISTED_CANDIDATES`] of them.
    #[error(
        "session id prefix `{prefix}` matches {} stored sessions: {}{}; type more characters",
        candidates.len(),
        candidates.iter().take(MAX_LISTED_CANDIDATES).cloned().collect::<Vec<_>>().join(", "),
        if candidates.len() > MAX_LISTED_CANDIDATES { ", …" } else { "" }
    )]
    #[code("SESSION_ID_AMBIGUOUS")]
    Ambiguous {
        /// What the user typed.
        prefix: String,
        /// The matching ids.
        candidates: Vec<String>,
    },
}

/// The one id of `ids` that `prefix` names: an exact match wins; otherwise the single id that
/// starts with `prefix` (compared case-insensitively, since ids are lowercase hex and people
/// copy them from anywhere).
///
/// # Errors
/// [`IdLookupError::NotFound`] for no match or an empty prefix; [`IdLookupError::Ambiguous`]
/// (every match, in `ids` order) for several.
pub fn resolve_id<'a>(
    ids: impl IntoIterator<Item = &'a str>,
    prefix: &str,
) -> Result<String, IdLookupError> {
    let wanted = prefix.trim().to_ascii_lowercase();
    if wanted.is_empty() {
        return Err(IdLookupError::NotFound {
            prefix: prefix.to_owned(),
        });
    }
    let mut matches: Vec<String> = Vec::new();
    for id in ids {
        let lower = id.to_ascii_lowercase();
        if lower == wanted {
            return Ok(id.to_owned());
        }
        if lower.starts_with(&wanted) && !matches.iter().any(|m| m == id) {
            matches.push(id.to_owned());
        }
    }
    match matches.len() {
        0 => Err(IdLookupError::NotFound {
            prefix: prefix.to_owned(),
        }),
        1 => Ok(matches.remove(0)),
        _ => Err(IdLookupError::Ambiguous {
            prefix: prefix.to_owned(),
            candidates: matches,
        }),
    }
}

/// Sorts `rows` the way every session list shows them: last activity, newest first, then
/// creation time (newest first), then id (ascending) so equal times have a stable order.
pub fn sort_by_activity(rows: &mut [SessionSummary]) {
    rows.sort_by(|a, b| {
        b.last_activity
            .cmp(&a.last_activity)
            .then(b.header.created_at.cmp(&a.header.created_at))
            .then(a.header.id.cmp(&b.header.id))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDS: [&str; 3] = [
        "01a231a7-9db3-73a9-88b2-b6b56fc09133",
        "01a231a7-9db3-7400-8000-000000000001",
        "01a231a8-0000-7000-8000-000000000002",
    ];

    #[test]
    fn a_unique_prefix_names_its_session() {
        assert_eq!(resolve_id(IDS, "01a231a8").unwrap(), IDS[2]);
        assert_eq!(resolve_id(IDS, "01A231A7-9DB3-73").unwrap(), IDS[0]);
        assert_eq!(resolve_id(IDS, IDS[1]).unwrap(), IDS[1]);
    }

    #[test]
    fn an_ambiguous_prefix_lists_the_candidates() {
        let e = resolve_id(IDS, "01a231a7").unwrap_err();
        assert_eq!(
            e,
            IdLookupError::Ambiguous {
                prefix: "01a231a7".into(),
                candidates: vec![IDS[0].into(), IDS[1].into()],
            }
        );
        assert_eq!(
            e.to_string(),
            format!(
                "session id prefix `01a231a7` matches 2 stored sessions: {}, {}; type more characters",
                IDS[0], IDS[1]
            )
        );
        assert_eq!(dsh_kernel::ErrorCode::code(&e), "SESSION_ID_AMBIGUOUS");
    }

    #[test]
    fn no_match_and_empty_are_not_found() {
        for p in ["", "  ", "ff"] {
            assert!(matches!(
                resolve_id(IDS, p),
                Err(IdLookupError::NotFound { .. })
            ));
        }
    }
}
