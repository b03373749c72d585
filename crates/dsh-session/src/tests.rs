//! Unit tests of dsh-session: one section per rule family, exact expected values.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dsh_llm::{
    ContentBlock, EpochHeader, LlmCallConfig, LlmFailure, Message, MessageId, StreamChunk,
};
use serde_json::{Value, json};

use crate::*;

fn user(text: &str) -> EventData {
    let mut m = Message::user_text(text);
    m.id = MessageId::new(format!("u-{text}"));
    EventData::UserMessage(Arc::new(m))
}

fn assistant(turn: u64, step: u64, text: &str) -> EventData {
    let content = if text.is_empty() {
        vec![]
    } else {
        vec![ContentBlock::text(text)]
    };
    let mut m = Message::assistant(content, "p", "m", None);
    m.id = MessageId::new(format!("a-{text}"));
    EventData::AssistantMessage(AssistantMessageData {
        turn,
        step,
        message: Arc::new(m),
        usage: None,
        interrupted: None,
    })
}

fn turn_start(turn: u64) -> EventData {
    EventData::TurnStart(TurnStartData {
        turn,
        trigger: None,
    })
}

fn step(turn: u64, step: u64) -> StepData {
    StepData { turn, step }
}

fn session() -> Session {
    Session::create("s", None, None).expect("create")
}

fn open_step(s: &Session) {
    s.append(EventType::TURN_START, turn_start(1), None)
        .expect("turn");
    s.append(
        EventType::STEP_START,
        EventData::StepStart(step(1, 1)),
        None,
    )
    .expect("step");
}

fn code(r: Result<Arc<SessionEvent>, SessionError>) -> &'static str {
    r.err().map_or("OK", |e| e.code())
}

// ---------------------------------------------------------------- wire form

#[test]
fn turn_start_serializes_in_dsh_key_order() {
    let s = session();
    let e = s
        .append(EventType::TURN_START, turn_start(1), None)
        .expect("append");
    let line = format!(
        r#"{{"type":"turn/start","seq":0,"time":{},"data":{{"turn":1}}}}"#,
        e.time
    );
    assert_eq!(e.to_json(), line);
    assert_eq!(
        SessionEvent::from_json(&line).expect("parse").to_json(),
        line
    );
}

#[test]
fn surface_event_serializes_provenance_then_op() {
    let e = SessionEvent {
        kind: EventType::USER_MESSAGE,
        seq: 3,
        time: 7,
        data: user("hi"),
        ignorable: false,
        source_event_seqs: Some(vec![1, 2]),
        surface_op: Some(SurfaceOp::Replace { start: 2, end: 1 }),
        residual: None,
    };
    assert_eq!(
        e.to_json(),
        r#"{"type":"user/message","seq":3,"time":7,"data":{"id":"u-hi","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"sourceEventSeqs":[1,2],"surfaceOp":{"op":"replace","start":2,"end":1}}"#
    );
    let back = SessionEvent::from_json(&e.to_json()).expect("parse");
    assert_eq!(back, e);
}

#[test]
fn ignorable_unknown_type_round_trips() {
    let line = r#"{"type":"x/y","seq":0,"time":1,"data":{"a":[1,2.5]},"ignorable":true}"#;
    let e = SessionEvent::from_json(line).expect("parse");
    assert_eq!(e.data, EventData::Opaque(json!({"a":[1,2.5]})));
    assert_eq!(e.to_json(), line);
}

#[test]
fn turn_end_reasons_parse_typed_or_other() {
    let cases = [
        (json!({"kind":"completed"}), "completed", true),
        (
            json!({"kind":"aborted","reason":{"kind":"user"}}),
            "aborted",
            true,
        ),
        (json!({"kind":"blocked"}), "blocked", true),
        (json!({"kind":"max-tokens"}), "max-tokens", true),
        (json!({"kind":"interrupted"}), "interrupted", true),
        (json!({"kind":"disposed"}), "disposed", true),
        (
            json!({"kind":"error","error":{"message":"m","code":"AUTH"}}),
            "error",
            true,
        ),
        (
            json!({"kind":"error","step":2,"message":"boom"}),
            "error",
            false,
        ),
        (json!({"kind":"goal-paused","x":1}), "goal-paused", false),
    ];
    for (v, kind, typed) in cases {
        let r: TurnEndReason = serde_json::from_value(v.clone()).expect("parse");
        assert_eq!(r.kind(), kind);
        assert_eq!(!matches!(r, TurnEndReason::Other(_)), typed, "{v}");
        assert_eq!(serde_json::to_value(&r).expect("ser"), v);
    }
    let r: TurnEndReason =
        serde_json::from_value(json!({"kind":"error","error":{"message":"m","code":"AUTH"}}))
            .expect("parse");
    assert_eq!(
        r,
        TurnEndReason::Error {
            error: LlmFailure::new("AUTH", "m")
        }
    );
}

#[test]
fn core_payload_with_unmodelled_field_is_carried_and_a_missing_one_is_malformed() {
    let line = r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"surprise":true}}"#;
    let e = SessionEvent::from_json(line).expect("carried");
    assert_eq!(
        e.data,
        EventData::TurnStart(TurnStartData {
            turn: 1,
            trigger: None
        })
    );
    assert_eq!(e.to_json(), line);
    // The strict payload parser still refuses it.
    let err = EventData::from_value(
        &EventType::TURN_START,
        json!({"turn":1,"surprise":true}),
        None,
    )
    .expect_err("lossy");
    assert_eq!(err.code(), "MALFORMED_EVENT");
    let err =
        SessionEvent::from_json(r#"{"type":"step/start","seq":0,"time":1,"data":{"turn":1}}"#)
            .expect_err("missing step");
    assert_eq!(err.code(), "MALFORMED_EVENT");
}

#[test]
fn envelope_errors_are_malformed() {
    for line in [
        "not json",
        "[1]",
        r#"{"seq":0,"time":1,"data":{}}"#,
        r#"{"type":"turn/start","time":1,"data":{"turn":1}}"#,
        r#"{"type":"turn/start","seq":-1,"time":1,"data":{"turn":1}}"#,
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"ignorable":false}"#,
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"extra":1}"#,
        r#"{"type":"user/message","seq":0,"time":1,"data":{},"surfaceOp":"prepend"}"#,
        r#"{"type":"session/end-seed","seq":0,"time":1,"data":{"a":1}}"#,
    ] {
        let err = SessionEvent::from_json(line).expect_err(line);
        assert_eq!(err.code(), "MALFORMED_EVENT", "{line}");
    }
}

// ---------------------------------------------------------------- append rules

