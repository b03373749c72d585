#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_llm::{ContentBlock, Message};
use dsh_session::{
    AssistantMessageData, EventData, EventType, EventTypeRegistry, Session, SessionEvent, StepData,
    SurfaceIntent, SurfaceOp, ToolCallData, ToolResultData, TurnEndData, TurnEndReason,
    TurnStartData, check_invariants,
};
use serde_json::json;

use crate::*;
use dsh_kernel::ErrorCode as _;

fn registry() -> Arc<EventTypeRegistry> {
    let r = EventTypeRegistry::with_upstream_catalog();
    events::register(&r, "dsh-compaction-test").unwrap();
    Arc::new(r)
}

fn session(id: &str) -> Session {
    Session::create_with(id, None, None, registry()).unwrap()
}

fn turn_start(s: &Session, turn: u64, text: &str) -> u64 {
    s.append(
        EventType::TURN_START,
        EventData::TurnStart(TurnStartData {
            turn,
            trigger: None,
        }),
        None,
    )
    .unwrap();
    s.append(
        EventType::USER_MESSAGE,
        EventData::UserMessage(Arc::new(Message::user_text(text))),
        Some(SurfaceIntent::append()),
    )
    .unwrap()
    .seq
}

fn turn_end(s: &Session, turn: u64) {
    s.append(
        EventType::TURN_END,
        EventData::TurnEnd(TurnEndData {
            turn,
            reason: TurnEndReason::Completed,
        }),
        None,
    )
    .unwrap();
}

fn step_start(s: &Session, turn: u64, step: u64) {
    s.append(
        EventType::STEP_START,
        EventData::StepStart(StepData { turn, step }),
        None,
    )
    .unwrap();
}

fn step_end(s: &Session, turn: u64, step: u64) {
    s.append(
        EventType::STEP_END,
        EventData::StepEnd(StepData { turn, step }),
        None,
    )
    .unwrap();
}

/// Assistant message with one tool call; returns its seq.
fn call(s: &Session, turn: u64, step: u64, id: &str) -> u64 {
    let msg = Message::assistant(
        vec![ContentBlock::tool_call(id, "bash", r#"{"command":"ls"}"#)],
        "deepseek",
        "deepseek-v4-flash",
        None,
    );
    let a = s
        .append(
            EventType::ASSISTANT_MESSAGE,
            EventData::AssistantMessage(AssistantMessageData {
                turn,
                step,
                message: Arc::new(msg),
                usage: None,
                interrupted: None,
            }),
            Some(SurfaceIntent::append()),
        )
        .unwrap();
    s.append(
        EventType::TOOL_CALL,
        EventData::ToolCall(ToolCallData {
            turn,
            step,
            call_id: id.into(),
            name: "bash".into(),
            arguments: r#"{"command":"ls"}"#.into(),
        }),
        None,
    )
    .unwrap();
    a.seq
}

fn result(s: &Session, turn: u64, step: u64, id: &str, text: &str) -> u64 {
    s.append(
        EventType::TOOL_RESULT,
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
        }),
        Some(SurfaceIntent::append()),
    )
    .unwrap()
    .seq
}

/// user(2) | step 1: call(4) result(6) | step 2: call(9) result(11) | step 3 open: call(14)
fn open_step_log() -> Session {
    let s = session("s");
    s.append(
        EventType::REQUEST_CONTEXT,
        EventData::RequestContext(dsh_session::RequestContext {
            provider: "deepseek".into(),
            model: "deepseek-v4-flash".into(),
            context_window: Some(16_000),
        }),
        None,
    )
    .unwrap();
    turn_start(&s, 1, "list the files");
    for step in 1..=2 {
        step_start(&s, 1, step);
        let id = format!("c{step}");
        call(&s, 1, step, &id);
        result(&s, 1, step, &id, &"x".repeat(2000));
        step_end(&s, 1, step);
    }
    step_start(&s, 1, 3);
    call(&s, 1, 3, "c3");
    s
}

#[test]
fn payloads_serialize_to_upstream_json() {
    let start = CompactionStart {
        compaction_id: "c-1".into(),
        source_command_id: None,
        turn: None,
    };
    assert_eq!(
        serde_json::to_value(&start).unwrap(),
        json!({"compactionId": "c-1", "turn": null})
    );
    let end = CompactionEnd {
        compaction_id: "c-1".into(),
        source_command_id: Some("cmd-1".into()),
        turn: Some(3),
        error: Some("boom".into()),
    };
    assert_eq!(
        serde_json::to_value(&end).unwrap(),
        json!({"compactionId": "c-1", "sourceCommandId": "cmd-1", "turn": 3, "error": "boom"})
    );
    let prune = CompactionPrune {
        shadowed_range: SeqRange { start: 7, end: 7 },
        shadowed_seqs: vec![7],
        shadowed_token_count: 2052,
    };
    assert_eq!(
        serde_json::to_value(&prune).unwrap(),
        json!({"shadowedRange": {"start": 7, "end": 7}, "shadowedSeqs": [7], "shadowedTokenCount": 2052})
    );
}

