use serde_json::json;

use super::*;

#[test]
fn unknown_block_round_trips_verbatim() {
    let v = json!({"type":"widget","x":[1,2],"y":{"z":null}});
    let b: ContentBlock = serde_json::from_value(v.clone()).unwrap();
    assert!(matches!(b, ContentBlock::Other(_)));
    assert_eq!(serde_json::to_value(&b).unwrap(), v);
}

#[test]
fn known_block_with_bad_fields_is_not_silently_accepted_as_known() {
    let v = json!({"type":"tool-call","id":"c1","name":"bash"});
    let b: ContentBlock = serde_json::from_value(v.clone()).unwrap();
    // Missing `arguments`: kept verbatim rather than invented.
    assert_eq!(serde_json::to_value(&b).unwrap(), v);
}

#[test]
fn message_round_trip() {
    let v = json!({"content":[{"type":"text","text":"hi"},{"type":"tool-result","toolCallId":"c","content":[],"isError":false}],"source":{"kind":"plugin","plugin":"p","form":"snapshot","sections":[{"name":"a","text":"b"}],"compactionId":"x"},"role":"user","id":"m1"});
    let m: Message = serde_json::from_value(v.clone()).unwrap();
    assert!(matches!(m.source, MessageSource::Plugin { .. }));
    assert_eq!(serde_json::to_value(&m).unwrap(), v);
    let goal = json!({"kind":"goal","goalId":"g","revision":1,"round":2});
    let s: MessageSource = serde_json::from_value(goal.clone()).unwrap();
    assert_eq!(s.kind(), "goal");
    assert_eq!(serde_json::to_value(&s).unwrap(), goal);
}

#[test]
fn finish_and_chunks_round_trip() {
    for v in [
        json!({"type":"finish","reason":{"kind":"error","failure":{"message":"m","code":"AUTH","status":401}}}),
        json!({"type":"finish","reason":{"kind":"stop"}}),
        json!({"type":"finish","reason":{"kind":"paused","why":1}}),
        json!({"type":"tool-call-delta","index":1,"id":"c","name":"bash","argumentsDelta":"{"}),
        json!({"type":"usage","usage":{"inputTokens":1,"outputTokens":2,"cacheReadTokens":3}}),
        json!({"type":"block-end","index":0,"block":{"type":"text","text":"x"}}),
        json!({"type":"mystery","index":0}),
    ] {
        let c: StreamChunk = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&c).unwrap(), v);
    }
}

#[test]
fn estimated_usage_is_marked_and_absent_when_not_estimated() {
    let plain = json!({"inputTokens":1,"outputTokens":2});
    let u: TokenUsage = serde_json::from_value(plain.clone()).unwrap();
    assert!(!u.estimated);
    assert_eq!(serde_json::to_value(u).unwrap(), plain);
    let est = json!({"inputTokens":3,"outputTokens":4,"estimated":true});
    let e: TokenUsage = serde_json::from_value(est.clone()).unwrap();
    assert!(e.estimated);
    assert_eq!(serde_json::to_value(e).unwrap(), est);
    let mut total = u;
    total.add(&e);
    assert_eq!(
        serde_json::to_value(total).unwrap(),
        json!({"inputTokens":4,"outputTokens":6,"estimated":true})
    );
}
