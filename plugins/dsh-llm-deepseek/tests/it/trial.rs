//! Issue 13, provider defects a hostile trial found: calls sharing an id, a password in the base
//! URL, an unbounded SSE line, a same-origin redirect loop, an overflowing `Retry-After`, a base
//! URL with a query or fragment, and zero timeouts.

use dsh_llm::{FinishReason, StreamChunk};
use dsh_llm_deepseek::{StreamTranslator, translate_sse_bytes};
use serde_json::json;

/// The `(id, name, arguments)` of every finished call.
fn calls(chunks: &[StreamChunk]) -> Vec<(String, String, String)> {
    chunks
        .iter()
        .filter_map(|c| match c {
            StreamChunk::BlockEnd {
                block:
                    dsh_llm::ContentBlock::ToolCall {
                        id,
                        name,
                        arguments,
                    },
                ..
            } => Some((id.as_str().to_owned(), name.clone(), arguments.clone())),
            _ => None,
        })
        .collect()
}

fn assert_synthesized(id: &str) {
    let hex = id
        .strip_prefix("call_dsh_")
        .unwrap_or_else(|| panic!("{id}"));
    assert_eq!(hex.len(), 32, "{id}");
    assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
}

#[test]
fn two_calls_sharing_a_wire_id_in_one_delta_stay_two_calls() {
    let body = concat!(
        "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[",
        "{\"index\":0,\"id\":\"X\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"file_path\\\":\\\"a.txt\\\"}\"}},",
        "{\"index\":1,\"id\":\"X\",\"function\":{\"name\":\"glob\",\"arguments\":\"{\\\"pattern\\\":\\\"*.txt\\\"}\"}}",
        "]}}]}\n\n",
        "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    for read in [1, 7, 64 * 1024] {
        let out = translate_sse_bytes(body.as_bytes(), read);
        let got = calls(&out);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            (got[0].0.as_str(), got[0].1.as_str(), got[0].2.as_str()),
            ("X", "read", "{\"file_path\":\"a.txt\"}")
        );
        assert_synthesized(&got[1].0);
        assert_eq!(
            (got[1].1.as_str(), got[1].2.as_str()),
            ("glob", "{\"pattern\":\"*.txt\"}")
        );
        assert!(matches!(
            out.last(),
            Some(StreamChunk::Finish {
                reason: FinishReason::ToolCalls,
                ..
            })
        ));
    }
    // later fragments keyed by index still reach their own call
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"X\",\"function\":{\"name\":\"read\",\"arguments\":\"{\"}},{\"index\":1,\"id\":\"X\",\"function\":{\"name\":\"glob\",\"arguments\":\"[\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"X\",\"function\":{\"arguments\":\"]\"}},{\"index\":0,\"function\":{\"arguments\":\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    let got = calls(&translate_sse_bytes(body.as_bytes(), 64));
    let names: Vec<(&str, &str)> = got
        .iter()
        .map(|(_, n, a)| (n.as_str(), a.as_str()))
        .collect();
    assert_eq!(names, [("read", "{}"), ("glob", "[]")]);
    assert_eq!(got[0].0, "X");
    assert_synthesized(&got[1].0);
}

#[test]
fn a_non_streaming_body_with_a_repeated_call_id_keeps_both_calls() {
    let body = json!({"id":"r","choices":[{"index":0,"finish_reason":"tool_calls","message":{
    "role":"assistant","content":null,"tool_calls":[
        {"id":"X","type":"function","function":{"name":"read","arguments":"{\"file_path\":\"a.txt\"}"}},
        {"id":"X","type":"function","function":{"name":"glob","arguments":"{\"pattern\":\"*.txt\"}"}}
    ]}}]});
    let mut tr = StreamTranslator::new();
    let mut out = Vec::new();
    tr.push_completion(&body.to_string(), &mut out);
    let got = calls(&out);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0, "X");
    assert_eq!(got[0].2, "{\"file_path\":\"a.txt\"}");
    assert_synthesized(&got[1].0);
    assert_eq!(got[1].2, "{\"pattern\":\"*.txt\"}");
}