#[test]
fn registered_types_refuse_payloads_off_upstream_shape() {
    let s = session("s");
    let bad = s.append_value(
        "compaction/start",
        json!({"compactionId": 5, "turn": null}),
        None,
        false,
    );
    assert_eq!(bad.unwrap_err().code(), "INVALID_PLUGIN_PAYLOAD");
    let image_summary = json!({
        "compactionId": "c", "summary": [{"type": "image", "attachment": {}}],
        "shadowedRange": {"start": 1, "end": 2}, "shadowedSeqs": [1, 2],
        "shadowedTokenCount": 10, "provider": "p", "model": "m"
    });
    let err = s
        .append_value("compaction/summary", image_summary, None, false)
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_PLUGIN_PAYLOAD");
    assert!(err.to_string().contains("text blocks only"), "{err}");
    let no_raw = json!({
        "compactionId": "c", "summary": [{"type": "text", "text": "s"}],
        "shadowedRange": {"start": 1, "end": 2}, "shadowedSeqs": [1, 2],
        "shadowedTokenCount": 10, "provider": "p", "model": "m", "llmStreamCall": true
    });
    let err = s
        .append_value("compaction/summary", no_raw, None, false)
        .unwrap_err();
    assert!(err.to_string().contains("requires rawOutput"), "{err}");
    // Between turns is fine.
    let ok = s
        .append_value(
            "compaction/start",
            json!({"compactionId": "c", "turn": null}),
            None,
            false,
        )
        .unwrap();
    assert_eq!(
        CompactionEvent::parse(&ok).unwrap().unwrap(),
        CompactionEvent::Start(CompactionStart {
            compaction_id: "c".into(),
            source_command_id: None,
            turn: None
        })
    );
}

#[test]
fn lock_rule_live_matched_and_stale() {
    let s = session("s");
    turn_start(&s, 1, "hi");
    turn_end(&s, 1);
    assert_eq!(active_lock(&s.events()), None);
    let b = Bracket::begin(&s, None, None).unwrap();
    assert_eq!(b.start_seq, 3);
    let lock = active_lock(&s.events()).unwrap();
    assert_eq!((lock.seq, lock.turn), (3, None));
    assert_eq!(lock.compaction_id, b.compaction_id);
    // Every entry point is blocked.
    let busy = Bracket::begin(&s, None, None).unwrap_err();
    assert_eq!(busy.code(), "BUSY");
    assert_eq!(busy.kind(), "busy");
    // A matched start releases it.
    let end_seq = b.close_failed(&s, &CompactionError::Cancelled).unwrap();
    assert_eq!(end_seq, 4);
    assert_eq!(active_lock(&s.events()), None);
    assert_eq!(
        s.event(4).unwrap().data.to_value(),
        json!({"compactionId": b.compaction_id, "turn": null, "error": "compaction cancelled"})
    );

    // A crash leaves an orphan start; after a fork/restore with end-seed it is stale.
    let crashed = session("crashed");
    turn_start(&crashed, 1, "hi");
    turn_end(&crashed, 1);
    Bracket::begin(&crashed, None, None).unwrap();
    assert!(active_lock(&crashed.events()).is_some());
    let seed: Vec<SessionEvent> = crashed.events().iter().map(|e| (**e).clone()).collect();
    let child = Session::create_with("child", Some(seed), None, registry()).unwrap();
    turn_start(&child, 2, "again"); // writes session/end-seed first
    assert_eq!(child.event(4).unwrap().kind, EventType::END_SEED);
    assert_eq!(active_lock(&child.events()), None);
    turn_end(&child, 2);
    assert!(Bracket::begin(&child, None, None).is_ok());

    // A resume of the same session (no end-seed): the orphan start is from the dead process,
    // so it blocks nothing in this lifecycle; a start of this lifecycle still does.
    let seed: Vec<SessionEvent> = crashed.events().iter().map(|e| (**e).clone()).collect();
    let resumed = Session::from_restore_with("crashed", seed, None, registry()).unwrap();
    assert_eq!(active_lock(&resumed.events()).unwrap().seq, 3);
    assert_eq!(crate::active_lock_of(&resumed), None);
    assert_eq!(crate::active_lock_of(&crashed).unwrap().seq, 3);
    let b = Bracket::begin(&resumed, None, None).unwrap();
    assert_eq!(b.start_seq, 4);
    assert_eq!(crate::active_lock_of(&resumed).unwrap().seq, 4);
    assert_eq!(
        Bracket::begin(&resumed, None, None).unwrap_err().code(),
        "BUSY"
    );
}

