//! Stored logs whose core payloads carry fields dsh does not model (an extra key in a message's
//! `source`, on a tool call, on usage, on a content part, on the payload itself) are carried through unchanged: they parse, restore with full validation, derive the
//! same messages as without the extra keys, and re-serialize to records equal as JSON values to
//! the input. See `docs/formats.md` ("Fields dsh does not model").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_session::{EventData, Session, SessionEvent, json_equiv, packed};
use serde_json::{Value, json};

/// A complete one-turn, one-step log with a tool call, without any unmodeled field.
fn plain_log() -> Vec<Value> {
    let call = json!({"type": "tool-call", "id": "call_1", "name": "read", "arguments": "{\"file_path\":\"a.txt\"}"});
    vec![
        json!({"type": "turn/start", "seq": 0, "time": 10, "data": {"turn": 1}}),
        json!({"type": "step/start", "seq": 1, "time": 11, "data": {"turn": 1, "step": 1}}),
        json!({"type": "user/message", "seq": 2, "time": 12,
            "data": {"id": "u1", "role": "user", "content": [{"type": "text", "text": "read a.txt"}], "source": {"kind": "user"}},
            "surfaceOp": "append"}),
        json!({"type": "assistant/chunk", "seq": 3, "time": 13,
            "data": {"turn": 1, "step": 1, "chunk": {"type": "usage", "usage": {"inputTokens": 5, "outputTokens": 2}}}}),
        json!({"type": "assistant/message", "seq": 4, "time": 14,
            "data": {"turn": 1, "step": 1,
                "message": {"id": "a1", "role": "assistant", "content": [call], "source": {"kind": "model", "provider": "deepseek", "model": "m"}},
                "usage": {"inputTokens": 5, "outputTokens": 2}},
            "sourceEventSeqs": [3], "surfaceOp": "append"}),
        json!({"type": "tool/call", "seq": 5, "time": 15,
            "data": {"turn": 1, "step": 1, "callId": "call_1", "name": "read", "arguments": "{\"file_path\":\"a.txt\"}"}}),
        json!({"type": "tool/result", "seq": 6, "time": 16,
            "data": {"turn": 1, "step": 1,
                "message": {"id": "t1", "role": "user",
                    "content": [{"type": "tool-result", "toolCallId": "call_1", "content": [{"type": "text", "text": "hello"}], "isError": false}],
                    "source": {"kind": "tool", "callId": "call_1"}}},
            "sourceEventSeqs": [5], "surfaceOp": "append"}),
        json!({"type": "step/end", "seq": 7, "time": 17, "data": {"turn": 1, "step": 1}}),
        json!({"type": "turn/end", "seq": 8, "time": 18, "data": {"turn": 1, "reason": {"kind": "completed"}}}),
    ]
}

/// [`plain_log`] with unmodeled fields at several depths.
fn log_with_unmodeled_fields() -> Vec<Value> {
    let mut log = plain_log();
    // A message's `source`, a content part and the message itself.
    log[2]["data"]["source"]["client"] = json!({"name": "ide", "version": 3});
    log[2]["data"]["content"][0]["cacheControl"] = json!({"type": "ephemeral"});
    log[2]["data"]["pinned"] = json!(true);
    // Usage on a chunk and on the message; the chunk object.
    log[3]["data"]["chunk"]["usage"]["cacheMissTokens"] = json!(5);
    log[3]["data"]["chunk"]["providerRaw"] = json!([1, 2, {"x": null}]);
    log[4]["data"]["usage"]["costMicros"] = json!(17);
    // A tool call part, the model source, the payload.
    log[4]["data"]["message"]["content"][0]["index"] = json!(0);
    log[4]["data"]["message"]["source"]["requestId"] = json!("req-9");
    log[4]["data"]["latencyMs"] = json!(1234.5);
    // The tool/call event and the tool/result's message, source and nested part.
    log[5]["data"]["approval"] = json!({"decision": "allowed-once"});
    log[6]["data"]["message"]["source"]["durationMs"] = json!(42);
    log[6]["data"]["message"]["content"][0]["content"][0]["mime"] = json!("text/plain");
    // A turn-start trigger is verbatim already; a step payload with an extra key is not.
    log[1]["data"]["attempt"] = json!(2);
    log
}

fn decode(records: &[Value]) -> Vec<SessionEvent> {
    packed::unpack(records.iter().cloned()).expect("the log decodes")
}

#[test]
fn unmodeled_fields_restore_and_rewrite_to_equal_json() {
    let input = log_with_unmodeled_fields();
    let events = decode(&input);
    let session = Session::from_restore("s1", events, None).expect("the log restores");
    let logged = session.events();
    let written = packed::pack(&logged);
    assert_eq!(written.len(), input.len());
    for (w, r) in written.iter().zip(&input) {
        assert!(json_equiv(w, r), "\n wrote    {w}\n expected {r}");
    }
    // A second pass writes the same bytes (dsh's own output is stable).
    let again: Vec<Arc<SessionEvent>> = decode(&written).into_iter().map(Arc::new).collect();
    let bytes1: Vec<String> = written.iter().map(Value::to_string).collect();
    let bytes2: Vec<String> = packed::pack(&again).iter().map(Value::to_string).collect();
    assert_eq!(bytes1, bytes2);
    // The event JSON of each event (what backends write) carries the fields too.
    assert_eq!(
        logged[2].to_value()["data"]["source"]["client"],
        json!({"name": "ide", "version": 3})
    );
    assert_eq!(
        serde_json::from_str::<Value>(&logged[6].to_json()).unwrap()["data"]["message"]["content"]
            [0]["content"][0]["mime"],
        json!("text/plain")
    );
}

#[test]
fn unmodeled_fields_do_not_change_what_the_model_sees() {
    let plain = Session::from_restore("s1", decode(&plain_log()), None).unwrap();
    let extra = Session::from_restore("s1", decode(&log_with_unmodeled_fields()), None).unwrap();
    assert_eq!(extra.derive_messages(), plain.derive_messages());
    // The typed payloads are the modeled part alone.
    for (a, b) in extra.events().iter().zip(plain.events()) {
        assert_eq!(a.data, b.data, "seq {}", a.seq);
    }
    match &extra.events()[4].data {
        EventData::AssistantMessage(d) => assert_eq!(d.usage.map(|u| u.input_tokens), Some(5)),
        other => panic!("not an assistant message: {other:?}"),
    }
}

#[test]
fn unmodeled_fields_must_still_be_lossless_and_shapes_must_still_match() {
    // A field of the wrong type is still malformed (only fields dsh does not model are carried).
    let mut wrong = plain_log();
    wrong[5]["data"]["callId"] = json!(7);
    let e = packed::unpack(wrong).unwrap_err();
    assert_eq!(e.code(), "MALFORMED_EVENT");
    // An unknown envelope key is still refused.
    let mut envelope = plain_log();
    envelope[0]["color"] = json!("red");
    let e = packed::unpack(envelope).unwrap_err();
    assert_eq!(e.code(), "MALFORMED_EVENT");
    // A carried integer outside ±(2^53−1) is refused on restore like a modeled one.
    let mut big = plain_log();
    big[5]["data"]["counter"] = json!(9_007_199_254_740_993u64);
    let e = Session::from_restore("s1", decode(&big), None).unwrap_err();
    assert_eq!(e.code(), "NON_LOSSLESS_DATA");
}
