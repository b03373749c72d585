//! [`BasicCompaction`]: the compaction service built from the policy functions.
//!
//! See docs/upstream/compaction.md (Basic engine policy; Service API). The target route is the
//! provider/model of the latest logged `request/header` (no header ⇒ no automatic
//! compaction); its context window comes from the model catalog (user override, adapter
//! report, built-in), else the latest `request/context` of the same route.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use dsh_compaction::checkpoint::{Bracket, Region, SummaryInput, is_checkpoint};
use dsh_compaction::{
    CompactionCause, CompactionCompleted, CompactionCompletedPayload, CompactionError,
    CompactionFuture, CompactionNotice, CompactionNoticePayload, CompactionResult,
    CompactionService, CompactionTarget, NoticeLevel, SurfaceView, Trigger, active_lock_of,
};
use dsh_kernel::{Context, ErrorCode as _};
use dsh_llm::models::ModelCatalog;
use dsh_llm::{Message, ModelInfo};
use dsh_session::{Session, derive_event_message};
use dsh_token_meter::{TokenMeasurement, TokenMeter, estimate_header, estimate_message};
use tokio_util::sync::CancellationToken;

use crate::config::CompactionConfig;
use crate::policy::{select_range, thresholds};
use crate::pruner::{self, PrunerConfig};
use crate::summarizer::{
    Summarizer, build_request, dropped_marker, fit_to_window, instruction_message, summary_blocks,
};

/// Looks up what the adapter serving a route knows about a model (the LLM service's
/// `resolve_model`, or a test double).
pub type ModelLookup = Arc<dyn Fn(&str, &str) -> Option<ModelInfo> + Send + Sync>;

/// The basic engine. Holds one token meter per session id (incremental measurement) and, per
/// session, the last automatically selected region whose summary was refused (so the next
/// automatic attempt does not retry that same region at once).
pub struct BasicCompaction {
    cfg: CompactionConfig,
    pruner: Option<PrunerConfig>,
    catalog: ModelCatalog,
    lookup: ModelLookup,
    summarizer: Arc<dyn Summarizer>,
    meters: Mutex<HashMap<String, TokenMeter>>,
    warned: Mutex<HashSet<(String, String)>>,
    rejected: Mutex<HashMap<String, Vec<u64>>>,
    learned: Mutex<HashMap<(String, String), u64>>,
    events: Option<Context>,
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
    /// the adapter's model facts. The tool-result pruner is on with upstream's budgets
    /// ([`PrunerConfig::default`]: 8192 / 4096 / 1024 code points); no live events are emitted
    /// until [`BasicCompaction::with_events`].
    pub fn new(
        cfg: CompactionConfig,
        catalog: ModelCatalog,
        lookup: ModelLookup,
        summarizer: Arc<dyn Summarizer>,
    ) -> Self {
        Self {
            cfg,
            pruner: Some(PrunerConfig::default()),
            catalog,
            lookup,
            summarizer,
            meters: Mutex::new(HashMap::new()),
            warned: Mutex::new(HashSet::new()),
            rejected: Mutex::new(HashMap::new()),
            learned: Mutex::new(HashMap::new()),
            events: None,
        }
    }