#[test]
fn balanced_boundaries_over_the_surface() {
    let s = open_step_log();
    let view = SurfaceView::of(&s);
    assert_eq!(view.seqs(), vec![2, 4, 6, 9, 11, 14]);
    assert_eq!(view.open_step, Some((1, 3)));
    // before 2 | 4 | 6 | 9 | 11 | 14 | end
    assert_eq!(
        view.balanced_boundaries(),
        vec![true, true, false, true, false, true, false]
    );
    assert!(tool_pairing_balanced_before(&s, 9));
    assert!(!tool_pairing_balanced_before(&s, 6));
    assert!(tool_pairing_balanced_after(&s, 11));
    assert!(!tool_pairing_balanced_after(&s, 14));
    assert!(!tool_pairing_balanced_before(&s, 3)); // not a surface node
    // The same view from the log alone.
    let folded = SurfaceView::from_events(&s.events()).unwrap();
    assert_eq!(folded.seqs(), view.seqs());
    assert_eq!(folded.open_step, view.open_step);
    assert_eq!(folded.balanced_boundaries(), view.balanced_boundaries());
}

#[test]
fn explicit_regions_are_checked() {
    let s = open_step_log();
    let view = SurfaceView::of(&s);
    assert_eq!(view.check_region(2, 11).unwrap(), (0, 4));
    let msg = |r: Result<(usize, usize), CompactionError>| r.unwrap_err().to_string();
    assert_eq!(
        msg(view.check_region(2, 6 + 100)),
        "invalid compaction region: seq 106 is not a current surface node"
    );
    assert_eq!(
        msg(view.check_region(9, 4)),
        "invalid compaction region: seq 9 comes after seq 4 on the surface"
    );
    assert_eq!(
        msg(view.check_region(2, 4)),
        "invalid compaction region: a cut after seq 4 separates a tool call from its result or ends inside the open step"
    );
    assert_eq!(
        msg(view.check_region(6, 11)),
        "invalid compaction region: a cut before seq 6 separates a tool call from its result"
    );
    assert_eq!(
        view.check_region(6, 11).unwrap_err().code(),
        "INVALID_REGION"
    );
}

fn input(text: &str) -> SummaryInput {
    SummaryInput {
        summary: vec![ContentBlock::text(text), ContentBlock::reasoning("dropped")],
        provider: "deepseek".into(),
        model: "deepseek-v4-flash".into(),
        max_tokens: Some(8192),
        usage: None,
        raw_output: Some(vec![
            ContentBlock::reasoning("think"),
            ContentBlock::text(text),
        ]),
    }
}

#[test]
fn commit_replaces_the_span_with_the_checkpoint() {
    let s = open_step_log();
    let view = SurfaceView::of(&s);
    let (a, b) = view.check_region(2, 11).unwrap();
    let region = checkpoint::Region::from_view(&view, a, b);
    // user "list the files" 4+4+4 = 12, + 2×(call 13 + result 2000/4+4+4+4 = 512)
    assert_eq!(region.shadowed_token_count, 12 + 2 * (13 + 512));
    assert_eq!(region.shadowed_seqs, vec![2, 4, 6, 9, 11]);
    let bracket = Bracket::begin(&s, Some(1), None).unwrap();
    assert_eq!(bracket.start_seq, 16);
    let r = bracket
        .commit(
            &s,
            &region,
            input("## Primary Request and Intent\n- list files"),
        )
        .unwrap();
    assert_eq!(
        (r.start_seq, r.summary_seq, r.message_seq, r.end_seq),
        (16, 17, 18, 19)
    );
    assert_eq!(r.shadowed_range, SeqRange { start: 2, end: 11 });
    assert_eq!(
        r.summary,
        vec![ContentBlock::text(
            "## Primary Request and Intent\n- list files"
        )]
    );
    assert_eq!(
        r.command_text(),
        "Compacted 5 history items (~1062 tokens)."
    );
    let msg_ev = s.event(18).unwrap();
    assert_eq!(
        msg_ev.surface_op,
        Some(SurfaceOp::Replace { start: 2, end: 11 })
    );
    assert_eq!(msg_ev.source_event_seqs, Some(vec![16, 17, 2, 4, 6, 9, 11]));
    let EventData::UserMessage(m) = &msg_ev.data else {
        panic!("not a user message")
    };
    assert!(is_checkpoint(m));
    assert_eq!(
        serde_json::to_value(&m.source).unwrap(),
        json!({"kind": "plugin", "plugin": "compact", "compactionId": bracket.compaction_id})
    );
    assert_eq!(m.content.len(), 3);
    assert_eq!(
        m.content[0].as_text().unwrap(),
        format!("{}\n\n<compacted-summary>", checkpoint::PREAMBLE)
    );
    assert_eq!(m.content[2].as_text(), Some("</compacted-summary>"));
    assert_eq!(r.message_tokens, dsh_token_meter::estimate_message(m));
    // Surface: the checkpoint, then the open step's call.
    assert_eq!(SurfaceView::of(&s).seqs(), vec![18, 14]);
    assert_eq!(active_lock(&s.events()), None);
    let summary = CompactionEvent::parse(&s.event(17).unwrap())
        .unwrap()
        .unwrap();
    let CompactionEvent::Summary(d) = summary else {
        panic!("not a summary")
    };
    assert_eq!(d.llm_stream_call, Some(true));
    assert_eq!(d.shadowed_token_count, 1062);
    assert_eq!(check_invariants(&s.events(), Some(s.registry())), vec![]);
}

