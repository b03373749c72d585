//! Cold-session crash repair: [`interrupted_turn_closers`] computes the deterministic synthetic
//! events that close an open trailing turn (per-pending-call error results, `step/end`,
//! `turn/end {interrupted}`).
//!
//! Behaviour: `docs/persistence.md` ("Crash recovery"; texts and message ids are upstream's).

use std::sync::Arc;

use dsh_llm::{CallId, ContentBlock, Message, MessageId, MessageSource, Role};
use dsh_session::{
    EventData, EventType, SessionEvent, StepData, SurfaceOp, ToolResultData, ToolResultError,
    TurnEndData, TurnEndReason,
};

/// Recovery code for an assistant tool request that never reached a recorded `tool/call`.
pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";
/// Recovery code for a recorded `tool/call` whose outcome was not durably recorded.
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";

/// Result text for a call that was recorded (`tool/call` logged) but has no result.
pub const OUTCOME_UNKNOWN_TEXT: &str = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.";
/// Result text for a call requested by the assistant that never started.
pub const NOT_STARTED_TEXT: &str = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";

struct Pending {
    call_id: CallId,
    step: u64,
    call_seq: Option<u64>,
}

/// Returns the synthetic closer events to append after `events` (a valid committed prefix,
/// possibly ending inside a turn), in order; empty when no turn is open.
///
/// Scan: `turn/start` opens a turn (clears step and pending calls); `turn/end` closes it;
/// `step/start` opens a step; `step/end` clears pending calls and the step; `assistant/message`
/// tool-call blocks register pending calls (insertion order); `tool/call` records its seq on a
/// pending call; `tool/result` clears its call. If a turn is open the closers are, with
/// `seq = last.seq + 1, …` and `time = last.time`:
/// 1. per pending call a `tool/result` (`surfaceOp: append`, `isError: true` text block, message
///    id `interrupted-tool-result-<callId>-<seq>`, source `{kind:'tool', callId}`) with error
///    `ToolOutcomeUnknownError`/[`TOOL_OUTCOME_UNKNOWN`] and `sourceEventSeqs: [callSeq]` when the
///    call was logged, else `ToolNotStartedError`/[`TOOL_NOT_STARTED`] without provenance;
/// 2. `step/end {turn, step}` if a step is open;
/// 3. `turn/end {turn, reason: {kind: 'interrupted'}}`.
///
/// `compaction/*` brackets are never closed here. Deterministic and idempotent: a log ending with
/// these closers yields no further closers.
pub fn interrupted_turn_closers(events: &[SessionEvent]) -> Vec<SessionEvent> {
    let mut open_turn: Option<u64> = None;
    let mut open_step: Option<u64> = None;
    let mut pending: Vec<Pending> = Vec::new();
    for event in events {
        match &event.data {
            EventData::TurnStart(d) => {
                open_turn = Some(d.turn);
                open_step = None;
                pending.clear();
            }
            EventData::TurnEnd(_) => {
                open_turn = None;
                open_step = None;
                pending.clear();
            }
            EventData::StepStart(d) => open_step = Some(d.step),
            EventData::StepEnd(_) => {
                pending.clear();
                open_step = None;
            }
            EventData::AssistantMessage(d) => {
                for block in &d.message.content {
                    if let ContentBlock::ToolCall { id, .. } = block {
                        // Map semantics: re-registering an id keeps its insertion position.
                        if let Some(p) = pending.iter_mut().find(|p| &p.call_id == id) {
                            p.step = d.step;
                            p.call_seq = None;
                        } else {
                            pending.push(Pending {
                                call_id: id.clone(),
                                step: d.step,
                                call_seq: None,
                            });
                        }
                    }
                }
            }
            EventData::ToolCall(d) => {
                if let Some(p) = pending.iter_mut().find(|p| p.call_id == d.call_id) {
                    p.call_seq = Some(event.seq);
                }
            }
            EventData::ToolResult(d) => {
                if let MessageSource::Tool { call_id } = &d.message.source {
                    pending.retain(|p| &p.call_id != call_id);
                }
            }
            _ => {}
        }
    }
    let (Some(turn), Some(last)) = (open_turn, events.last()) else {
        return Vec::new();
    };
    let mut seq = last.seq + 1;
    let time = last.time;
    let mut closers = Vec::with_capacity(pending.len() + 2);
    for p in pending {
        let started = p.call_seq.is_some();
        let message = Message {
            id: MessageId::new(format!("interrupted-tool-result-{}-{seq}", p.call_id)),
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_call_id: p.call_id.clone(),
                content: vec![ContentBlock::text(if started {
                    OUTCOME_UNKNOWN_TEXT
                } else {
                    NOT_STARTED_TEXT
                })],
                is_error: Some(true),
            }],
            source: MessageSource::Tool {
                call_id: p.call_id.clone(),
            },
        };
        let error = if started {
            ToolResultError {
                name: "ToolOutcomeUnknownError".into(),
                code: TOOL_OUTCOME_UNKNOWN.into(),
            }
        } else {
            ToolResultError {
                name: "ToolNotStartedError".into(),
                code: TOOL_NOT_STARTED.into(),
            }
        };
        closers.push(SessionEvent {
            kind: EventType::TOOL_RESULT,
            seq,
            time,
            data: EventData::ToolResult(ToolResultData {
                turn,
                step: p.step,
                message: Arc::new(message),
                error: Some(error),
                meta: None,
            }),
            ignorable: false,
            source_event_seqs: p.call_seq.map(|s| vec![s]),
            surface_op: Some(SurfaceOp::Append),
            residual: None,
        });
        seq += 1;
    }
    if let Some(step) = open_step {
        closers.push(SessionEvent {
            kind: EventType::STEP_END,
            seq,
            time,
            data: EventData::StepEnd(StepData { turn, step }),
            ignorable: false,
            source_event_seqs: None,
            surface_op: None,
            residual: None,
        });
        seq += 1;
    }
    closers.push(SessionEvent {
        kind: EventType::TURN_END,
        seq,
        time,
        data: EventData::TurnEnd(TurnEndData {
            turn,
            reason: TurnEndReason::Interrupted,
        }),
        ignorable: false,
        source_event_seqs: None,
        surface_op: None,
        residual: None,
    });
    closers
}
