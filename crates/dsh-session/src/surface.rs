//! The ordered surface: which surface events (`user/message`, `assistant/message`,
//! `tool/result`) are model-visible, in model order, after `append`/`replace` ops.
//!
//! See docs/upstream/session.md (Surface).
//!
//! Rules enforced by [`SurfaceManager::validate`] (shared by live append, restore and
//! `fold_surface`): surface types must carry a surface op and other types must not;
//! `sourceEventSeqs` unique, earlier than the event, non-empty unless `assistant/message`;
//! `replace{start,end}`: both are current surface nodes, `start` is at or before `end` by
//! surface POSITION, and every shadowed node is listed in `sourceEventSeqs` (checked in
//! O(log m) per shadowed node, m = the list's length).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::SessionError;
use crate::event::{CoreKind, EventType, SessionEvent, SurfaceOp};

/// A snapshot of the live surface. JSON `{"nodes":[seq…],"replaceGeneration":n}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSurface {
    /// Current surface seqs in model order.
    pub nodes: Vec<u64>,
    /// +1 per committed replace.
    pub replace_generation: u64,
}

/// One replace observed while folding. JSON `{"seq","start","end","shadowedSeqs"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SurfaceReplacement {
    /// Seq of the replacing event.
    pub seq: u64,
    /// Declared start seq.
    pub start: u64,
    /// Declared end seq.
    pub end: u64,
    /// The nodes actually shadowed, in surface order.
    pub shadowed_seqs: Vec<u64>,
}

/// Result of [`fold_surface`]. JSON `{"nodes","replacements"}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SurfaceFold {
    /// Current surface seqs in model order.
    pub nodes: Vec<u64>,
    /// Replacements in event order.
    pub replacements: Vec<SurfaceReplacement>,
}

/// A validated placement, produced by [`SurfaceManager::validate`] and applied by
/// [`SurfaceManager::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Not a surface event.
    None,
    /// Push at the tail.
    Append,
    /// Replace positions `lo..=hi`.
    Replace {
        /// First shadowed position.
        lo: usize,
        /// Last shadowed position.
        hi: usize,
    },
}

/// The incremental surface fold used by a live session (and by [`fold_surface`]).
#[derive(Debug, Clone, Default)]
pub struct SurfaceManager {
    nodes: Vec<u64>,
    pos: HashMap<u64, usize>,
    generation: u64,
}

impl SurfaceManager {
    /// An empty surface.
    pub fn new() -> Self {
        Self::default()
    }

    /// Current nodes in model order.
    pub fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    /// Replace generation (+1 per replace).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Surface position of `seq`, if it is a current node.
    pub fn position(&self, seq: u64) -> Option<usize> {
        self.pos.get(&seq).copied()
    }

    /// Validates a candidate surface placement for an event at `seq` of type `kind`.
    ///
    /// # Errors
    /// [`SessionError::MissingSurfaceIntent`] (surface type without op),
    /// [`SessionError::UnexpectedSurfaceIntent`] (other type with op or provenance),
    /// [`SessionError::BadProvenance`], [`SessionError::BadSurfaceOp`].
    pub fn validate(
        &self,
        kind: &EventType,
        seq: u64,
        surface_op: Option<&SurfaceOp>,
        sources: Option<&[u64]>,
    ) -> Result<Placement, SessionError> {
        let core = kind.core();
        let is_surface = core.is_some_and(CoreKind::is_surface);
        if !is_surface {
            if surface_op.is_some() || sources.is_some() {
                return Err(SessionError::UnexpectedSurfaceIntent {
                    kind: kind.to_string(),
                });
            }
            return Ok(Placement::None);
        }
        let Some(op) = surface_op else {
            return Err(SessionError::MissingSurfaceIntent {
                kind: kind.to_string(),
            });
        };
        if let Some(src) = sources {
            if src.is_empty() && core != Some(CoreKind::AssistantMessage) {
                return Err(SessionError::BadProvenance {
                    message: format!(
                        "empty sourceEventSeqs on `{kind}` (only assistant/message may carry [])"
                    ),
                });
            }
            check_sources(seq, src)?;
        }
        match *op {
            SurfaceOp::Append => Ok(Placement::Append),
            SurfaceOp::Replace { start, end } => {
                let lo = self
                    .position(start)
                    .ok_or_else(|| SessionError::BadSurfaceOp {
                        message: format!("replace start {start} is not a current surface node"),
                    })?;
                let hi = self
                    .position(end)
                    .ok_or_else(|| SessionError::BadSurfaceOp {
                        message: format!("replace end {end} is not a current surface node"),
                    })?;
                if lo > hi {
                    return Err(SessionError::BadSurfaceOp {
                        message: format!(
                            "replace start {start} (position {lo}) is after end {end} (position {hi})"
                        ),
                    });
                }
                let src = sources.unwrap_or(&[]);
                // O(log m) per shadowed node: binary search in an ascending list (what dsh
                // writes), else one hash set of the list.
                let ascending = src.windows(2).all(|w| w[0] < w[1]);
                let set: Option<HashSet<u64>> = (!ascending).then(|| src.iter().copied().collect());
                let listed = |n: u64| match &set {
                    Some(set) => set.contains(&n),
                    None => src.binary_search(&n).is_ok(),
                };
                for &n in &self.nodes[lo..=hi] {
                    if !listed(n) {
                        return Err(SessionError::BadSurfaceOp {
                            message: format!("shadowed node {n} is missing from sourceEventSeqs"),
                        });
                    }
                }
                Ok(Placement::Replace { lo, hi })
            }
        }
    }