#[test]
fn a_summary_not_smaller_than_its_source_is_refused_before_writing() {
    let s = session("s");
    turn_start(&s, 1, "hi");
    let view = SurfaceView::of(&s);
    let region = checkpoint::Region::from_view(&view, 0, 0);
    assert_eq!(region.shadowed_token_count, 9); // "hi": 1 + 4 + 4
    let bracket = Bracket::begin(&s, Some(1), None).unwrap();
    let len = s.len();
    let err = bracket
        .commit(&s, &region, input("a long summary"))
        .unwrap_err();
    assert_eq!(err.code(), "SUMMARY");
    assert!(matches!(&err, CompactionError::Summary { code, .. } if code == "SUMMARY_NOT_SMALLER"));
    assert_eq!(s.len(), len);
    let empty = bracket.commit(&s, &region, input("  ")).unwrap_err();
    assert!(matches!(&empty, CompactionError::Summary { code, .. } if code == "EMPTY_SUMMARY"));
    bracket.close_failed(&s, &err).unwrap();
    assert_eq!(active_lock(&s.events()), None);
}

#[test]
fn a_span_that_changed_is_refused() {
    let s = open_step_log();
    let view = SurfaceView::of(&s);
    let region = checkpoint::Region::from_view(&view, 0, 4);
    let bracket = Bracket::begin(&s, Some(1), None).unwrap();
    // Someone else compacts 2..=6 meanwhile (a plain replace).
    s.append(
        EventType::USER_MESSAGE,
        EventData::UserMessage(Arc::new(Message::user_text("other"))),
        Some(SurfaceIntent::replace(2, 6, vec![2, 4, 6])),
    )
    .unwrap();
    let err = bracket.commit(&s, &region, input("s")).unwrap_err();
    assert_eq!(err.code(), "CHANGED");
}

#[test]
fn live_event_payloads_serialise_as_documented() {
    use crate::{
        CompactionCause, CompactionCompleted, CompactionCompletedPayload, CompactionNotice,
        CompactionNoticePayload, NoticeLevel,
    };
    use dsh_kernel::EmitEvent;
    assert_eq!(CompactionNotice::NAME, "compaction/notice");
    assert_eq!(CompactionCompleted::NAME, "compaction/completed");
    let n = CompactionNoticePayload {
        session_id: "s1".into(),
        scope: None,
        turn: Some(2),
        trigger: CompactionCause::ContextOverflow,
        level: NoticeLevel::Warning,
        code: "SUMMARY_NOT_SMALLER".into(),
        message: "m".into(),
    };
    assert_eq!(
        serde_json::to_value(&n).unwrap(),
        serde_json::json!({"sessionId":"s1","turn":2,"trigger":"context-overflow",
            "level":"warning","code":"SUMMARY_NOT_SMALLER","message":"m"})
    );
    let c = CompactionCompletedPayload {
        session_id: "s1".into(),
        scope: None,
        turn: None,
        trigger: CompactionCause::Manual,
        compaction_id: None,
        tokens_before: 100,
        tokens_after: 40,
        shadowed_count: 0,
        pruned_count: 3,
    };
    assert_eq!(
        serde_json::to_value(&c).unwrap(),
        serde_json::json!({"sessionId":"s1","turn":null,"trigger":"manual","compactionId":null,
            "tokensBefore":100,"tokensAfter":40,"shadowedCount":0,"prunedCount":3})
    );
    assert_eq!(
        CompactionCause::from(crate::Trigger::Pressure).as_str(),
        "pressure"
    );
}
