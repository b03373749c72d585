//! The incremental per-session measurement ([`TokenMeter`]).
//!
//! See docs/upstream/compaction.md (Token meter): the total is the heuristic estimate of the
//! next request (system prompt + tool schemas of the latest `request/header` + every current
//! surface node), or — when the latest successful model call logged its usage under the same
//! header and that usage is at least the heuristic figure at that point — the provider's figure
//! plus the signed heuristic change of the surface since then. Only provider-reported usage
//! anchors: a usage marked `estimated` (the adapter's own estimate when the provider sent none)
//! never does, and it clears an older anchor (the latest call then has no provider figure).

use std::collections::HashMap;
use std::sync::Arc;

use dsh_llm::{EpochHeader, StreamChunk, TokenUsage};
use dsh_session::{EventData, Session, SessionEvent, SurfaceOp, derive_event_message};
use serde::Serialize;

use crate::estimate::{estimate_header, estimate_message};

/// The price of one current surface node. JSON `{"seq","tokens"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NodeCost {
    /// The surface event's seq.
    pub seq: u64,
    /// Its heuristic tokens ([`estimate_message`] of the derived message; 0 when it derives
    /// nothing, e.g. an empty assistant message).
    pub tokens: u64,
}

/// Where a measurement's total comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Baseline {
    /// The provider's reported usage of the model call logged at `seq` (input + cache read +
    /// cache write + output tokens), `usage_tokens`; `estimate_tokens` is the heuristic total
    /// right after that call's `assistant/message`.
    #[serde(rename_all = "camelCase")]
    Usage {
        /// Seq of the `assistant/message` whose usage anchors the total.
        seq: u64,
        /// The provider's figure (tokens).
        usage_tokens: u64,
        /// The heuristic total at that point (tokens).
        estimate_tokens: u64,
    },
    /// No applicable usage: the total is the heuristic estimate alone.
    Estimated,
}

/// One measurement. JSON `{"logRevision","baseline","surfaceDeltaTokens","totalTokens",
/// "surfaceTokens","headerTokens"}` (tokens; `logRevision` = the session's next seq).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenMeasurement {
    /// The log length this measurement reflects.
    pub log_revision: u64,
    /// The anchor.
    pub baseline: Baseline,
    /// Signed heuristic change since the usage anchor (0 for [`Baseline::Estimated`]).
    pub surface_delta_tokens: i64,
    /// Estimated tokens of the next request built from this log.
    pub total_tokens: u64,
    /// Σ of the current surface nodes' tokens.
    pub surface_tokens: u64,
    /// System prompt + tool schemas of the latest `request/header`.
    pub header_tokens: u64,
}

#[derive(Debug, Clone)]
struct Anchor {
    seq: u64,
    usage_tokens: u64,
    estimate_tokens: u64,
    header: Option<Arc<SessionEvent>>,
}

/// The incremental meter of one session. Feed it the session with [`TokenMeter::measure`]
/// (reads only the events appended since the last call) or event by event with
/// [`TokenMeter::observe`]. Cost: O(new events) per call, plus O(surface nodes after the
/// replaced span) for each surface replace that changes the node count; a seq gap or an
/// inconsistent replace rebuilds from the whole log once.
#[derive(Debug, Default, Clone)]
pub struct TokenMeter {
    next_seq: u64,
    nodes: Vec<NodeCost>,
    index: HashMap<u64, usize>,
    surface_tokens: u64,
    header_tokens: u64,
    header: Option<Arc<SessionEvent>>,
    anchor: Option<Anchor>,
    pending_usage: Option<(u64, u64, TokenUsage)>,
    broken: bool,
}

fn usage_total(u: &TokenUsage) -> u64 {
    u.input_tokens
        + u.output_tokens
        + u.cache_read_tokens.unwrap_or(0)
        + u.cache_write_tokens.unwrap_or(0)
}

fn header_of(e: &Option<Arc<SessionEvent>>) -> Option<&EpochHeader> {
    e.as_ref().and_then(|e| match &e.data {
        EventData::RequestHeader(h) => Some(&h.header),
        _ => None,
    })
}

impl TokenMeter {
    /// An empty meter (nothing observed).
    pub fn new() -> Self {
        Self::default()
    }

    /// The next seq this meter expects (= the log length it has seen).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The priced current surface nodes, in model order.
    pub fn nodes(&self) -> &[NodeCost] {
        &self.nodes
    }