#[test]
fn seq_is_contiguous_and_time_non_decreasing() {
    let s = session();
    let a = s
        .append(EventType::TURN_START, turn_start(1), None)
        .expect("a");
    let b = s
        .append_value(
            "todo/write",
            json!({"todos":[{"content":"x","status":"in_progress"}]}),
            None,
            false,
        )
        .expect("b");
    assert_eq!((a.seq, b.seq, s.seq()), (0, 1, 2));
    assert!(b.time >= a.time);
    let mut e = (*b).clone();
    e.seq = 5;
    assert_eq!(code(s.append_event(e)), "SEQ_GAP");
    assert_eq!(s.len(), 2);
}

#[test]
fn surface_intent_required_and_forbidden() {
    let s = session();
    assert_eq!(
        code(s.append(EventType::USER_MESSAGE, user("a"), None)),
        "MISSING_SURFACE_INTENT"
    );
    assert_eq!(
        code(s.append(
            EventType::TURN_START,
            turn_start(1),
            Some(SurfaceIntent::append())
        )),
        "UNEXPECTED_SURFACE_INTENT"
    );
    assert_eq!(s.len(), 0);
}

#[test]
fn provenance_rules() {
    let s = session();
    s.append(
        EventType::USER_MESSAGE,
        user("a"),
        Some(SurfaceIntent::append()),
    )
    .expect("a");
    s.append(
        EventType::USER_MESSAGE,
        user("b"),
        Some(SurfaceIntent::append()),
    )
    .expect("b");
    let bad = |src: Vec<u64>| {
        code(s.append(
            EventType::USER_MESSAGE,
            user("c"),
            Some(SurfaceIntent::append_from(src)),
        ))
    };
    assert_eq!(bad(vec![]), "BAD_PROVENANCE");
    assert_eq!(bad(vec![0, 0]), "BAD_PROVENANCE");
    assert_eq!(bad(vec![2]), "BAD_PROVENANCE");
    assert_eq!(bad(vec![9]), "BAD_PROVENANCE");
    assert_eq!(bad(vec![1, 0]), "OK");
    // assistant/message may carry a known-empty provenance.
    open_step(&s);
    let e = s
        .append(
            EventType::ASSISTANT_MESSAGE,
            assistant(1, 1, "x"),
            Some(SurfaceIntent::append_from(vec![])),
        )
        .expect("assistant");
    assert_eq!(e.source_event_seqs, Some(vec![]));
}

#[test]
fn replace_by_surface_position() {
    let s = session();
    for t in ["a", "b", "c", "d"] {
        s.append(
            EventType::USER_MESSAGE,
            user(t),
            Some(SurfaceIntent::append()),
        )
        .expect("append");
    }
    // Replace 1..=2 with seq 4.
    s.append(
        EventType::USER_MESSAGE,
        user("s1"),
        Some(SurfaceIntent::replace(1, 2, vec![1, 2])),
    )
    .expect("replace");
    assert_eq!(
        s.surface(),
        SessionSurface {
            nodes: vec![0, 4, 3],
            replace_generation: 1
        }
    );
    // start (4) is numerically greater than end (3) but earlier by position: valid.
    s.append(
        EventType::USER_MESSAGE,
        user("s2"),
        Some(SurfaceIntent::replace(4, 3, vec![3, 4])),
    )
    .expect("replace 2");
    assert_eq!(s.surface().nodes, vec![0, 5]);
    let texts: Vec<String> = s.derive_messages().iter().map(|m| m.text()).collect();
    assert_eq!(texts, vec!["a", "s2"]);
    let bad = |i: SurfaceIntent| code(s.append(EventType::USER_MESSAGE, user("z"), Some(i)));
    assert_eq!(bad(SurfaceIntent::replace(1, 1, vec![1])), "BAD_SURFACE_OP"); // shadowed node
    assert_eq!(bad(SurfaceIntent::replace(0, 9, vec![0])), "BAD_SURFACE_OP"); // not a node
    assert_eq!(
        bad(SurfaceIntent::replace(5, 0, vec![0, 5])),
        "BAD_SURFACE_OP"
    ); // start after end
    assert_eq!(bad(SurfaceIntent::replace(0, 5, vec![0])), "BAD_SURFACE_OP"); // 5 not covered
    assert_eq!(s.len(), 6);
    let fold = fold_surface(&s.events()).expect("fold");
    assert_eq!(fold.nodes, vec![0, 5]);
    assert_eq!(
        fold.replacements,
        vec![
            SurfaceReplacement {
                seq: 4,
                start: 1,
                end: 2,
                shadowed_seqs: vec![1, 2]
            },
            SurfaceReplacement {
                seq: 5,
                start: 4,
                end: 3,
                shadowed_seqs: vec![4, 3]
            },
        ]
    );
}

#[test]
fn lossless_data_rules() {
    let s = session();
    let cases = [
        (json!({"x": f64::MAX}), "OK"),
        (json!({"x": 9007199254740991u64}), "OK"),
        (json!({"x": -9007199254740991i64}), "OK"),
        (json!({"x": 9007199254740992u64}), "NON_LOSSLESS_DATA"),
        (json!({"x": -9007199254740992i64}), "NON_LOSSLESS_DATA"),
        (json!({"x": [1, {"y": -0.0}]}), "NON_LOSSLESS_DATA"),
    ];
    for (v, want) in cases {
        assert_eq!(
            code(s.append_value("session/title", v.clone(), None, false)),
            want,
            "{v}"
        );
    }
    let err = s
        .append_value("session/title", json!({"a": {"b": [0, -0.0]}}), None, false)
        .expect_err("-0");
    assert_eq!(
        err,
        SessionError::NonLosslessData {
            path: "/a/b/1".to_owned(),
            message: "negative zero".to_owned()
        }
    );
    // Typed data is checked too (f64 temperature).
    open_step(&s);
    let mut cfg = LlmCallConfig::new("p", "m");
    cfg.temperature = Some(f64::NAN);
    let h = EventData::RequestHeader(RequestHeaderData {
        header: EpochHeader::canonical(cfg, Default::default(), None, &[]),
        reason: RequestHeaderReason::Initial,
    });
    let err = s
        .append(EventType::REQUEST_HEADER, h, None)
        .expect_err("nan");
    assert_eq!(err.code(), "NON_LOSSLESS_DATA");
    assert!(
        matches!(err, SessionError::NonLosslessData { ref path, .. } if path == "/header/config/temperature")
    );
}

