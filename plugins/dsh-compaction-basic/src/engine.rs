//! [`BasicCompaction`]: the compaction service built from the policy functions.
//!
//! See docs/upstream/compaction.md (Basic engine policy; Service API). The target route is the
//! provider/model of the latest logged `request/header` (no header ⇒ no automatic
//! compaction); its context window comes from the model catalog (user override, adapter
//! report, built-in), else the latest `request/context` of the same route.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use dsh_compaction::checkpoint::{Bracket, Region, SummaryInput};
use dsh_compaction::{
    CompactionError, CompactionFuture, CompactionResult, CompactionService, CompactionTarget,
    SurfaceView, Trigger, active_lock_of,
};
use dsh_llm::ModelInfo;
use dsh_llm::models::ModelCatalog;
use dsh_session::{Session, derive_event_message};
use dsh_token_meter::{TokenMeasurement, TokenMeter};
use tokio_util::sync::CancellationToken;

use crate::config::CompactionConfig;
use crate::policy::{select_range, thresholds};
use crate::pruner::{self, PrunerConfig};
use crate::summarizer::{Summarizer, build_request, summary_blocks};

/// Looks up what the adapter serving a route knows about a model (the LLM service's
/// `resolve_model`, or a test double).
pub type ModelLookup = Arc<dyn Fn(&str, &str) -> Option<ModelInfo> + Send + Sync>;

/// The basic engine. Holds one token meter per session id (incremental measurement).
pub struct BasicCompaction {
    cfg: CompactionConfig,
    pruner: Option<PrunerConfig>,
    catalog: ModelCatalog,
    lookup: ModelLookup,
    summarizer: Arc<dyn Summarizer>,
    meters: Mutex<HashMap<String, TokenMeter>>,
    warned: Mutex<HashSet<(String, String)>>,
}

impl std::fmt::Debug for BasicCompaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicCompaction")
            .field("cfg", &self.cfg)
            .finish()
    }
}

enum Owner {
    Auto,
    Manual(Option<String>),
}

impl BasicCompaction {
    /// An engine with validated settings `cfg`, `catalog` and `summarizer`; `lookup` answers
    /// the adapter's model facts. The tool-result pruner is off: dsh-session's enclosure
    /// invariant (checked on append in debug builds) still refuses a `tool/result` replacement
    /// outside its step, so pruning would behave differently in debug and release builds;
    /// turn it on with [`BasicCompaction::with_pruner`] once the session accepts it.
    pub fn new(
        cfg: CompactionConfig,
        catalog: ModelCatalog,
        lookup: ModelLookup,
        summarizer: Arc<dyn Summarizer>,
    ) -> Self {
        Self {
            cfg,
            pruner: None,
            catalog,
            lookup,
            summarizer,
            meters: Mutex::new(HashMap::new()),
            warned: Mutex::new(HashSet::new()),
        }
    }

    /// The same engine with the tool-result pruner on (`Some(budgets)`, e.g.
    /// `PrunerConfig::default()`) or off (`None`).
    pub fn with_pruner(mut self, pruner: Option<PrunerConfig>) -> Self {
        self.pruner = pruner;
        self
    }

    /// Measures `session` with its incremental meter; returns the measurement and the node
    /// costs (surface order).
    pub fn measure(&self, session: &Session) -> (TokenMeasurement, Vec<u64>) {
        let mut meters = self.meters.lock().unwrap_or_else(|p| p.into_inner());
        let m = meters.entry(session.id().to_owned()).or_default();
        let got = m.measure(session);
        (got, m.nodes().iter().map(|n| n.tokens).collect())
    }