    /// Brings the meter up to date with `session` and measures it. Reads only
    /// `session.events_from(next_seq)`; rebuilds from the whole log when an earlier
    /// [`TokenMeter::observe`] saw a gap.
    pub fn measure(&mut self, session: &Session) -> TokenMeasurement {
        if self.broken || session.seq() < self.next_seq {
            *self = Self::default();
        }
        for e in session.events_from(self.next_seq) {
            self.observe(&e);
        }
        if self.broken {
            *self = Self::default();
            for e in session.events() {
                self.observe(&e);
            }
        }
        self.current()
    }

    /// Measures one log from scratch (a fresh meter over `events`).
    pub fn measure_events(events: &[Arc<SessionEvent>]) -> TokenMeasurement {
        let mut m = Self::default();
        for e in events {
            m.observe(e);
        }
        m.current()
    }

    /// The measurement of what has been observed so far (no session access).
    pub fn current(&self) -> TokenMeasurement {
        let estimate = self.header_tokens + self.surface_tokens;
        let anchor = self.anchor.as_ref().filter(|a| {
            a.usage_tokens >= a.estimate_tokens && header_of(&a.header) == header_of(&self.header)
        });
        let (baseline, delta, total) = match anchor {
            Some(a) => {
                let delta = estimate as i64 - a.estimate_tokens as i64;
                let total = (a.usage_tokens as i64 + delta).max(0) as u64;
                (
                    Baseline::Usage {
                        seq: a.seq,
                        usage_tokens: a.usage_tokens,
                        estimate_tokens: a.estimate_tokens,
                    },
                    delta,
                    total,
                )
            }
            None => (Baseline::Estimated, 0, estimate),
        };
        TokenMeasurement {
            log_revision: self.next_seq,
            baseline,
            surface_delta_tokens: delta,
            total_tokens: total,
            surface_tokens: self.surface_tokens,
            header_tokens: self.header_tokens,
        }
    }

    /// Observes one event. Events must come in seq order starting at [`TokenMeter::next_seq`];
    /// an out-of-order event marks the meter for a rebuild at the next
    /// [`TokenMeter::measure`] (and is otherwise ignored).
    pub fn observe(&mut self, e: &Arc<SessionEvent>) {
        if e.seq != self.next_seq {
            self.broken = true;
            return;
        }
        self.next_seq = e.seq + 1;
        match &e.data {
            EventData::RequestHeader(h) => {
                self.header_tokens = estimate_header(&h.header);
                self.header = Some(e.clone());
            }
            EventData::AssistantChunk(c) => {
                if let StreamChunk::Usage { usage } = &c.chunk {
                    self.pending_usage = Some((c.turn, c.step, *usage));
                }
            }
            _ => {}
        }
        if !e.kind.is_surface() {
            return;
        }
        let tokens = derive_event_message(e).map_or(0, |m| estimate_message(&m));
        let node = NodeCost { seq: e.seq, tokens };
        match e.surface_op {
            Some(SurfaceOp::Replace { start, end }) => self.replace(start, end, node),
            _ => {
                self.index.insert(e.seq, self.nodes.len());
                self.nodes.push(node);
                self.surface_tokens += tokens;
            }
        }
        if let EventData::AssistantMessage(d) = &e.data {
            let usage = d.usage.or_else(|| {
                self.pending_usage
                    .take()
                    .filter(|(t, s, _)| (*t, *s) == (d.turn, d.step))
                    .map(|(_, _, u)| u)
            });
            self.pending_usage = None;
            match usage.filter(|_| d.interrupted != Some(true)) {
                // Counts the adapter estimated (the provider reported none) are no anchor,
                // and the latest call then has no provider figure: drop the older anchor.
                Some(u) if u.estimated => self.anchor = None,
                Some(u) => {
                    self.anchor = Some(Anchor {
                        seq: e.seq,
                        usage_tokens: usage_total(&u),
                        estimate_tokens: self.header_tokens + self.surface_tokens,
                        header: self.header.clone(),
                    });
                }
                None => {}
            }
        }
    }

    fn replace(&mut self, start: u64, end: u64, node: NodeCost) {
        let (Some(&a), Some(&b)) = (self.index.get(&start), self.index.get(&end)) else {
            self.broken = true;
            return;
        };
        if a > b {
            self.broken = true;
            return;
        }
        let removed: u64 = self.nodes[a..=b].iter().map(|n| n.tokens).sum();
        self.surface_tokens = self.surface_tokens - removed + node.tokens;
        if a == b {
            self.index.remove(&self.nodes[a].seq);
            self.nodes[a] = node;
            self.index.insert(node.seq, a);
            return;
        }
        for n in &self.nodes[a..=b] {
            self.index.remove(&n.seq);
        }
        self.nodes.splice(a..=b, std::iter::once(node));
        for (i, n) in self.nodes.iter().enumerate().skip(a) {
            self.index.insert(n.seq, i);
        }
    }
}

#[cfg(test)]
mod tests;
