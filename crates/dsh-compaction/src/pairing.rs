//! Tool-pairing-safe cuts over the session surface.
//!
//! See docs/upstream/compaction.md (Service API, helpers): a cut between two surface nodes is
//! *balanced* when every tool call made by an assistant message before the cut has its
//! `tool/result` before the cut too (so the kept region never starts with a result whose call
//! was summarised away, and the summarised span never ends with a call whose result is kept or
//! still pending), and the node before the cut does not belong to the step that is still open.

use std::collections::HashSet;
use std::sync::Arc;

use dsh_llm::CallId;
use dsh_session::{EventData, Session, SessionError, SessionEvent, fold_surface};

use crate::error::CompactionError;

/// The current surface of a session as events, plus the step that is still open.
#[derive(Debug, Clone)]
pub struct SurfaceView {
    /// The current surface nodes in model order.
    pub nodes: Vec<Arc<SessionEvent>>,
    /// `(turn, step)` of the open step, if any.
    pub open_step: Option<(u64, u64)>,
    /// The surface's replace generation.
    pub generation: u64,
}

fn open_step_of(events: &[Arc<SessionEvent>]) -> Option<(u64, u64)> {
    let mut open = None;
    for e in events {
        match &e.data {
            EventData::StepStart(d) => open = Some((d.turn, d.step)),
            EventData::StepEnd(_) | EventData::TurnEnd(_) | EventData::EndSeed => open = None,
            _ => {}
        }
    }
    open
}

impl SurfaceView {
    /// The view of a live session (one snapshot of its log).
    pub fn of(session: &Session) -> Self {
        let surface = session.surface();
        let nodes = surface
            .nodes
            .iter()
            .filter_map(|&s| session.event(s))
            .collect();
        let open_step = match session.open_turn() {
            Some((t, Some(s))) => Some((t, s)),
            _ => None,
        };
        Self {
            nodes,
            open_step,
            generation: surface.replace_generation,
        }
    }

    /// The view of a log (folds its surface).
    ///
    /// # Errors
    /// As [`fold_surface`] for an inconsistent surface.
    pub fn from_events(events: &[Arc<SessionEvent>]) -> Result<Self, SessionError> {
        let fold = fold_surface(events)?;
        let by_seq = |s: u64| usize::try_from(s).ok().and_then(|i| events.get(i)).cloned();
        Ok(Self {
            nodes: fold.nodes.iter().filter_map(|&s| by_seq(s)).collect(),
            open_step: open_step_of(events),
            generation: fold.replacements.len() as u64,
        })
    }

    /// The position of surface node `seq`.
    pub fn position(&self, seq: u64) -> Option<usize> {
        self.nodes.iter().position(|e| e.seq == seq)
    }

    /// The surface seqs, in order.
    pub fn seqs(&self) -> Vec<u64> {
        self.nodes.iter().map(|e| e.seq).collect()
    }

    /// For every boundary `i` in `0..=nodes.len()` (a cut right before node `i`; `len` = after
    /// the last node), whether it is balanced. Boundary 0 (nothing before it) is balanced.
    /// One pass, O(nodes).
    pub fn balanced_boundaries(&self) -> Vec<bool> {
        let mut out = Vec::with_capacity(self.nodes.len() + 1);
        out.push(true);
        let mut pending: HashSet<CallId> = HashSet::new();
        for e in &self.nodes {
            let step = e.data.turn_step().and_then(|(t, s)| s.map(|s| (t, s)));
            match &e.data {
                EventData::AssistantMessage(d) => {
                    for (id, _, _) in d.message.tool_calls() {
                        pending.insert(id.clone());
                    }
                }
                EventData::ToolResult(d) => {
                    if let Some(id) = d.call_id() {
                        pending.remove(id);
                    }
                }
                _ => {}
            }
            let in_open_step = step.is_some() && step == self.open_step;
            out.push(pending.is_empty() && !in_open_step);
        }
        out
    }

    /// Checks an explicit inclusive region `[start_seq ..= end_seq]` (surface positions) and
    /// returns its node positions `(first, last)`.
    ///
    /// # Errors
    /// [`CompactionError::InvalidRegion`] when an edge is not a current surface node, the edges
    /// are reversed, or a cut before `start` or after `end` is not balanced.
    pub fn check_region(
        &self,
        start_seq: u64,
        end_seq: u64,
    ) -> Result<(usize, usize), CompactionError> {
        let a = self.position(start_seq).ok_or_else(|| {
            CompactionError::region(format!("seq {start_seq} is not a current surface node"))
        })?;
        let b = self.position(end_seq).ok_or_else(|| {
            CompactionError::region(format!("seq {end_seq} is not a current surface node"))
        })?;
        if a > b {
            return Err(CompactionError::region(format!(
                "seq {start_seq} comes after seq {end_seq} on the surface"
            )));
        }
        let balanced = self.balanced_boundaries();
        if !balanced[a] {
            return Err(CompactionError::region(format!(
                "a cut before seq {start_seq} separates a tool call from its result"
            )));
        }
        if !balanced[b + 1] {
            return Err(CompactionError::region(format!(
                "a cut after seq {end_seq} separates a tool call from its result or ends inside the open step"
            )));
        }
        Ok((a, b))
    }
}

/// Whether a cut right before surface node `seq` is balanced (`false` when `seq` is not a
/// current surface node).
pub fn tool_pairing_balanced_before(session: &Session, seq: u64) -> bool {
    let view = SurfaceView::of(session);
    view.position(seq)
        .is_some_and(|i| view.balanced_boundaries()[i])
}

/// Whether a cut right after surface node `seq` is balanced (`false` when `seq` is not a
/// current surface node).
pub fn tool_pairing_balanced_after(session: &Session, seq: u64) -> bool {
    let view = SurfaceView::of(session);
    view.position(seq)
        .is_some_and(|i| view.balanced_boundaries()[i + 1])
}