#[test]
fn parsed_negative_zero_is_rejected() {
    let v: Value = serde_json::from_str(r#"{"x":-0.0}"#).expect("json");
    assert_eq!(
        check_lossless(&v).map_err(|e| e.code()),
        Err("NON_LOSSLESS_DATA")
    );
}

#[test]
fn type_admission() {
    let s = session();
    assert_eq!(
        code(s.append_value("nope/x", json!({}), None, false)),
        "UNKNOWN_EVENT_TYPE"
    );
    assert_eq!(code(s.append_value("nope/x", json!({}), None, true)), "OK");
    assert_eq!(
        code(s.append_value("compaction/start", json!({"a":1}), None, false)),
        "OK"
    );
    assert_eq!(
        code(s.append_value("request/header-delta", json!({}), None, false)),
        "FORBIDDEN_EVENT_TYPE"
    );
    assert_eq!(
        code(s.append(EventType::END_SEED, EventData::EndSeed, None)),
        "FORBIDDEN_EVENT_TYPE"
    );
    assert_eq!(
        code(s.append(EventType::TURN_START, EventData::EndSeed, None)),
        "MALFORMED_EVENT"
    );
    assert_eq!(
        code(s.append("x/opaque", turn_start(1), None)),
        "MALFORMED_EVENT"
    );
    assert_eq!(s.len(), 2);
    let mut m = Message::user_text("x");
    m.role = dsh_llm::Role::Assistant;
    let wrong_role = EventData::UserMessage(Arc::new(m));
    assert_eq!(
        code(s.append(
            EventType::USER_MESSAGE,
            wrong_role,
            Some(SurfaceIntent::append())
        )),
        "MALFORMED_EVENT"
    );
    s.append(EventType::TURN_START, turn_start(1), None)
        .expect("turn");
    s.append(
        EventType::STEP_START,
        EventData::StepStart(step(1, 1)),
        None,
    )
    .expect("step");
    let mut m = Message::assistant(vec![ContentBlock::text("x")], "p", "m", None);
    m.source = dsh_llm::MessageSource::User;
    let no_model = EventData::AssistantMessage(AssistantMessageData {
        turn: 1,
        step: 1,
        message: Arc::new(m),
        usage: None,
        interrupted: None,
    });
    assert_eq!(
        code(s.append(
            EventType::ASSISTANT_MESSAGE,
            no_model,
            Some(SurfaceIntent::append())
        )),
        "MALFORMED_EVENT"
    );
    assert_eq!(s.len(), 4);
}

#[test]
fn registry_takeover_validation_and_conflicts() {
    let reg = Arc::new(EventTypeRegistry::with_upstream_catalog());
    assert!(
        reg.get("goal/change")
            .is_some_and(|d| d.owner == UPSTREAM_CATALOG_OWNER)
    );
    reg.register(
        EventTypeDecl::new("goal/change", "dsh-goal", false).with_validator(|v| {
            if v.get("goal").is_some() {
                Ok(())
            } else {
                Err("no goal".into())
            }
        }),
    )
    .expect("take over");
    assert_eq!(
        reg.register(EventTypeDecl::new("goal/change", "other", true))
            .map_err(|e| e.code()),
        Err("EVENT_TYPE_REGISTRATION")
    );
    assert_eq!(
        reg.register(EventTypeDecl::new("turn/start", "x", true))
            .map_err(|e| e.code()),
        Err("EVENT_TYPE_REGISTRATION")
    );
    let s = Session::create_with("s", None, None, reg.clone()).expect("create");
    s.append(EventType::TURN_START, turn_start(1), None)
        .expect("turn");
    assert_eq!(
        code(s.append_value("goal/change", json!({"x":1}), None, false)),
        "INVALID_PLUGIN_PAYLOAD"
    );
    assert_eq!(
        code(s.append_value("goal/change", json!({"goal":1}), None, false)),
        "OK"
    );
    s.append(
        EventType::TURN_END,
        EventData::TurnEnd(TurnEndData {
            turn: 1,
            reason: TurnEndReason::Completed,
        }),
        None,
    )
    .expect("end");
    // between_turns = false: refused outside a turn (debug builds enforce invariants).
    if cfg!(debug_assertions) {
        assert_eq!(
            code(s.append_value("goal/change", json!({"goal":1}), None, false)),
            "INVARIANT_VIOLATION"
        );
    }
    assert!(reg.unregister("goal/change", "dsh-goal"));
    assert!(
        reg.get("goal/change")
            .is_some_and(|d| d.owner == UPSTREAM_CATALOG_OWNER)
    );
    reg.register(EventTypeDecl::new("mine/x", "me", true).typed::<TodoWriteData>())
        .expect("typed");
    assert_eq!(
        code(s.append_value("mine/x", json!({"todos":[]}), None, false)),
        "OK"
    );
    assert_eq!(
        code(s.append_value("mine/x", json!({"todos":[], "b": 1}), None, false)),
        "INVALID_PLUGIN_PAYLOAD"
    );
}

#[test]
fn scoped_registration_reverts_on_dispose() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("rt");
    rt.block_on(async {
        let kernel = dsh_kernel::Kernel::new();
        let ctx = kernel.root().child("plugin").expect("ctx");
        let reg = Arc::new(EventTypeRegistry::with_upstream_catalog());
        reg.register_scoped(&ctx, EventTypeDecl::new("plan/mode", "dsh-plan", false))
            .expect("register")
            .detach();
        reg.register_scoped(&ctx, EventTypeDecl::new("mine/t", "dsh-plan", true))
            .expect("register")
            .detach();
        assert_eq!(
            reg.get("plan/mode").map(|d| d.owner),
            Some("dsh-plan".to_owned())
        );
        ctx.dispose().await;
        assert_eq!(
            reg.get("plan/mode").map(|d| d.owner),
            Some(UPSTREAM_CATALOG_OWNER.to_owned())
        );
        assert!(reg.get("mine/t").is_none());
    });
}

#[test]
fn bad_input_error_codes_are_distinct() {
    let s = session();
    s.append(
        EventType::USER_MESSAGE,
        user("a"),
        Some(SurfaceIntent::append()),
    )
    .expect("a");
    let mut gap = (*s.last_event().expect("e")).clone();
    gap.seq = 9;
    let codes = [
        SessionEvent::from_json("{")
            .map(Arc::new)
            .err()
            .map_or("OK", |e| e.code()),
        code(s.append_event(gap)),
        code(s.append_value("unknown/t", json!({}), None, false)),
        code(s.append_value("session/title", json!({"x": -0.0}), None, false)),
        code(s.append(EventType::USER_MESSAGE, user("b"), None)),
        code(s.append(
            EventType::TURN_START,
            turn_start(1),
            Some(SurfaceIntent::append()),
        )),
        code(s.append(
            EventType::USER_MESSAGE,
            user("b"),
            Some(SurfaceIntent::append_from(vec![0, 0])),
        )),
        code(s.append(
            EventType::USER_MESSAGE,
            user("b"),
            Some(SurfaceIntent::replace(7, 7, vec![0])),
        )),
        code(s.append(EventType::END_SEED, EventData::EndSeed, None)),
    ];
    let mut sorted = codes.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), codes.len(), "{codes:?}");
    assert!(!codes.contains(&"OK"));
    assert_eq!(s.len(), 1, "rejected appends leave the log unchanged");
}

