//! The session invariants checker: turn/step numbering, execution enclosure and same-step
//! `tool/call` / `tool/result` pairing.
//!
//! See docs/upstream/session.md (Enclosure invariants).
//!
//! Rules (each violation has a distinct [`ViolationKind`]):
//! - `turn/start{turn}`: no turn open; `turn` > every earlier turn number.
//! - `turn/end{turn}`: names the open turn; no step left open.
//! - `step/start{turn,step}`: inside its open turn, no step open, `step` > earlier steps of it.
//! - `step/end{turn,step}`: names the open step.
//! - `assistant/chunk`, `assistant/message`, `tool/call`, `tool/result`: inside the open step
//!   they name.
//! - `tool/call`: call id not yet announced by a `tool/call` in this step.
//! - `tool/result`: answers a call announced in the same step (by `tool/call` or a tool-call
//!   block of the step's `assistant/message`), at most once.
//! - A `tool/result` replacing one surface node (`surfaceOp {op:'replace', start: s, end: s}`,
//!   the tool-result pruner's shortened copy of an earlier result) is exempt from enclosure and
//!   pairing: it repeats the original's turn and step, which must already have started; the
//!   session checks that `s` is a `tool/result` of the same turn, step and call. See
//!   docs/upstream/compaction.md (Tool-result pruner).
//! - Declared log-only types with `between_turns = false` need an open turn.
//! - `session/end-seed` ends the seed's lifecycle: a turn left open by the seed is dead
//!   (numbering continues).

use std::collections::HashMap;
use std::sync::Arc;

use dsh_llm::CallId;
use serde::Serialize;

use crate::event::{EventData, SessionEvent, SurfaceOp};
use crate::registry::EventTypeRegistry;

/// The class of an invariant violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ViolationKind {
    /// `turn/start` while a turn is open.
    TurnAlreadyOpen,
    /// A turn number not greater than an earlier one.
    TurnNotMonotonic,
    /// `turn/end` (or `step/*`) naming a turn that is not the open one, or none open.
    TurnMismatch,
    /// `turn/end` while a step is still open.
    StepOpenAtTurnEnd,
    /// `step/start` while a step is open.
    StepAlreadyOpen,
    /// A step number not greater than an earlier step of the same turn.
    StepNotMonotonic,
    /// `step/end` naming a step that is not the open one.
    StepMismatch,
    /// An execution event outside the open step it names.
    NotEnclosed,
    /// A `tool/call` id announced twice in one step.
    DuplicateToolCall,
    /// A `tool/result` whose call was not announced in the same step.
    UnpairedToolResult,
    /// A second `tool/result` for the same call.
    DuplicateToolResult,
    /// A log-only type that must sit inside a turn appeared between turns.
    OutsideTurn,
}

impl ViolationKind {
    /// Stable code (`SCREAMING_SNAKE_CASE`), e.g. `UNPAIRED_TOOL_RESULT`.
    pub fn code(self) -> &'static str {
        match self {
            Self::TurnAlreadyOpen => "TURN_ALREADY_OPEN",
            Self::TurnNotMonotonic => "TURN_NOT_MONOTONIC",
            Self::TurnMismatch => "TURN_MISMATCH",
            Self::StepOpenAtTurnEnd => "STEP_OPEN_AT_TURN_END",
            Self::StepAlreadyOpen => "STEP_ALREADY_OPEN",
            Self::StepNotMonotonic => "STEP_NOT_MONOTONIC",
            Self::StepMismatch => "STEP_MISMATCH",
            Self::NotEnclosed => "NOT_ENCLOSED",
            Self::DuplicateToolCall => "DUPLICATE_TOOL_CALL",
            Self::UnpairedToolResult => "UNPAIRED_TOOL_RESULT",
            Self::DuplicateToolResult => "DUPLICATE_TOOL_RESULT",
            Self::OutsideTurn => "OUTSIDE_TURN",
        }
    }
}

/// One violation: where, which rule, and a human message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Seq of the offending event.
    pub seq: u64,
    /// The rule broken.
    pub kind: ViolationKind,
    /// Description with the numbers involved.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at seq {}: {}",
            self.kind.code(),
            self.seq,
            self.message
        )
    }
}

/// Incremental checker state. Feed events in log order with [`InvariantChecker::check`]; a
/// rejected event leaves the state unchanged.
#[derive(Debug, Clone, Default)]
pub struct InvariantChecker {
    last_turn: u64,
    open_turn: Option<u64>,
    last_step: u64,
    open_step: Option<u64>,
    /// Calls announced in the open step → whether a result was seen.
    calls: HashMap<CallId, bool>,
    /// Calls announced by a `tool/call` event in the open step.
    recorded: HashMap<CallId, u64>,
}

impl InvariantChecker {
    /// A fresh checker (no turn seen).
    pub fn new() -> Self {
        Self::default()
    }

    /// The open turn, if any.
    pub fn open_turn(&self) -> Option<u64> {
        self.open_turn
    }

    /// The open step, if any.
    pub fn open_step(&self) -> Option<u64> {
        self.open_step
    }

