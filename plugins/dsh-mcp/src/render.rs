//! An MCP `tools/call` result as model content (upstream's rendering, docs/upstream/mcp.md
//! "Results"): block order kept, text runs joined by `\n`, `resource_link` as
//! `Resource link: <name> (<uri>)`, other kinds as a bracketed note.

use serde_json::Value;

/// The text of a result's `content` blocks.
pub fn content_text(content: &[Value]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in content {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let s = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
        parts.push(match kind {
            "text" => s("text").to_owned(),
            "resource_link" => format!("Resource link: {} ({})", s("name"), s("uri")),
            "image" => format!(
                "[image content ({}) omitted: not supported here]",
                s("mimeType")
            ),
            "audio" => format!(
                "[audio content ({}) omitted: not supported here]",
                s("mimeType")
            ),
            "resource" => {
                let r = block.get("resource").cloned().unwrap_or_default();
                match r.get("text").and_then(Value::as_str) {
                    Some(t) => t.to_owned(),
                    None => format!(
                        "[embedded resource {} omitted: binary content]",
                        r.get("uri").and_then(Value::as_str).unwrap_or("")
                    ),
                }
            }
            other => format!("[unsupported MCP content type {other:?} omitted]"),
        });
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn blocks_in_order() {
        assert_eq!(
            content_text(&[
                json!({"type": "text", "text": "a"}),
                json!({"type": "resource_link", "name": "n", "uri": "file:///x"}),
                json!({"type": "image", "data": "..", "mimeType": "image/png"}),
                json!({"type": "text", "text": "b"}),
            ]),
            "a\nResource link: n (file:///x)\n[image content (image/png) omitted: not supported here]\nb"
        );
    }
}