// ---------------------------------------------------------------- derivation

#[test]
fn derivation_rules_and_cache_sharing() {
    let s = session();
    s.append(
        EventType::USER_MESSAGE,
        user("q"),
        Some(SurfaceIntent::append()),
    )
    .expect("u");
    open_step(&s);
    s.append(
        EventType::ASSISTANT_MESSAGE,
        assistant(1, 1, ""),
        Some(SurfaceIntent::append()),
    )
    .expect("empty");
    s.append(
        EventType::ASSISTANT_MESSAGE,
        assistant(1, 1, "r"),
        Some(SurfaceIntent::append()),
    )
    .expect("r");
    let first = s.derive_messages();
    assert_eq!(
        first.iter().map(|m| m.text()).collect::<Vec<_>>(),
        vec!["q", "r"]
    );
    assert_eq!(s.surface().nodes, vec![0, 3, 4]);
    let second = s.derive_messages();
    assert!(Arc::ptr_eq(&first[0], &second[0]) && Arc::ptr_eq(&first[1], &second[1]));
    // Shared with the log itself.
    let EventData::UserMessage(m) = &s.event(0).expect("e").data else {
        panic!("not user")
    };
    assert!(Arc::ptr_eq(m, &first[0]));
    assert_eq!(derive_event_message(&s.event(1).expect("turn")), None);
    // A replace rebuilds but keeps sharing.
    s.append(
        EventType::USER_MESSAGE,
        user("sum"),
        Some(SurfaceIntent::replace(0, 3, vec![0, 3])),
    )
    .expect("replace");
    let third = s.derive_messages();
    assert_eq!(
        third.iter().map(|m| m.text()).collect::<Vec<_>>(),
        vec!["sum", "r"]
    );
    assert!(Arc::ptr_eq(&third[1], &first[1]));
    assert_eq!(s.replace_generation(), 1);
}

#[test]
fn request_header_and_context_fold() {
    let s = session();
    assert_eq!(s.request_header(), None);
    open_step(&s);
    let h1 = EpochHeader::canonical(
        LlmCallConfig::new("p", "m1"),
        Default::default(),
        Some("sys".into()),
        &[],
    );
    let h2 = EpochHeader::canonical(LlmCallConfig::new("p", "m2"), Default::default(), None, &[]);
    for (h, r) in [
        (h1, RequestHeaderReason::Initial),
        (h2.clone(), RequestHeaderReason::Change),
    ] {
        s.append(
            EventType::REQUEST_HEADER,
            EventData::RequestHeader(RequestHeaderData {
                header: h,
                reason: r,
            }),
            None,
        )
        .expect("header");
    }
    let ctx = RequestContext {
        provider: "p".into(),
        model: "m2".into(),
        context_window: Some(128_000),
    };
    s.append(
        EventType::REQUEST_CONTEXT,
        EventData::RequestContext(ctx.clone()),
        None,
    )
    .expect("ctx");
    assert_eq!(s.request_header(), Some(h2.clone()));
    assert_eq!(fold_request_header(&s.events()), Some(h2));
    assert_eq!(s.request_context(), Some(ctx.clone()));
    assert_eq!(fold_request_context(&s.events()), Some(ctx));
}

// ---------------------------------------------------------------- seeds

#[test]
fn end_seed_written_before_first_live_write() {
    let s = Session::create("s", Some(vec![]), None).expect("create");
    assert!(s.end_seed_pending());
    // A rejected first write leaves everything unchanged (still pending).
    assert_eq!(
        code(s.append(EventType::USER_MESSAGE, user("a"), None)),
        "MISSING_SURFACE_INTENT"
    );
    assert_eq!(s.len(), 0);
    let e = s
        .append(
            EventType::USER_MESSAGE,
            user("a"),
            Some(SurfaceIntent::append()),
        )
        .expect("append");
    assert_eq!(e.seq, 1);
    assert_eq!(s.event(0).expect("seed end").kind, EventType::END_SEED);
    assert!(!s.end_seed_pending());
    // Seed already ending with end-seed: nothing extra.
    let seed: Vec<SessionEvent> = s.events().iter().take(1).map(|e| (**e).clone()).collect();
    let t = Session::create("t", Some(seed), None).expect("create");
    assert!(!t.end_seed_pending());
    assert_eq!(t.first_live_seq(), 1);
    // No seed: no end-seed.
    assert!(!session().end_seed_pending());
}

/// A restore large enough to shrink its input buffer several times keeps every event, in
/// order, and refuses a bad event past the first shrink like any other.
#[test]
fn restore_of_a_long_log_keeps_every_event_in_order() {
    let turns = 10_000u64;
    let log: Vec<SessionEvent> = (0..turns)
        .flat_map(|t| {
            [
                json!({"type":"turn/start","seq":2 * t,"time":t,"data":{"turn":t + 1}}),
                json!({"type":"turn/end","seq":2 * t + 1,"time":t,"data":{"turn":t + 1,"reason":{"kind":"completed"}}}),
            ]
        })
        .map(|v| SessionEvent::from_value(v).expect("event"))
        .collect();
    let s = Session::from_restore("s", log.clone(), None).expect("restores");
    let restored: Vec<SessionEvent> = s.events().iter().map(|e| (**e).clone()).collect();
    assert_eq!(restored, log);
    let mut bad = log;
    bad.truncate(15_001);
    bad.push(
        SessionEvent::from_value(
            json!({"type":"turn/start","seq":15_002,"time":1,"data":{"turn":1}}),
        )
        .expect("event"),
    );
    let r = Session::from_restore("s", bad, None);
    assert_eq!(r.map(|_| ()).map_err(|e| e.code()), Err("SEQ_GAP"));
}