    /// Checks `e` against the state and advances it when valid.
    ///
    /// # Errors
    /// The [`Violation`] (state unchanged).
    pub fn check(
        &mut self,
        e: &SessionEvent,
        registry: Option<&EventTypeRegistry>,
    ) -> Result<(), Violation> {
        let v = |kind: ViolationKind, message: String| Violation {
            seq: e.seq,
            kind,
            message,
        };
        match &e.data {
            EventData::TurnStart(d) => {
                if let Some(t) = self.open_turn {
                    return Err(v(
                        ViolationKind::TurnAlreadyOpen,
                        format!("turn/start {} while turn {t} is open", d.turn),
                    ));
                }
                if d.turn <= self.last_turn {
                    return Err(v(
                        ViolationKind::TurnNotMonotonic,
                        format!("turn {} after turn {}", d.turn, self.last_turn),
                    ));
                }
                self.last_turn = d.turn;
                self.open_turn = Some(d.turn);
                self.last_step = 0;
                self.open_step = None;
                self.calls.clear();
                self.recorded.clear();
            }
            EventData::TurnEnd(d) => {
                if self.open_turn != Some(d.turn) {
                    return Err(v(
                        ViolationKind::TurnMismatch,
                        format!("turn/end {} but open turn is {:?}", d.turn, self.open_turn),
                    ));
                }
                if let Some(s) = self.open_step {
                    return Err(v(
                        ViolationKind::StepOpenAtTurnEnd,
                        format!("turn/end {} with step {s} open", d.turn),
                    ));
                }
                self.open_turn = None;
            }
            EventData::StepStart(d) => {
                if self.open_turn != Some(d.turn) {
                    return Err(v(
                        ViolationKind::TurnMismatch,
                        format!(
                            "step/start in turn {} but open turn is {:?}",
                            d.turn, self.open_turn
                        ),
                    ));
                }
                if let Some(s) = self.open_step {
                    return Err(v(
                        ViolationKind::StepAlreadyOpen,
                        format!("step/start {} while step {s} is open", d.step),
                    ));
                }
                if d.step <= self.last_step {
                    return Err(v(
                        ViolationKind::StepNotMonotonic,
                        format!("step {} after step {}", d.step, self.last_step),
                    ));
                }
                self.last_step = d.step;
                self.open_step = Some(d.step);
                self.calls.clear();
                self.recorded.clear();
            }
            EventData::StepEnd(d) => {
                if self.open_turn != Some(d.turn) || self.open_step != Some(d.step) {
                    return Err(v(
                        ViolationKind::StepMismatch,
                        format!(
                            "step/end {}/{} but open is {:?}/{:?}",
                            d.turn, d.step, self.open_turn, self.open_step
                        ),
                    ));
                }
                self.open_step = None;
            }
            EventData::AssistantChunk(d) => self.enclosed(e.seq, d.turn, d.step)?,
            EventData::AssistantMessage(d) => {
                self.enclosed(e.seq, d.turn, d.step)?;
                for (id, _, _) in d.message.tool_calls() {
                    self.calls.entry(id.clone()).or_insert(false);
                }
            }
            EventData::ToolCall(d) => {
                self.enclosed(e.seq, d.turn, d.step)?;
                if self.recorded.contains_key(&d.call_id) {
                    return Err(v(
                        ViolationKind::DuplicateToolCall,
                        format!("tool/call `{}` announced twice", d.call_id),
                    ));
                }
                self.recorded.insert(d.call_id.clone(), e.seq);
                self.calls.entry(d.call_id.clone()).or_insert(false);
            }
            EventData::ToolResult(d) if matches!(e.surface_op, Some(SurfaceOp::Replace { start, end }) if start == end) =>
            {
                // A replacement of an earlier result (the tool-result pruner): it repeats the
                // original's turn, step and call and may be written in any later step or
                // between turns; it pairs nothing anew. The session checks the original.
                let seen = d.turn < self.last_turn
                    || (d.turn == self.last_turn && d.step <= self.last_step);
                if !seen {
                    return Err(v(
                        ViolationKind::NotEnclosed,
                        format!(
                            "replacement tool/result names {}/{}, which has not started",
                            d.turn, d.step
                        ),
                    ));
                }
            }
            EventData::ToolResult(d) => {
                self.enclosed(e.seq, d.turn, d.step)?;
                let Some(id) = d.call_id() else {
                    return Err(v(
                        ViolationKind::UnpairedToolResult,
                        "tool/result names no call id".to_owned(),
                    ));
                };
                match self.calls.get(id) {
                    None => {
                        return Err(v(
                            ViolationKind::UnpairedToolResult,
                            format!("tool/result for `{id}` not announced in step {}", d.step),
                        ));
                    }
                    Some(true) => {
                        return Err(v(
                            ViolationKind::DuplicateToolResult,
                            format!("second tool/result for `{id}`"),
                        ));
                    }
                    Some(false) => {}
                }
                self.calls.insert(id.clone(), true);
            }
            EventData::EndSeed => {
                self.open_turn = None;
                self.open_step = None;
                self.calls.clear();
                self.recorded.clear();
            }
            EventData::Opaque(_) => {
                if self.open_turn.is_none()
                    && let Some(reg) = registry
                    && reg.declared_between_turns(&e.kind) == Some(false)
                {
                    return Err(v(
                        ViolationKind::OutsideTurn,
                        format!("`{}` must be inside a turn", e.kind),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn enclosed(&self, seq: u64, turn: u64, step: u64) -> Result<(), Violation> {
        if self.open_turn == Some(turn) && self.open_step == Some(step) {
            Ok(())
        } else {
            Err(Violation {
                seq,
                kind: ViolationKind::NotEnclosed,
                message: format!(
                    "event names {turn}/{step} but open is {:?}/{:?}",
                    self.open_turn, self.open_step
                ),
            })
        }
    }
}

/// Checks a whole log; returns every violation (the checker skips an offending event and goes
/// on, so later independent violations are reported too).
pub fn check_invariants(
    events: &[Arc<SessionEvent>],
    registry: Option<&EventTypeRegistry>,
) -> Vec<Violation> {
    let mut c = InvariantChecker::new();
    let mut out = Vec::new();
    for e in events {
        if let Err(v) = c.check(e, registry) {
            out.push(v);
        }
    }
    out
}