    /// Drops the per-session state (meter) of a session that went away.
    pub fn forget(&self, session_id: &str) {
        self.meters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session_id);
    }

    /// The context window of the route in force for `session`, if known.
    pub fn context_window(&self, session: &Session) -> Option<u64> {
        let header = session.request_header()?;
        let (p, m) = (&header.config.provider, &header.config.model);
        let info = (self.lookup)(p, m);
        self.catalog.context_window(m, info.as_ref()).or_else(|| {
            session
                .request_context()
                .filter(|c| &c.provider == p && &c.model == m)
                .and_then(|c| c.context_window)
        })
    }

    fn warn_once(&self, provider: &str, model: &str, why: &str) {
        let mut w = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if w.insert((provider.to_owned(), model.to_owned())) {
            tracing::warn!(target: "dsh_compaction_basic", provider, model, "{why}");
        }
    }

    fn prune(&self, session: &Session) -> Result<usize, CompactionError> {
        match &self.pruner {
            Some(cfg) => pruner::apply(session, pruner::plan(&SurfaceView::of(session), cfg)),
            None => Ok(0),
        }
    }

    /// One region compaction of positions `first..=last` of `view`.
    async fn run_region(
        &self,
        target: &CompactionTarget,
        view: &SurfaceView,
        (first, last): (usize, usize),
        owner: Owner,
        signal: CancellationToken,
    ) -> Result<CompactionResult, CompactionError> {
        let session = &target.session;
        let header = session
            .request_header()
            .ok_or_else(|| CompactionError::Config {
                message: "no request header is logged yet (no route to summarise with)".into(),
            })?;
        let route = match self.cfg.summarization_route() {
            Some((p, m)) => (p.to_owned(), m.to_owned()),
            None => (header.config.provider.clone(), header.config.model.clone()),
        };
        let region = Region::from_view(view, first, last);
        let shadowed = view.nodes[first..=last]
            .iter()
            .filter_map(|e| derive_event_message(e))
            .collect();
        let (turn, source) = match owner {
            Owner::Auto => (target.turn, None),
            Owner::Manual(src) => (None, src),
        };
        let bracket = Bracket::begin(session, turn, source)?;
        let fail = |e: CompactionError| {
            if let Err(close) = bracket.close_failed(session, &e) {
                tracing::warn!(target: "dsh_compaction_basic", error = %close, "closing a failed compaction bracket failed");
            }
            e
        };
        let opts = match build_request(
            &header,
            shadowed,
            (&route.0, &route.1),
            self.cfg.max_tokens,
            Some(session.id().to_owned()),
            signal.child_token(),
        ) {
            Ok(o) => o,
            Err(e) => return Err(fail(e)),
        };
        let before = (view.seqs(), view.generation);
        let out = tokio::select! {
            out = self.summarizer.summarize(opts, target.key.clone()) => out,
            () = signal.cancelled() => return Err(fail(CompactionError::Cancelled)),
        };
        if signal.is_cancelled() {
            return Err(fail(CompactionError::Cancelled));
        }
        let summary = match summary_blocks(&out) {
            Ok(s) => s,
            Err(e) => return Err(fail(e)),
        };
        if turn.is_some() {
            // Automatic compaction needs the whole surface unchanged; manual compaction only
            // the selected span, which the commit checks.
            let now = SurfaceView::of(session);
            if (now.seqs(), now.generation) != before {
                return Err(fail(CompactionError::Changed {
                    reason: "the surface changed during the summarisation call".into(),
                }));
            }
        }
        let input = SummaryInput {
            summary,
            provider: route.0,
            model: route.1,
            max_tokens: Some(self.cfg.max_tokens),
            usage: out.usage,
            raw_output: Some(out.blocks),
        };
        bracket.commit(session, &region, input).map_err(fail)
    }

    async fn flush(&self, target: &CompactionTarget) -> Result<(), CompactionError> {
        if let Some(store) = &target.store {
            store
                .flush(&target.session)
                .await
                .map_err(|e| CompactionError::Persistence {
                    message: e.to_string(),
                })?;
        }
        Ok(())
    }

    fn check_lock(session: &Session) -> Result<(), CompactionError> {
        match active_lock_of(session) {
            Some(l) => Err(CompactionError::Busy {
                reason: format!(
                    "compaction {} (seq {}) has not ended",
                    l.compaction_id, l.seq
                ),
            }),
            None => Ok(()),
        }
    }

    async fn if_needed(
        &self,
        target: &CompactionTarget,
        trigger: Trigger,
        signal: CancellationToken,
    ) -> Result<Option<CompactionResult>, CompactionError> {
        if !self.cfg.auto {
            return Ok(None);
        }
        let session = &target.session;
        Self::check_lock(session)?;
        let Some(header) = session.request_header() else {
            return Ok(None);
        };
        let (p, m) = (header.config.provider.clone(), header.config.model.clone());
        if trigger == Trigger::ContextOverflow {
            self.prune(session)?;
            let view = SurfaceView::of(session);
            let (_, costs) = self.measure(session);
            return match select_range(&view, &costs, 0) {
                Some(range) => self
                    .run_region(target, &view, range, Owner::Auto, signal)
                    .await
                    .map(Some),
                None => Ok(None),
            };
        }
        let Some(window) = self.context_window(session) else {
            self.warn_once(
                &p,
                &m,
                "automatic compaction is off for this model: its context window is unknown \
                 (set [models.\"<model>\"] context_window)",
            );
            return Ok(None);
        };
        let t = match thresholds(window, &self.cfg) {
            Ok(t) => t,
            Err(e) => {
                self.warn_once(&p, &m, &e.to_string());
                return Ok(None);
            }
        };
        if self.measure(session).0.total_tokens < t.threshold {
            return Ok(None);
        }
        if self.prune(session)? > 0 && self.measure(session).0.total_tokens < t.threshold {
            return Ok(None);
        }
        let mut last = None;
        for _ in 0..=self.cfg.compaction_retries {
            let view = SurfaceView::of(session);
            let (_, costs) = self.measure(session);
            let Some(range) = select_range(&view, &costs, t.retain) else {
                break;
            };
            let r = self
                .run_region(target, &view, range, Owner::Auto, signal.clone())
                .await?;
            last = Some(r);
            if self.measure(session).0.total_tokens < t.threshold {
                return Ok(last);
            }
        }
        if last.is_some() {
            tracing::warn!(target: "dsh_compaction_basic", provider = %p, model = %m,
                "the request is still over the compaction threshold after compacting");
        }
        Ok(last)
    }

    async fn now(
        &self,
        target: &CompactionTarget,
        signal: CancellationToken,
        source_command_id: Option<String>,
    ) -> Result<Option<CompactionResult>, CompactionError> {
        let session = &target.session;
        Self::check_lock(session)?;
        if session.open_turn().is_some() {
            return Err(CompactionError::Busy {
                reason: "a turn is running".into(),
            });
        }
        let view = SurfaceView::of(session);
        let (_, costs) = self.measure(session);
        let Some(range) = select_range(&view, &costs, 0) else {
            return Ok(None);
        };
        let r = self
            .run_region(
                target,
                &view,
                range,
                Owner::Manual(source_command_id),
                signal,
            )
            .await?;
        self.flush(target).await?;
        Ok(Some(r))
    }

    async fn region(
        &self,
        target: &CompactionTarget,
        start: u64,
        end: u64,
        signal: CancellationToken,
    ) -> Result<CompactionResult, CompactionError> {
        let session = &target.session;
        if target.turn.is_none() || session.open_turn().map(|(t, _)| t) != target.turn {
            return Err(CompactionError::region(
                "an explicit region needs the open turn as its owner",
            ));
        }
        Self::check_lock(session)?;
        let view = SurfaceView::of(session);
        let range = view.check_region(start, end)?;
        self.run_region(target, &view, range, Owner::Auto, signal)
            .await
    }
}

impl CompactionService for BasicCompaction {
    fn compact_if_needed<'a>(
        &'a self,
        target: &'a CompactionTarget,
        trigger: Trigger,
        signal: CancellationToken,
    ) -> CompactionFuture<'a, Option<CompactionResult>> {
        Box::pin(self.if_needed(target, trigger, signal))
    }

    fn compact_now<'a>(
        &'a self,
        target: &'a CompactionTarget,
        signal: CancellationToken,
        source_command_id: Option<String>,
    ) -> CompactionFuture<'a, Option<CompactionResult>> {
        Box::pin(self.now(target, signal, source_command_id))
    }

    fn compact_region<'a>(
        &'a self,
        target: &'a CompactionTarget,
        start: u64,
        end: u64,
        signal: CancellationToken,
    ) -> CompactionFuture<'a, CompactionResult> {
        Box::pin(self.region(target, start, end, signal))
    }
}