#[test]
fn restore_validates_everything() {
    let line = |seq: u64, data: Value| {
        SessionEvent::from_value(json!({"type":"turn/start","seq":seq,"time":1,"data":data}))
            .expect("e")
    };
    let r = Session::from_restore("s", vec![line(1, json!({"turn":1}))], None);
    assert_eq!(r.map(|_| ()).map_err(|e| e.code()), Err("SEQ_GAP"));
    let r = Session::from_restore(
        "s",
        vec![line(0, json!({"turn":1})), {
            let mut e = line(1, json!({"turn":1}));
            e.kind = EventType::TURN_START;
            e
        }],
        None,
    );
    assert_eq!(
        r.map(|_| ()).map_err(|e| e.code()),
        Err("INVARIANT_VIOLATION")
    );
    let mut h = SessionHeader::new("s", 1);
    h.version = 1;
    assert_eq!(
        Session::from_restore("s", vec![], Some(h))
            .map(|_| ())
            .map_err(|e| e.code()),
        Err("FORMAT_UNSUPPORTED")
    );
    let mut h = SessionHeader::new("s", 1);
    h.cwd = Some("rel/path".into());
    assert_eq!(
        Session::from_restore("s", vec![], Some(h))
            .map(|_| ())
            .map_err(|e| e.code()),
        Err("FORMAT_UNSUPPORTED")
    );
    assert_eq!(
        Session::from_restore("x", vec![], Some(SessionHeader::new("s", 1)))
            .map(|_| ())
            .map_err(|e| e.code()),
        Err("FORMAT_UNSUPPORTED")
    );
}

// ---------------------------------------------------------------- invariants

fn ev(seq: u64, data: EventData) -> Arc<SessionEvent> {
    let kind = data
        .core_kind()
        .map_or(EventType::from_static("x/y"), CoreKind::event_type);
    let surface_op = kind.is_surface().then_some(SurfaceOp::Append);
    Arc::new(SessionEvent {
        kind,
        seq,
        time: 0,
        data,
        ignorable: false,
        source_event_seqs: None,
        surface_op,
        residual: None,
    })
}

fn tool_call(turn: u64, step: u64, id: &str) -> EventData {
    EventData::ToolCall(ToolCallData {
        turn,
        step,
        call_id: id.into(),
        name: "bash".into(),
        arguments: "{}".into(),
    })
}

fn tool_result(turn: u64, step: u64, id: &str) -> EventData {
    EventData::ToolResult(ToolResultData {
        turn,
        step,
        message: Arc::new(Message::tool_result(
            id.into(),
            vec![ContentBlock::text("ok")],
            false,
        )),
        error: None,
        meta: None,
    })
}

fn violations(datas: Vec<EventData>) -> Vec<(u64, &'static str)> {
    let events: Vec<_> = datas
        .into_iter()
        .enumerate()
        .map(|(i, d)| ev(i as u64, d))
        .collect();
    check_invariants(&events, None)
        .into_iter()
        .map(|v| (v.seq, v.kind.code()))
        .collect()
}

#[test]
fn invariant_rules() {
    let ts = |t| turn_start(t);
    let te = |t| {
        EventData::TurnEnd(TurnEndData {
            turn: t,
            reason: TurnEndReason::Completed,
        })
    };
    let ss = |t, s| EventData::StepStart(step(t, s));
    let se = |t, s| EventData::StepEnd(step(t, s));
    assert_eq!(
        violations(vec![
            ts(1),
            ss(1, 1),
            tool_call(1, 1, "c"),
            tool_result(1, 1, "c"),
            se(1, 1),
            te(1)
        ]),
        vec![]
    );
    assert_eq!(
        violations(vec![ts(1), ts(2)]),
        vec![(1, "TURN_ALREADY_OPEN")]
    );
    assert_eq!(
        violations(vec![ts(2), te(2), ts(2)]),
        vec![(2, "TURN_NOT_MONOTONIC")]
    );
    assert_eq!(violations(vec![ts(1), te(2)]), vec![(1, "TURN_MISMATCH")]);
    assert_eq!(
        violations(vec![ts(1), ss(1, 1), te(1)]),
        vec![(2, "STEP_OPEN_AT_TURN_END")]
    );
    assert_eq!(
        violations(vec![ts(1), ss(1, 1), ss(1, 2)]),
        vec![(2, "STEP_ALREADY_OPEN")]
    );
    assert_eq!(
        violations(vec![ts(1), ss(1, 2), se(1, 2), ss(1, 1)]),
        vec![(3, "STEP_NOT_MONOTONIC")]
    );
    assert_eq!(
        violations(vec![ts(1), ss(1, 1), se(1, 2)]),
        vec![(2, "STEP_MISMATCH")]
    );
    assert_eq!(violations(vec![ss(1, 1)]), vec![(0, "TURN_MISMATCH")]);
    assert_eq!(
        violations(vec![ts(1), assistant(1, 1, "x")]),
        vec![(1, "NOT_ENCLOSED")]
    );
    assert_eq!(
        violations(vec![
            ts(1),
            ss(1, 1),
            tool_call(1, 1, "c"),
            tool_call(1, 1, "c")
        ]),
        vec![(3, "DUPLICATE_TOOL_CALL")]
    );
    assert_eq!(
        violations(vec![ts(1), ss(1, 1), tool_result(1, 1, "c")]),
        vec![(2, "UNPAIRED_TOOL_RESULT")]
    );
    assert_eq!(
        violations(vec![
            ts(1),
            ss(1, 1),
            tool_call(1, 1, "c"),
            se(1, 1),
            ss(1, 2),
            tool_result(1, 2, "c")
        ]),
        vec![(5, "UNPAIRED_TOOL_RESULT")]
    );
    assert_eq!(
        violations(vec![
            ts(1),
            ss(1, 1),
            tool_call(1, 1, "c"),
            tool_result(1, 1, "c"),
            tool_result(1, 1, "c")
        ]),
        vec![(4, "DUPLICATE_TOOL_RESULT")]
    );
    // A result may answer a tool-call block of the step's assistant message (repair path).
    let mut m = Message::assistant(
        vec![ContentBlock::tool_call("k", "bash", "{}")],
        "p",
        "m",
        None,
    );
    m.id = MessageId::new("a");
    let am = EventData::AssistantMessage(AssistantMessageData {
        turn: 1,
        step: 1,
        message: Arc::new(m),
        usage: None,
        interrupted: None,
    });
    assert_eq!(
        violations(vec![ts(1), ss(1, 1), am, tool_result(1, 1, "k")]),
        vec![]
    );
    // end-seed closes a seed's dead open turn.
    assert_eq!(violations(vec![ts(1), EventData::EndSeed, ts(2)]), vec![]);
}

#[cfg(debug_assertions)]
#[test]
fn debug_builds_enforce_invariants_on_append() {
    let s = session();
    let r = s.append(
        EventType::STEP_START,
        EventData::StepStart(step(1, 1)),
        None,
    );
    assert!(matches!(
        r,
        Err(SessionError::Invariant(Violation {
            seq: 0,
            kind: ViolationKind::TurnMismatch,
            ..
        }))
    ));
    assert_eq!(s.len(), 0);
}

// ---------------------------------------------------------------- packed rows

