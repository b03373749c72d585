//! Upstream's heuristic token estimate (no tokenizer): about four characters per token plus a
//! fixed overhead per block and per message.
//!
//! Lengths are JavaScript string lengths, i.e. UTF-16 code units ([`js_len`]), and JSON is the
//! compact serialisation (`JSON.stringify`), so the numbers equal upstream's for the same log.
//! See docs/upstream/compaction.md (Token meter).

use dsh_llm::{ContentBlock, EpochHeader, Message};
use serde_json::Value;

/// Per-block and per-message overhead, in tokens.
pub const OVERHEAD: u64 = 4;

/// Length of `s` in UTF-16 code units (JavaScript `String.length`): `"é"` is 1, `"😀"` is 2.
pub fn js_len(s: &str) -> u64 {
    s.encode_utf16().count() as u64
}

fn quarter(len: u64) -> u64 {
    len.div_ceil(4)
}

/// `ceil(len(text) / 4) + 4` tokens: a text or reasoning block.
pub fn estimate_text(text: &str) -> u64 {
    quarter(js_len(text)) + OVERHEAD
}

fn json_len(v: &impl serde::Serialize) -> u64 {
    serde_json::to_string(v).map_or(0, |s| js_len(&s))
}

/// Tokens of one content block: text/reasoning `ceil(len/4)+4`; tool call
/// `ceil(len(name)/4) + ceil(len(arguments)/4) + 4`; tool result = its nested blocks + 4; any
/// other block (image, unknown) `4 + ceil(len(compact JSON of the block)/4)`.
pub fn estimate_content(block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Text { text } | ContentBlock::Reasoning { text } => estimate_text(text),
        ContentBlock::ToolCall {
            name, arguments, ..
        } => quarter(js_len(name)) + quarter(js_len(arguments)) + OVERHEAD,
        ContentBlock::ToolResult { content, .. } => {
            content.iter().map(estimate_content).sum::<u64>() + OVERHEAD
        }
        other => OVERHEAD + quarter(json_len(other)),
    }
}

/// Tokens of one message: its blocks plus 4 for the role.
pub fn estimate_message(message: &Message) -> u64 {
    message.content.iter().map(estimate_content).sum::<u64>() + OVERHEAD
}

/// Tokens of the system prompt: `ceil(len/4)+4`, 0 when absent or empty.
pub fn estimate_system(system: Option<&str>) -> u64 {
    match system {
        Some(s) if !s.is_empty() => estimate_text(s),
        _ => 0,
    }
}

/// Tokens of the tool schemas: `ceil(len(compact JSON of the list)/4)+4`, 0 when there are none
/// (absent, `null` or an empty array).
pub fn estimate_tools(tools: Option<&Value>) -> u64 {
    match tools {
        None | Some(Value::Null) => 0,
        Some(Value::Array(a)) if a.is_empty() => 0,
        Some(v) => quarter(json_len(v)) + OVERHEAD,
    }
}

/// System prompt plus tool schemas of a request header: what no compaction can remove.
pub fn estimate_header(header: &EpochHeader) -> u64 {
    estimate_system(header.system.as_deref()) + estimate_tools(header.tools.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lengths_are_utf16_code_units() {
        assert_eq!(js_len("abc"), 3);
        assert_eq!(js_len("é"), 1);
        assert_eq!(js_len("😀"), 2);
        assert_eq!(js_len(""), 0);
    }

    #[test]
    fn block_estimates_match_the_upstream_formulas() {
        assert_eq!(estimate_text(""), 4);
        assert_eq!(estimate_text("abcd"), 5);
        assert_eq!(estimate_text("abcde"), 6);
        // 5 emoji = 10 UTF-16 units = 3 tokens + 4.
        assert_eq!(estimate_text("😀😀😀😀😀"), 7);
        assert_eq!(estimate_content(&ContentBlock::reasoning("12345678")), 6);
        // name 4 → 1, arguments `{"command":"ls"}` (16) → 4, + 4.
        let call = ContentBlock::tool_call("c1", "bash", r#"{"command":"ls"}"#);
        assert_eq!(estimate_content(&call), 9);
        // nested text "hello" → 2+4 = 6, + 4.
        let result = Message::tool_result("c1".into(), vec![ContentBlock::text("hello")], false);
        assert_eq!(estimate_content(&result.content[0]), 10);
        assert_eq!(estimate_message(&result), 14);
        // {"type":"image","attachment":{"id":"a"}} is 40 characters → 10 + 4.
        let image = ContentBlock::Image {
            attachment: json!({"id": "a"}),
        };
        assert_eq!(
            serde_json::to_string(&image).map(|s| s.len()).ok(),
            Some(40)
        );
        assert_eq!(estimate_content(&image), 14);
    }

    #[test]
    fn message_system_and_tools() {
        let m = Message::user_text("abcdefgh");
        assert_eq!(estimate_message(&m), 10);
        assert_eq!(estimate_system(None), 0);
        assert_eq!(estimate_system(Some("")), 0);
        assert_eq!(estimate_system(Some("You are dsh.")), 7);
        assert_eq!(estimate_tools(None), 0);
        assert_eq!(estimate_tools(Some(&json!([]))), 0);
        // [{"name":"a"}] is 14 characters → 4 + 4.
        assert_eq!(estimate_tools(Some(&json!([{"name": "a"}]))), 8);
    }
}
