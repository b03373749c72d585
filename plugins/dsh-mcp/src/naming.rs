//! Tool names: `mcp__<server>__<tool>`, normalised with a hash fallback (upstream's rule,
//! docs/upstream/mcp.md "Naming").

use sha2::{Digest, Sha256};

/// The longest tool name a provider accepts.
pub const MAX_TOOL_NAME: usize = 64;

/// The dsh tool name of MCP tool `raw` of server `server`: `mcp__<server>__<raw>`; when that
/// has a character outside `[A-Za-z0-9_-]` (each replaced by `_`) or is longer than 64, the
/// first 51 characters of the normalised name, `_`, and the first 12 hex digits of
/// sha256(`server` NUL `raw`).
pub fn tool_name(server: &str, raw: &str) -> String {
    let full = format!("mcp__{server}__{raw}");
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if full.len() <= MAX_TOOL_NAME && full.chars().all(ok) {
        return full;
    }
    let normalized: String = full.chars().map(|c| if ok(c) { c } else { '_' }).collect();
    let mut h = Sha256::new();
    h.update(server.as_bytes());
    h.update([0u8]);
    h.update(raw.as_bytes());
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let head: String = normalized.chars().take(51).collect();
    format!("{head}_{}", &hex[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            tool_name("time", "get_current_time"),
            "mcp__time__get_current_time"
        );
        let n = tool_name("s", "a.b");
        assert!(n.starts_with("mcp__s__a_b_"), "{n}");
        assert_eq!(n.len(), "mcp__s__a_b_".len() + 12);
        let long = tool_name("server", &"x".repeat(80));
        assert_eq!(long.len(), 64);
        assert!(long.starts_with("mcp__server__xxx"));
        assert_ne!(tool_name("s", "a.b"), tool_name("s", "a_b"));
    }
}