fn chunk(seq: u64, time: u64, c: StreamChunk) -> Arc<SessionEvent> {
    Arc::new(SessionEvent {
        kind: EventType::ASSISTANT_CHUNK,
        seq,
        time,
        data: EventData::AssistantChunk(AssistantChunkData {
            turn: 1,
            step: 1,
            chunk: c,
        }),
        ignorable: false,
        source_event_seqs: None,
        surface_op: None,
        residual: None,
    })
}

#[test]
fn packed_rows_pack_runs_of_three() {
    let t = |i: u32, s: &str| StreamChunk::TextDelta {
        index: i,
        text: s.into(),
    };
    let events = vec![
        chunk(0, 10, t(0, "a")),
        chunk(1, 12, t(0, "b")),
        chunk(2, 11, t(0, "c")),
        chunk(3, 11, t(1, "x")),
        chunk(4, 11, t(1, "y")),
    ];
    let recs = packed::pack(&events);
    assert_eq!(
        Value::Array(recs.clone()).to_string(),
        r#"[{"type":"text-chunks","seq0":0,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[2,-1],"texts":["a","b","c"]}},{"type":"assistant/chunk","seq":3,"time":11,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":1,"text":"x"}}},{"type":"assistant/chunk","seq":4,"time":11,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":1,"text":"y"}}}]"#
    );
    let back: Vec<Arc<SessionEvent>> = packed::unpack(recs)
        .expect("unpack")
        .into_iter()
        .map(Arc::new)
        .collect();
    assert_eq!(back, events);
    let tc = |n: Option<&str>, a: &str| StreamChunk::ToolCallDelta {
        index: 2,
        id: "c1".into(),
        name: n.map(str::to_owned),
        arguments_delta: a.into(),
    };
    let events = vec![
        chunk(0, 1, tc(Some("bash"), "")),
        chunk(1, 1, tc(None, "{")),
        chunk(2, 2, tc(None, "}")),
        chunk(3, 2, tc(None, "")),
    ];
    let recs = packed::pack(&events);
    assert_eq!(recs.len(), 2);
    assert_eq!(
        recs[1],
        json!({"type":"tool-call-chunks","seq0":1,"time0":1,"data":{"turn":1,"step":1,"index":2,"dt":[1,0],"id":"c1","args":["{","}",""]}})
    );
}

