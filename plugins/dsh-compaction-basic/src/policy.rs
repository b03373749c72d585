//! The pressure policy as plain functions: thresholds from the context window, and the choice
//! of the compactable span.
//!
//! See docs/upstream/compaction.md (Basic engine policy; Range selection).

use dsh_compaction::SurfaceView;
use dsh_compaction::checkpoint::is_checkpoint;
use dsh_session::derive_event_message;

use crate::config::{CompactionConfig, ConfigError, Retain};

/// The token budgets of one context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// `floor(context_window × threshold_ratio)`: compact before a step whose request would
    /// be at least this big (tokens).
    pub threshold: u64,
    /// `floor(context_window × retain_ratio)` or `retain_tokens`: the recent tail kept verbatim
    /// (tokens).
    pub retain: u64,
}

impl Thresholds {
    /// The same budgets leaving room for a request output of `max_tokens` (the request's
    /// `max_tokens`, tokens): the threshold drops to `context_window − max_tokens` when that is
    /// lower and still above the retained tail (docs/upstream/compaction.md, "Output limits").
    pub fn reserving(self, context_window: u64, max_tokens: Option<u64>) -> Self {
        match max_tokens.map(|o| context_window.saturating_sub(o)) {
            Some(room) if room < self.threshold && room > self.retain => Self {
                threshold: room,
                ..self
            },
            _ => self,
        }
    }
}

/// The budgets for `context_window` tokens.
///
/// # Errors
/// [`ConfigError::Invalid`] when the retained tail is not smaller than the threshold (nothing
/// could ever be compacted).
pub fn thresholds(context_window: u64, cfg: &CompactionConfig) -> Result<Thresholds, ConfigError> {
    let threshold = (context_window as f64 * cfg.threshold_ratio).floor() as u64;
    let retain = match cfg.retain() {
        Retain::Ratio(r) => (context_window as f64 * r).floor() as u64,
        Retain::Tokens(t) => t,
    };
    if retain >= threshold {
        return Err(ConfigError::Invalid {
            key: match cfg.retain() {
                Retain::Ratio(_) => "retain_ratio",
                Retain::Tokens(_) => "retain_tokens",
            },
            message: format!(
                "the retained tail ({retain} tokens) must be smaller than the threshold \
                 ({threshold} tokens of a {context_window}-token window)"
            ),
        });
    }
    Ok(Thresholds { threshold, retain })
}

/// The span to compact, as node positions `(0, last)` of `view`, keeping at least `retain`
/// tokens of the newest nodes (`costs[i]` = tokens of node `i`):
/// walk from the newest node accumulating tokens until the sum reaches `retain` — that node is
/// the first kept one — then move the cut toward the head until it is balanced
/// ([`SurfaceView::balanced_boundaries`]). `None` when nothing is left to compact, or when the
/// span would be just an earlier checkpoint (never compact the same region twice in a row).
/// `retain = 0` keeps only the newest node's balanced unit (manual compaction, overflow).
pub fn select_range(view: &SurfaceView, costs: &[u64], retain: u64) -> Option<(usize, usize)> {
    let n = view.nodes.len().min(costs.len());
    if n == 0 {
        return None;
    }
    let mut keep = 0;
    let mut acc = 0u64;
    for i in (0..n).rev() {
        acc += costs[i];
        if acc >= retain {
            keep = i;
            break;
        }
    }
    let balanced = view.balanced_boundaries();
    while keep > 0 && !balanced[keep] {
        keep -= 1;
    }
    if keep == 0 {
        return None;
    }
    let only_checkpoint =
        keep == 1 && derive_event_message(&view.nodes[0]).is_some_and(|m| is_checkpoint(&m));
    (!only_checkpoint).then_some((0, keep - 1))
}