    /// The same engine emitting the live events through `ctx` (dispatched to the target's
    /// scope key): [`CompactionCompleted`] after every successful compaction (automatic,
    /// manual or region) and after a pruning pass that alone brought the request under the
    /// threshold, and [`CompactionNotice`] when an automatic compaction fails (the turn goes
    /// on uncompacted) or automatic compaction is off for want of a context window (once per
    /// route).
    pub fn with_events(mut self, ctx: Context) -> Self {
        self.events = Some(ctx);
        self
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

    /// Drops the per-session state (meter, refused region) of a session that went away.
    pub fn forget(&self, session_id: &str) {
        self.meters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session_id);
        self.rejected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session_id);
    }

    fn total(&self, session: &Session) -> u64 {
        self.measure(session).0.total_tokens
    }

    fn emit_completed(
        &self,
        target: &CompactionTarget,
        trigger: CompactionCause,
        result: Option<&CompactionResult>,
        pruned: usize,
        tokens_before: u64,
    ) {
        let Some(ctx) = &self.events else {
            return;
        };
        let payload = CompactionCompletedPayload {
            session_id: target.session.id().to_owned(),
            scope: target.key.clone(),
            // Manual compaction runs between turns (its bracket has `turn: null`).
            turn: target.turn.filter(|_| trigger != CompactionCause::Manual),
            trigger,
            compaction_id: result.map(|r| r.compaction_id.clone()),
            tokens_before,
            tokens_after: self.total(&target.session),
            shadowed_count: result.map_or(0, |r| r.shadowed_seqs.len() as u64),
            pruned_count: pruned as u64,
        };
        ctx.dispatch_to(target.key.as_ref())
            .emit::<CompactionCompleted>(&payload);
    }

    fn emit_notice(
        &self,
        target: &CompactionTarget,
        trigger: CompactionCause,
        level: NoticeLevel,
        code: String,
        message: String,
    ) {
        let Some(ctx) = &self.events else {
            return;
        };
        let payload = CompactionNoticePayload {
            session_id: target.session.id().to_owned(),
            scope: target.key.clone(),
            turn: target.turn,
            trigger,
            level,
            code,
            message,
        };
        ctx.dispatch_to(target.key.as_ref())
            .emit::<CompactionNotice>(&payload);
    }

    /// Whether `range` of `view` is the region whose summary was last refused for `session`.
    fn was_refused(&self, session: &Session, view: &SurfaceView, (a, b): (usize, usize)) -> bool {
        let refused = self.rejected.lock().unwrap_or_else(|p| p.into_inner());
        refused.get(session.id()).is_some_and(|seqs| {
            seqs.len() == b + 1 - a
                && view.nodes[a..=b]
                    .iter()
                    .map(|e| e.seq)
                    .eq(seqs.iter().copied())
        })
    }

    /// Remembers (on a refused summary) or forgets (on success) the automatic region.
    fn note_outcome(
        &self,
        session: &Session,
        view: &SurfaceView,
        (a, b): (usize, usize),
        outcome: &Result<CompactionResult, CompactionError>,
    ) {
        let mut refused = self.rejected.lock().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Ok(_) => {
                refused.remove(session.id());
            }
            Err(CompactionError::Summary { .. }) => {
                refused.insert(
                    session.id().to_owned(),
                    view.nodes[a..=b].iter().map(|e| e.seq).collect(),
                );
            }
            Err(_) => {}
        }
    }

    /// One automatic region compaction, unless the same region's summary was refused last
    /// time (`Ok(None)`: nothing is written).
    async fn auto_region(
        &self,
        target: &CompactionTarget,
        view: &SurfaceView,
        range: (usize, usize),
        signal: CancellationToken,
    ) -> Result<Option<CompactionResult>, CompactionError> {
        if self.was_refused(&target.session, view, range) {
            return Ok(None);
        }
        let out = self
            .run_region(target, view, range, Owner::Auto, signal)
            .await;
        self.note_outcome(&target.session, view, range, &out);
        out.map(Some)
    }

    /// [`Self::if_needed`] plus the live events.
    async fn automatic(
        &self,
        target: &CompactionTarget,
        trigger: Trigger,
        signal: CancellationToken,
    ) -> Result<Option<CompactionResult>, CompactionError> {
        let before = self.total(&target.session);
        let cause = CompactionCause::from(trigger);
        match self.if_needed(target, trigger, signal).await {
            Ok((result, pruned)) => {
                if result.is_some() || pruned > 0 {
                    self.emit_completed(target, cause, result.as_ref(), pruned, before);
                }
                Ok(result)
            }
            Err(err) => {
                let code = match &err {
                    CompactionError::Summary { code, .. } => code.clone(),
                    e => e.code().to_owned(),
                };
                let message = match trigger {
                    Trigger::Pressure => {
                        format!("automatic compaction failed; the turn goes on uncompacted: {err}")
                    }
                    Trigger::ContextOverflow => {
                        format!("compaction after a context-window error failed: {err}")
                    }
                };
                self.emit_notice(target, cause, NoticeLevel::Warning, code, message);
                Err(err)
            }
        }
    }

    /// The context window of the route in force for `session`, if known: the catalog's, else
    /// the latest `request/context` of the same route, else the limit a context-window error
    /// of that route stated ([`Self::learn_window`]).
    pub fn context_window(&self, session: &Session) -> Option<u64> {
        let header = session.request_header()?;
        let (p, m) = (&header.config.provider, &header.config.model);
        let info = (self.lookup)(p, m);
        self.catalog
            .context_window(m, info.as_ref())
            .or_else(|| {
                session
                    .request_context()
                    .filter(|c| &c.provider == p && &c.model == m)
                    .and_then(|c| c.context_window)
            })
            .or_else(|| self.learned_window(p, m))
    }

    /// Remembers `window` (tokens), the limit a context-window error of route `(provider,
    /// model)` stated, for a model whose window the catalog does not know; it then sizes the
    /// summarisation request and the pressure threshold of that route (this process only).
    pub fn learn_window(&self, (provider, model): (&str, &str), window: u64) {
        self.learned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((provider.to_owned(), model.to_owned()), window);
    }

    fn learned_window(&self, p: &str, m: &str) -> Option<u64> {
        self.learned
            .lock()
            .unwrap_or_else(|x| x.into_inner())
            .get(&(p.to_owned(), m.to_owned()))
            .copied()
    }

    /// The context window of the summarising route `(provider, model)`: the session's own
    /// window when it is the session's route, else the catalog's.
    fn route_window(&self, session: &Session, (p, m): (&str, &str)) -> Option<u64> {
        let same = session
            .request_header()
            .is_some_and(|h| h.config.provider == p && h.config.model == m);
        if same {
            self.context_window(session)
        } else {
            self.catalog
                .context_window(m, (self.lookup)(p, m).as_ref())
                .or_else(|| self.learned_window(p, m))
        }
    }

    fn warn_once(
        &self,
        target: &CompactionTarget,
        (provider, model): (&str, &str),
        (level, code): (NoticeLevel, &str),
        why: &str,
    ) {
        let mut w = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if w.insert((provider.to_owned(), model.to_owned())) {
            drop(w);
            tracing::warn!(target: "dsh_compaction_basic", provider, model, "{why}");
            self.emit_notice(
                target,
                CompactionCause::Pressure,
                level,
                code.to_owned(),
                format!("{why} ({provider}/{model})"),
            );
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
        let items: Vec<_> = view.nodes[first..=last]
            .iter()
            .map(|e| derive_event_message(e))
            .collect();
        let costs: Vec<u64> = items
            .iter()
            .map(|m| m.as_deref().map_or(0, estimate_message))
            .collect();
        let balanced = view.balanced_boundaries();
        let balanced = balanced.get(first..=last).unwrap_or_default();
        // An earlier checkpoint heading the span is never dropped: it is the most compact
        // account of everything before it.
        let pinned = usize::from(
            items
                .first()
                .and_then(Option::as_deref)
                .is_some_and(is_checkpoint),
        );
        let fixed = estimate_header(&header)
            + estimate_message(&instruction_message())
            + estimate_message(&dropped_marker(items.len()))
            + costs[..pinned].iter().sum::<u64>();
        let window = self.route_window(session, (&route.0, &route.1));
        let (keep, max_tokens) = fit_to_window(
            window,
            fixed,
            &costs[pinned..],
            balanced.get(pinned..).unwrap_or_default(),
            self.cfg.max_tokens,
        );
        let mut items = items.into_iter();
        let mut shadowed: Vec<Arc<Message>> = items.by_ref().take(pinned).flatten().collect();
        if keep > 0 {
            tracing::warn!(target: "dsh_compaction_basic", dropped = keep,
                "the oldest history items do not fit the summarising model's window: dropped");
            shadowed.push(Arc::new(dropped_marker(keep)));
        }
        shadowed.extend(items.skip(keep).flatten());
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
            max_tokens,
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
            max_tokens: Some(max_tokens),
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

    /// Automatic compaction: the committed result (if any) and how many tool results the
    /// pruner shortened.
    async fn if_needed(
        &self,
        target: &CompactionTarget,
        trigger: Trigger,
        signal: CancellationToken,
    ) -> Result<(Option<CompactionResult>, usize), CompactionError> {
        if !self.cfg.auto {
            return Ok((None, 0));
        }
        let session = &target.session;
        let Some(header) = session.request_header() else {
            return Ok((None, 0));
        };
        let (p, m) = (header.config.provider.clone(), header.config.model.clone());
        if trigger == Trigger::ContextOverflow {
            Self::check_lock(session)?;
            let pruned = self.prune(session)?;
            let view = SurfaceView::of(session);
            let (_, costs) = self.measure(session);
            let result = match select_range(&view, &costs, 0) {
                Some(range) => self.auto_region(target, &view, range, signal).await?,
                None => None,
            };
            return Ok((result, pruned));
        }
        let Some(window) = self.context_window(session) else {
            self.warn_once(
                target,
                (&p, &m),
                (NoticeLevel::Info, "NO_CONTEXT_WINDOW"),
                "automatic compaction is off for this model: its context window is unknown \
                 (set [models.\"<model>\"] context_window)",
            );
            return Ok((None, 0));
        };
        let t = match thresholds(window, &self.cfg) {
            Ok(t) => t.reserving(window, header.config.max_tokens),
            Err(e) => {
                self.warn_once(
                    target,
                    (&p, &m),
                    (NoticeLevel::Warning, "CONFIG"),
                    &e.to_string(),
                );
                return Ok((None, 0));
            }
        };
        if self.total(session) < t.threshold {
            return Ok((None, 0));
        }
        // The lock scan reads the log back to the latest end-seed: only when compaction is
        // needed, so a step below the threshold costs O(new events), not O(log).
        Self::check_lock(session)?;
        let pruned = self.prune(session)?;
        if pruned > 0 && self.total(session) < t.threshold {
            return Ok((None, pruned));
        }
        let mut last = None;
        for _ in 0..=self.cfg.compaction_retries {
            let view = SurfaceView::of(session);
            let (_, costs) = self.measure(session);
            let Some(range) = select_range(&view, &costs, t.retain) else {
                break;
            };
            let Some(r) = self
                .auto_region(target, &view, range, signal.clone())
                .await?
            else {
                break;
            };
            last = Some(r);
            if self.total(session) < t.threshold {
                return Ok((last, pruned));
            }
        }
        if last.is_some() {
            tracing::warn!(target: "dsh_compaction_basic", provider = %p, model = %m,
                "the request is still over the compaction threshold after compacting");
        }
        Ok((last, pruned))
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
        let (before, costs) = self.measure(session);
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
        self.emit_completed(
            target,
            CompactionCause::Manual,
            Some(&r),
            0,
            before.total_tokens,
        );
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
        let before = self.total(session);
        let r = self
            .run_region(target, &view, range, Owner::Auto, signal)
            .await?;
        self.emit_completed(target, CompactionCause::Region, Some(&r), 0, before);
        Ok(r)
    }
}

impl CompactionService for BasicCompaction {
    fn compact_if_needed<'a>(
        &'a self,
        target: &'a CompactionTarget,
        trigger: Trigger,
        signal: CancellationToken,
    ) -> CompactionFuture<'a, Option<CompactionResult>> {
        Box::pin(self.automatic(target, trigger, signal))
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