#[test]
fn packed_row_errors() {
    for row in [
        json!({"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a"]}}),
        json!({"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}}),
        json!({"type":"text-chunks","seq0":0,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}),
        json!({"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[1]}}),
        json!({"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"],"x":1}}),
        json!({"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[-5],"texts":["a","b"]}}),
        json!({"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"args":["a"]}}),
    ] {
        assert_eq!(
            packed::expand_row(&row).map(|_| ()).map_err(|e| e.code()),
            Err("MALFORMED_PACKED_ROW"),
            "{row}"
        );
    }
}

// ---------------------------------------------------------------- store

fn store() -> (dsh_kernel::Kernel, Arc<SessionStore>) {
    let kernel = dsh_kernel::Kernel::new();
    let ctx = kernel.root().child("test").expect("ctx");
    let st = Arc::new(SessionStore::new(
        ctx,
        Arc::new(EventTypeRegistry::with_upstream_catalog()),
    ));
    (kernel, st)
}

#[test]
fn store_create_get_list_dispose_and_events() {
    let (kernel, st) = store();
    let root = kernel.root().clone();
    let created = Arc::new(AtomicUsize::new(0));
    let disposed = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let c = created.clone();
    root.on_emit::<SessionCreated>(move |_| {
        c.fetch_add(1, Ordering::SeqCst);
    })
    .expect("l")
    .detach();
    let d = disposed.clone();
    root.on_emit::<SessionDisposed>(move |_| {
        d.fetch_add(1, Ordering::SeqCst);
    })
    .expect("l")
    .detach();
    let sn = seen.clone();
    root.on_emit::<SessionEventEmitted>(move |n| {
        sn.lock()
            .expect("lock")
            .push((n.session.id().to_owned(), n.event.seq));
    })
    .expect("l")
    .detach();
    // A panicking observer is contained; the append still succeeds.
    root.on_emit::<SessionEventEmitted>(|_| panic!("observer boom"))
        .expect("l")
        .detach();
    let a = st.create(None, CreateOptions::default()).expect("a");
    assert_eq!(a.id(), "session-1");
    assert_eq!(
        st.create(Some("session-1".into()), CreateOptions::default())
            .map(|_| ())
            .map_err(|e| e.code()),
        Err("DUPLICATE_SESSION")
    );
    let b = st
        .create(Some("b".into()), CreateOptions::default())
        .expect("b");
    a.append(EventType::TURN_START, turn_start(1), None)
        .expect("append");
    b.append(
        EventType::USER_MESSAGE,
        user("x"),
        Some(SurfaceIntent::append()),
    )
    .expect("append");
    assert_eq!(
        *seen.lock().expect("lock"),
        vec![("session-1".to_owned(), 0), ("b".to_owned(), 0)]
    );
    assert_eq!(
        st.list()
            .iter()
            .map(|s| s.id().to_owned())
            .collect::<Vec<_>>(),
        vec!["session-1", "b"]
    );
    assert!(st.get("b").is_some());
    assert!(st.dispose("b"));
    assert!(!st.dispose("b"));
    assert_eq!(
        (
            created.load(Ordering::SeqCst),
            disposed.load(Ordering::SeqCst)
        ),
        (2, 1)
    );
    let mut h = SessionHeader::new("x", 1);
    h.cwd = Some("relative".into());
    assert_eq!(
        st.create(
            None,
            CreateOptions {
                meta: Some(h),
                ..Default::default()
            }
        )
        .map(|_| ())
        .map_err(|e| e.code()),
        Err("FORMAT_UNSUPPORTED")
    );
}

#[test]
fn reentrant_append_from_observer_is_refused() {
    let (kernel, st) = store();
    let result = Arc::new(std::sync::Mutex::new(None));
    let r = result.clone();
    kernel
        .root()
        .on_emit::<SessionEventEmitted>(move |n| {
            if n.event.seq == 0 {
                let code = n
                    .session
                    .append(EventType::TURN_START, turn_start(9), None)
                    .err()
                    .map(|e| e.code());
                *r.lock().expect("lock") = code;
            }
        })
        .expect("l")
        .detach();
    let s = st.create(None, CreateOptions::default()).expect("s");
    s.append(EventType::TURN_START, turn_start(1), None)
        .expect("append");
    assert_eq!(*result.lock().expect("lock"), Some("REENTRANT_APPEND"));
    assert_eq!(s.len(), 1);
}

#[test]
fn store_adopt_restored_session_writes_no_end_seed() {
    let (_kernel, st) = store();
    let src = Session::create("r", None, None).expect("s");
    src.append(
        EventType::USER_MESSAGE,
        user("q"),
        Some(SurfaceIntent::append()),
    )
    .expect("u");
    let events: Vec<SessionEvent> = src.events().iter().map(|e| (**e).clone()).collect();
    let restored =
        Session::from_restore_with("r", events, None, st.registry().clone()).expect("restore");
    let live = st.adopt(restored, None).expect("adopt");
    live.append(
        EventType::USER_MESSAGE,
        user("r"),
        Some(SurfaceIntent::append()),
    )
    .expect("u");
    assert_eq!(
        live.events().iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(
        st.adopt(Session::create("r", None, None).expect("s"), None)
            .map(|_| ())
            .map_err(|e| e.code()),
        Err("DUPLICATE_SESSION")
    );
    let again = st
        .restore(vec![], SessionHeader::new("r2", 5), None)
        .expect("restore");
    assert_eq!((again.id(), again.end_seed_pending()), ("r2", false));
    assert_eq!(st.dispose_all(), 2);
    assert!(st.list().is_empty());
}

#[test]
fn store_fork_rules() {
    let (kernel, st) = store();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sn = seen.clone();
    kernel
        .root()
        .on_emit::<SessionEventEmitted>(move |n| {
            sn.lock()
                .expect("l")
                .push((n.session.id().to_owned(), n.event.kind.to_string()))
        })
        .expect("l")
        .detach();
    let mut h = SessionHeader::new("x", 1);
    h.cwd = Some("/w".into());
    let s = st
        .create(
            Some("src".into()),
            CreateOptions {
                meta: Some(h),
                ..Default::default()
            },
        )
        .expect("s");
    s.append(
        EventType::USER_MESSAGE,
        user("q"),
        Some(SurfaceIntent::append()),
    )
    .expect("u");
    s.append(EventType::TURN_START, turn_start(1), None)
        .expect("t");
    assert_eq!(
        st.fork("src", None, None).map(|_| ()).map_err(|e| e.code()),
        Err("BAD_FORK_BOUNDARY")
    );
    assert_eq!(
        st.fork("src", Some(7), None)
            .map(|_| ())
            .map_err(|e| e.code()),
        Err("BAD_FORK_BOUNDARY")
    );
    assert_eq!(
        st.fork("nope", None, None)
            .map(|_| ())
            .map_err(|e| e.code()),
        Err("SESSION_NOT_FOUND")
    );
    let child = st.fork("src", Some(0), Some("child".into())).expect("fork");
    let hdr = child.header();
    assert_eq!(
        (
            hdr.parent_session.as_deref(),
            hdr.seed_length,
            hdr.cwd.as_deref()
        ),
        (Some("src"), Some(1), Some("/w"))
    );
    assert_eq!(child.first_live_seq(), 1);
    child
        .append(
            EventType::USER_MESSAGE,
            user("r"),
            Some(SurfaceIntent::append()),
        )
        .expect("u");
    assert_eq!(
        child
            .events()
            .iter()
            .map(|e| e.kind.to_string())
            .collect::<Vec<_>>(),
        vec!["user/message", "session/end-seed", "user/message"]
    );
    let log = seen.lock().expect("l").clone();
    assert_eq!(
        &log[2..],
        &[
            ("child".to_owned(), "session/end-seed".to_owned()),
            ("child".to_owned(), "user/message".to_owned())
        ]
    );
}

#[test]
fn store_flush_reports_listeners_and_failures() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("rt");
    rt.block_on(async {
        let (kernel, st) = store();
        let s = st.create(None, CreateOptions::default()).expect("s");
        assert_eq!(st.flush(&s).await, Ok(false));
        let reg = kernel
            .root()
            .on_parallel::<SessionFlush, _, _>(|_| async { Ok(()) })
            .expect("l");
        assert_eq!(st.flush(&s).await, Ok(true));
        reg.dispose().await;
        kernel
            .root()
            .on_parallel::<SessionFlush, _, _>(|_| async { Err("disk full".into()) })
            .expect("l")
            .detach();
        assert_eq!(
            st.flush(&s).await.map_err(|e| e.code()),
            Err("LISTENER_FAILED")
        );
    });
}

#[test]
fn plugin_provides_store_and_registry() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("rt");
    rt.block_on(async {
        let kernel = dsh_kernel::Kernel::new();
        kernel.boot().await.expect("boot");
        let st = kernel.root().get::<SessionStore>().expect("store");
        let reg = kernel.root().get::<EventTypeRegistry>().expect("registry");
        assert!(Arc::ptr_eq(st.registry(), &reg));
        kernel.dispose().await;
    });
}

#[test]
fn store_ids_are_free_again_after_dispose_and_auto_ids_skip_taken_ones() {
    let (_kernel, st) = store();
    st.create(Some("session-1".into()), CreateOptions::default())
        .expect("taken");
    let auto = st.create(None, CreateOptions::default()).expect("auto");
    assert_eq!(auto.id(), "session-2");
    assert!(st.dispose("session-1"));
    assert!(!st.dispose("session-1"));
    assert!(st.get("session-1").is_none());
    st.create(Some("session-1".into()), CreateOptions::default())
        .expect("free again");
    let ids: Vec<String> = st.list().iter().map(|s| s.id().to_owned()).collect();
    assert_eq!(ids, vec!["session-2".to_owned(), "session-1".to_owned()]);
}

// ---------------------------------------------------------------- pruned tool results

fn result_text(turn: u64, step: u64, id: &str, text: &str) -> EventData {
    EventData::ToolResult(ToolResultData {
        turn,
        step,
        message: Arc::new(Message::tool_result(
            id.into(),
            vec![ContentBlock::text(text)],
            false,
        )),
        error: None,
        meta: None,
    })
}

/// Turn 1 with step 1 (call `c1`, result at seq 5) closed, step 2 open.
fn one_tool_step_then_open_step(s: &Session) -> u64 {
    s.append(EventType::TURN_START, turn_start(1), None)
        .expect("turn");
    s.append(
        EventType::USER_MESSAGE,
        user("go"),
        Some(SurfaceIntent::append()),
    )
    .expect("user");
    s.append(
        EventType::STEP_START,
        EventData::StepStart(step(1, 1)),
        None,
    )
    .expect("step");
    let call = Message::assistant(
        vec![ContentBlock::tool_call("c1", "bash", "{}")],
        "p",
        "m",
        None,
    );
    s.append(
        EventType::ASSISTANT_MESSAGE,
        EventData::AssistantMessage(AssistantMessageData {
            turn: 1,
            step: 1,
            message: Arc::new(call),
            usage: None,
            interrupted: None,
        }),
        Some(SurfaceIntent::append()),
    )
    .expect("assistant");
    s.append(EventType::TOOL_CALL, tool_call(1, 1, "c1"), None)
        .expect("call");
    let r = s
        .append(
            EventType::TOOL_RESULT,
            result_text(1, 1, "c1", "long original output"),
            Some(SurfaceIntent::append()),
        )
        .expect("result");
    s.append(EventType::STEP_END, EventData::StepEnd(step(1, 1)), None)
        .expect("step end");
    r.seq
}

#[test]
fn a_replacing_tool_result_is_accepted_outside_its_step() {
    // Between steps (where the pruner runs, in `agent/pre-step`), in a later open step, and
    // between turns; live (debug builds check invariants on append) and on restore.
    let s = session();
    let r = one_tool_step_then_open_step(&s);
    assert_eq!(r, 5);
    let pruned = s
        .append(
            EventType::TOOL_RESULT,
            result_text(1, 1, "c1", "long … output"),
            Some(SurfaceIntent::replace(r, r, vec![r])),
        )
        .expect("replacement between steps");
    assert_eq!(pruned.seq, 7);
    assert_eq!(s.surface().nodes, vec![1, 3, 7]);
    assert_eq!(s.surface().replace_generation, 1);
    s.append(
        EventType::STEP_START,
        EventData::StepStart(step(1, 2)),
        None,
    )
    .expect("step 2");
    // Replacing the replacement, inside step 2.
    let again = s
        .append(
            EventType::TOOL_RESULT,
            result_text(1, 1, "c1", "short"),
            Some(SurfaceIntent::replace(7, 7, vec![7])),
        )
        .expect("replacement in a later step");
    s.append(EventType::STEP_END, EventData::StepEnd(step(1, 2)), None)
        .expect("step 2 end");
    s.append(
        EventType::TURN_END,
        EventData::TurnEnd(TurnEndData {
            turn: 1,
            reason: TurnEndReason::Completed,
        }),
        None,
    )
    .expect("turn end");
    let last = s
        .append(
            EventType::TOOL_RESULT,
            result_text(1, 1, "c1", "s"),
            Some(SurfaceIntent::replace(
                again.seq,
                again.seq,
                vec![again.seq],
            )),
        )
        .expect("replacement between turns");
    assert_eq!(s.surface().nodes, vec![1, 3, last.seq]);
    let nested = |m: &Message| match &m.content[..] {
        [ContentBlock::ToolResult { content, .. }] => content[0].as_text().map(str::to_owned),
        _ => None,
    };
    assert_eq!(nested(&s.derive_messages()[2]).as_deref(), Some("s"));
    // The log keeps the original.
    let EventData::ToolResult(orig) = &s.event(r).expect("original").data else {
        panic!("not a result");
    };
    assert_eq!(
        nested(&orig.message).as_deref(),
        Some("long original output")
    );
    assert_eq!(check_invariants(&s.events(), Some(s.registry())), vec![]);
    let events: Vec<SessionEvent> = s.events().iter().map(|e| (**e).clone()).collect();
    let restored = Session::from_restore("s", events, None).expect("restores");
    assert_eq!(restored.surface(), s.surface());
}

#[test]
fn a_replacing_tool_result_must_copy_its_original_turn_step_and_call() {
    let s = session();
    let r = one_tool_step_then_open_step(&s);
    let bad = |data: EventData, start: u64| {
        code(s.append(
            EventType::TOOL_RESULT,
            data,
            Some(SurfaceIntent::replace(start, start, vec![start])),
        ))
    };
    // Another call, another step, another turn, or a node that is not a tool result.
    assert_eq!(bad(result_text(1, 1, "c2", "x"), r), "BAD_SURFACE_OP");
    assert_eq!(bad(result_text(1, 2, "c1", "x"), r), "BAD_SURFACE_OP");
    assert_eq!(bad(result_text(2, 1, "c1", "x"), r), "BAD_SURFACE_OP");
    assert_eq!(bad(result_text(1, 1, "c1", "x"), 1), "BAD_SURFACE_OP");
    assert_eq!(s.len(), 7);
    // The checker alone (no events to look back at): the step it names must have started.
    let events = vec![
        ev(0, turn_start(1)),
        ev(1, EventData::StepStart(step(1, 1))),
        ev(2, tool_call(1, 1, "c1")),
        ev(3, tool_result(1, 1, "c1")),
        ev(4, EventData::StepEnd(step(1, 1))),
        Arc::new(SessionEvent {
            surface_op: Some(SurfaceOp::Replace { start: 3, end: 3 }),
            source_event_seqs: Some(vec![3]),
            ..(*ev(5, tool_result(1, 1, "c1"))).clone()
        }),
        Arc::new(SessionEvent {
            surface_op: Some(SurfaceOp::Replace { start: 5, end: 5 }),
            source_event_seqs: Some(vec![5]),
            ..(*ev(6, tool_result(1, 2, "c1"))).clone()
        }),
    ];
    let got: Vec<(u64, &str)> = check_invariants(&events, None)
        .into_iter()
        .map(|v| (v.seq, v.kind.code()))
        .collect();
    assert_eq!(got, vec![(6, "NOT_ENCLOSED")]);
}

#[test]
fn replace_accepts_sources_in_any_order() {
    // The shadowed nodes are looked up by seq in an ascending list (binary search) or in a
    // set of an unordered one; both must find every node, and a missing one is still refused.
    let s = session();
    for t in ["a", "b", "c", "d", "e"] {
        s.append(
            EventType::USER_MESSAGE,
            user(t),
            Some(SurfaceIntent::append()),
        )
        .expect("append");
    }
    s.append(
        EventType::USER_MESSAGE,
        user("x"),
        Some(SurfaceIntent::replace(1, 3, vec![3, 1, 2])),
    )
    .expect("unordered sources");
    assert_eq!(s.surface().nodes, vec![0, 5, 4]);
    assert_eq!(
        code(s.append(
            EventType::USER_MESSAGE,
            user("y"),
            Some(SurfaceIntent::replace(0, 4, vec![4, 0])),
        )),
        "BAD_SURFACE_OP"
    );
    assert_eq!(
        code(s.append(
            EventType::USER_MESSAGE,
            user("y"),
            Some(SurfaceIntent::replace(0, 4, vec![0, 4])),
        )),
        "BAD_SURFACE_OP"
    );
    s.append(
        EventType::USER_MESSAGE,
        user("y"),
        Some(SurfaceIntent::replace(0, 4, vec![0, 4, 5])),
    )
    .expect("ascending sources");
    assert_eq!(s.surface().nodes, vec![6]);
}