    /// Applies a placement validated for `seq`; returns the shadowed seqs (empty for append).
    pub fn apply(&mut self, seq: u64, placement: &Placement) -> Vec<u64> {
        match *placement {
            Placement::None => Vec::new(),
            Placement::Append => {
                self.pos.insert(seq, self.nodes.len());
                self.nodes.push(seq);
                Vec::new()
            }
            Placement::Replace { lo, hi } if lo == hi => {
                // One for one (the tool-result pruner): no position moves.
                let old = std::mem::replace(&mut self.nodes[lo], seq);
                self.pos.remove(&old);
                self.pos.insert(seq, lo);
                self.generation += 1;
                vec![old]
            }
            Placement::Replace { lo, hi } => {
                let shadowed: Vec<u64> = self.nodes.splice(lo..=hi, [seq]).collect();
                for s in &shadowed {
                    self.pos.remove(s);
                }
                for (i, &n) in self.nodes.iter().enumerate().skip(lo) {
                    self.pos.insert(n, i);
                }
                self.generation += 1;
                shadowed
            }
        }
    }

    /// Validates and applies one logged event.
    ///
    /// # Errors
    /// As [`SurfaceManager::validate`].
    pub fn push_event(&mut self, e: &SessionEvent) -> Result<Vec<u64>, SessionError> {
        let p = self.validate(
            &e.kind,
            e.seq,
            e.surface_op.as_ref(),
            e.source_event_seqs.as_deref(),
        )?;
        Ok(self.apply(e.seq, &p))
    }

    /// A snapshot.
    pub fn snapshot(&self) -> SessionSurface {
        SessionSurface {
            nodes: self.nodes.clone(),
            replace_generation: self.generation,
        }
    }
}

fn check_sources(seq: u64, src: &[u64]) -> Result<(), SessionError> {
    // Fast path (the loop always logs ascending chunk seqs): a strictly ascending list has no
    // duplicates, and all of it is earlier than `seq` iff its last element is. Anything else
    // takes the full check below, which reports the first offending element.
    if src.windows(2).all(|w| w[0] < w[1]) && src.last().is_none_or(|&last| last < seq) {
        return Ok(());
    }
    let mut seen = std::collections::HashSet::with_capacity(src.len());
    for &s in src {
        if s >= seq {
            return Err(SessionError::BadProvenance {
                message: format!("source seq {s} is not earlier than event seq {seq}"),
            });
        }
        if !seen.insert(s) {
            return Err(SessionError::BadProvenance {
                message: format!("duplicate source seq {s}"),
            });
        }
    }
    Ok(())
}

/// Replays the surface ops of `events` (a full log or a window starting anywhere; seqs are
/// taken from the events) and returns the current nodes plus every replacement.
///
/// # Errors
/// The first surface violation, as [`SurfaceManager::validate`].
pub fn fold_surface(events: &[Arc<SessionEvent>]) -> Result<SurfaceFold, SessionError> {
    let mut m = SurfaceManager::new();
    let mut replacements = Vec::new();
    for e in events {
        let shadowed = m.push_event(e)?;
        if let Some(SurfaceOp::Replace { start, end }) = e.surface_op {
            replacements.push(SurfaceReplacement {
                seq: e.seq,
                start,
                end,
                shadowed_seqs: shadowed,
            });
        }
    }
    Ok(SurfaceFold {
        nodes: m.nodes,
        replacements,
    })
}
