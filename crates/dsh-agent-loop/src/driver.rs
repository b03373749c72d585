//! The turn and step algorithms.
//!
//! See `docs/upstream/agent-loop.md` ("Turn algorithm", "Step algorithm", "Observable order")
//! and `docs/tools.md` ("Loop-side scheduling"). Every input of a request is
//! read from the session log (`derive_messages`, the logged header); every fact the loop learns
//! is appended to it before it is acted on.

use std::sync::{Arc, Mutex};

use dsh_agent::lifecycle::{InboxClaimed, InboxNotice};
use dsh_agent::{
    Agent, AgentErrorEvent, AgentErrorPayload, AgentPreStep, AgentRequest, AgentRequestError,
    AgentTurnStopping, PreStepCtx, PreStepDecision, RequestCtx, RequestErrorCtx, RetryDecision,
    TurnStoppingCtx, with_initiator,
};
use dsh_kernel::{CancellationToken, Context};
use dsh_llm::{
    BlockAssembler, FinishReason, GenerateOptions, LlmCallConfig, LlmFailure, LlmService, Message,
    StreamChunk, ToolSchema, codes,
};
use dsh_session::{
    AssistantChunkData, AssistantMessageData, EventData, RequestContext, RequestHeaderData,
    RequestHeaderReason, Session, SessionError, StepData, SurfaceIntent, TurnEndData,
    TurnEndReason, TurnStartData,
};
use dsh_tools::ToolRegistry;
use dsh_tools::scheduler::{SchedulerConfig, SessionHooks, ToolCallRequest, run_tool_calls};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tracing::Instrument as _;

use crate::LoopConfig;
use crate::error::LoopError;
use crate::prompt::{PromptParts, RenderCache, RetainedSnapshot, snapshot_for};

/// Why a turn stopped early.
enum TurnFail {
    Aborted,
    /// A provider failure, or a loop failure already turned into one
    /// ([`LoopError::to_failure`]): the turn ends with `error {failure}`.
    Error(LlmFailure),
}

impl From<LoopError> for TurnFail {
    fn from(e: LoopError) -> Self {
        TurnFail::Error(e.to_failure())
    }
}

impl From<SessionError> for TurnFail {
    fn from(e: SessionError) -> Self {
        LoopError::SessionAppend(e).into()
    }
}

/// How a step ended.
enum StepEnd {
    /// Tool results were committed; run another step.
    Continue,
    /// The turn may stop with this reason.
    End(TurnEndReason),
}

#[derive(Default)]
struct RunnerState {
    /// A request was already made by this loop instance (header reason `change` from now on).
    requested: bool,
    /// The runtime-context snapshot still on the surface (`None` = not yet read from the log).
    retained: Option<RetainedSnapshot>,
    /// The session's replace generation when `retained` was read (a later replace may have
    /// shadowed it).
    retained_generation: u64,
    /// The last turn number (scanned from the log once, then tracked).
    last_turn: Option<u64>,
    /// The seq of the last `request/header` this loop instance logged and the tool schemas its
    /// `tools` were serialized from.
    logged_tools: Option<(u64, Vec<ToolSchema>)>,
}

/// The per-agent turn runner (one per agent: it holds the loop instance's request memory).
#[derive(Clone)]
pub struct Runner(Arc<RunnerInner>);

struct RunnerInner {
    ctx: Context,
    config: LoopConfig,
    state: Mutex<RunnerState>,
    /// The last rendered system prompt, shared by every runner of one agent loop (a hit only
    /// needs equal inputs, whichever agent rendered them).
    render_cache: Arc<Mutex<Option<RenderCache>>>,
}

impl Runner {
    pub(crate) fn new(
        ctx: Context,
        config: LoopConfig,
        render_cache: Arc<Mutex<Option<RenderCache>>>,
    ) -> Self {
        Self(Arc::new(RunnerInner {
            ctx,
            config,
            state: Mutex::new(RunnerState::default()),
            render_cache,
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, RunnerState> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl dsh_agent::TurnRunner for Runner {
    fn run_turn(&self, agent: Agent, signal: CancellationToken) -> BoxFuture<'static, ()> {
        let runner = self.clone();
        Box::pin(with_initiator(agent.clone(), async move {
            runner.turn(agent, signal).await;
        }))
    }
}

fn aborted_reason(agent: &Agent) -> TurnEndReason {
    let cause = agent
        .cancel_cause()
        .unwrap_or(dsh_agent::AgentCancelCause::Disposed);
    TurnEndReason::Aborted {
        reason: serde_json::to_value(cause).ok(),
    }
}

/// The header carried by a `request/header` event.
fn logged_header(event: Option<&dsh_session::SessionEvent>) -> Option<&dsh_llm::EpochHeader> {
    match &event?.data {
        EventData::RequestHeader(h) => Some(&h.header),
        _ => None,
    }
}

/// The number of the last turn in the log (0 when none).
fn last_turn(session: &Session) -> u64 {
    session
        .events()
        .iter()
        .rev()
        .find_map(|e| match &e.data {
            EventData::TurnStart(d) => Some(d.turn),
            EventData::TurnEnd(d) => Some(d.turn),
            _ => None,
        })
        .unwrap_or(0)
}

/// Whether a live chunk becomes a durable `assistant/chunk` event (`asm` = the step attempt's
/// assembler before `chunk` is fed to it).
///
/// Left out of the log, while the assembler still gets them (docs/formats.md, "Copies of the
/// content"):
/// - a `block-end` whose block is exactly what the logged deltas of its index already assemble
///   to ([`BlockAssembler::open_block_is`]): it repeats the whole block, and an assembler over
///   the logged chunks without it gives the same blocks; its index is remembered in
///   `closed_unlogged`;
/// - a delta for such an index: the assembler ignores deltas of a closed block, so logging it
///   would let a reader of the chunks (without the `block-end`) assemble a different block.
///
/// Every other chunk is logged, a `block-end` that differs from its deltas (or closes a block
/// no delta opened) included. Upstream logs every chunk; this is a dsh difference of the writer
/// only (docs/upstream/session.md, "Redundant block-end chunks").
fn durable_chunk(
    asm: &BlockAssembler,
    closed_unlogged: &mut Vec<u32>,
    chunk: &StreamChunk,
) -> bool {
    match chunk {
        StreamChunk::BlockEnd { index, block } if asm.open_block_is(*index, block) => {
            closed_unlogged.push(*index);
            false
        }
        StreamChunk::TextDelta { index, .. }
        | StreamChunk::ReasoningDelta { index, .. }
        | StreamChunk::ToolCallDelta { index, .. } => !closed_unlogged.contains(index),
        _ => true,
    }
}
impl Runner {
    async fn turn(&self, agent: Agent, signal: CancellationToken) {
        let session = agent.session().clone();
        let turn = {
            let mut st = self.state();
            let t = st.last_turn.unwrap_or_else(|| last_turn(&session)) + 1;
            st.last_turn = Some(t);
            t
        };
        if let Err(e) = session.append(
            "turn/start",
            EventData::TurnStart(TurnStartData {
                turn,
                trigger: None,
            }),
            None,
        ) {
            tracing::error!(agent = %agent.id(), error = %e, "could not open a turn");
            return;
        }
        // `DSH_LOG=debug` follows one turn: its steps, requests and tool calls run in spans
        // below this one.
        let span = tracing::debug_span!("turn", session = %session.id(), turn);
        tracing::debug!(parent: &span, "turn started");
        // A panicking plugin (a waterfall listener, a tool body outside the pipeline's own
        // containment) ends the turn with an error; it never takes the driver down.
        let outcome = match std::panic::AssertUnwindSafe(self.turn_body(&agent, turn, &signal))
            .catch_unwind()
            .instrument(span.clone())
            .await
        {
            Ok(outcome) => outcome,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".to_owned());
                if let Some((t, Some(step))) = session.open_turn()
                    && t == turn
                {
                    let _ = session.append(
                        "step/end",
                        EventData::StepEnd(StepData { turn, step }),
                        None,
                    );
                }
                Err(LoopError::PluginPanicked(message).into())
            }
        };
        let reason = match outcome {
            Ok(reason) => reason,
            Err(TurnFail::Aborted) => aborted_reason(&agent),
            Err(TurnFail::Error(_)) if signal.is_cancelled() => aborted_reason(&agent),
            Err(TurnFail::Error(failure)) => {
                let step = session.open_turn().and_then(|(_, s)| s);
                self.0
                    .ctx
                    .dispatch_to(Some(agent.key()))
                    .emit::<AgentErrorEvent>(&AgentErrorPayload {
                        session: session.clone(),
                        scope: Some(agent.key().clone()),
                        turn,
                        step,
                        error: failure.clone(),
                    });
                TurnEndReason::Error { error: failure }
            }
        };
        tracing::debug!(parent: &span, reason = ?reason, "turn ended");
        if let Err(e) = session.append(
            "turn/end",
            EventData::TurnEnd(TurnEndData { turn, reason }),
            None,
        ) {
            tracing::error!(agent = %agent.id(), error = %e, "could not close turn {turn}");
        }
    }

    async fn turn_body(
        &self,
        agent: &Agent,
        turn: u64,
        signal: &CancellationToken,
    ) -> Result<TurnEndReason, TurnFail> {
        let session = agent.session().clone();
        let key = agent.key().clone();
        let mut step = 0u64;
        let mut end: Option<TurnEndReason> = None;
        let mut max_tokens = false;
        let limit = self.0.config.max_steps_per_turn;
        loop {
            if signal.is_cancelled() {
                return Err(TurnFail::Aborted);
            }
            // The step limit: checked before anything is claimed, so input steered into the
            // turn stays in the inbox for the next one (`docs/upstream/agent-loop.md`, "Step
            // limit"). Only this turn's own steps count.
            if limit > 0 && step >= limit {
                tracing::debug!(steps = step, limit, "step limit reached");
                return Ok(crate::config::max_steps_reason(limit));
            }
            let claimed = agent
                .inbox()
                .claim(step == 0)
                .map_err(LoopError::InboxClaim)?;
            for message in &claimed {
                self.0
                    .ctx
                    .dispatch_to(Some(&key))
                    .emit::<InboxClaimed>(&InboxNotice {
                        agent: agent.clone(),
                        message: message.clone(),
                        turn: Some(turn),
                    });
            }
            let parts = crate::prompt::assemble_with(
                &self.0.ctx,
                agent,
                signal,
                Some(&self.0.render_cache),
            )
            .await
            .map_err(LoopError::PromptAssembly)?;
            let mut batch = claimed;
            let generation = session.replace_generation();
            let mut snapshot = {
                let mut st = self.state();
                // A replace since the retained snapshot was read (a compaction) may have
                // shadowed it: read it again from the surface.
                if st.retained_generation != generation {
                    st.retained = None;
                }
                st.retained_generation = generation;
                let retained = st
                    .retained
                    .get_or_insert_with(|| RetainedSnapshot::from_session(&session));
                snapshot_for(retained, &parts)
            };
            if let Some(s) = &snapshot {
                batch.push(s.clone());
            }
            let proposed = step + 1;
            let decision = self
                .0
                .ctx
                .dispatch_to(Some(&key))
                .waterfall::<AgentPreStep, _, _>(
                    PreStepCtx {
                        session: session.clone(),
                        scope: Some(key.clone()),
                        messages: batch,
                        turn,
                        step: proposed,
                        cancellation: signal.clone(),
                    },
                    |p| async move {
                        PreStepDecision::Enter {
                            messages: p.messages,
                        }
                    },
                )
                .await;
            let mut messages = match decision {
                PreStepDecision::Reject => return Ok(TurnEndReason::Blocked),
                PreStepDecision::Enter { messages } => messages,
            };
            // A pre-step compaction that shadowed the retained snapshot leaves the request
            // without one: send the current snapshot again in this step.
            let now = session.replace_generation();
            if snapshot.is_none()
                && now != generation
                && !(messages.is_empty() && (step == 0 || end.is_some()))
            {
                let mut st = self.state();
                let retained = RetainedSnapshot::from_session(&session);
                snapshot = snapshot_for(&retained, &parts);
                st.retained = Some(retained);
                st.retained_generation = now;
                if let Some(s) = &snapshot {
                    messages.push(s.clone());
                }
            }
            if step == 0 && messages.is_empty() {
                return Ok(TurnEndReason::Completed);
            }
            if end.is_some() && messages.is_empty() {
                break;
            }
            step = proposed;
            session.append(
                "step/start",
                EventData::StepStart(StepData { turn, step }),
                None,
            )?;
            let result = self
                .enter_and_run(
                    agent,
                    turn,
                    step,
                    &messages,
                    snapshot.as_ref(),
                    &parts,
                    signal,
                )
                .await;
            session.append(
                "step/end",
                EventData::StepEnd(StepData { turn, step }),
                None,
            )?;
            match result? {
                StepEnd::Continue => end = None,
                StepEnd::End(reason) => {
                    if reason == TurnEndReason::MaxTokens {
                        max_tokens = true;
                    }
                    end = Some(reason);
                    if !agent.inbox().has_next_step() {
                        let stop = self
                            .0
                            .ctx
                            .dispatch_to(Some(&key))
                            .serial::<AgentTurnStopping>(TurnStoppingCtx {
                                session: session.clone(),
                                scope: Some(key.clone()),
                                turn,
                                cancellation: signal.clone(),
                            })
                            .await;
                        if let Err(e) = stop {
                            return Err(LoopError::TurnStopping(e).into());
                        }
                        if !agent.inbox().has_next_step() {
                            break;
                        }
                    }
                }
            }
        }
        Ok(if max_tokens {
            TurnEndReason::MaxTokens
        } else {
            end.unwrap_or(TurnEndReason::Completed)
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn enter_and_run(
        &self,
        agent: &Agent,
        turn: u64,
        step: u64,
        messages: &[Arc<Message>],
        snapshot: Option<&Arc<Message>>,
        parts: &PromptParts,
        signal: &CancellationToken,
    ) -> Result<StepEnd, TurnFail> {
        let session = agent.session();
        for m in messages {
            let ev = session.append(
                "user/message",
                EventData::UserMessage(m.clone()),
                Some(SurfaceIntent::append()),
            )?;
            if snapshot.is_some_and(|s| s.id == m.id) {
                self.state().retained = Some(RetainedSnapshot::Retained {
                    seq: ev.seq,
                    text: Some(m.text()),
                });
            }
        }
        self.run_step(agent, turn, step, parts.system.clone(), signal)
            .instrument(tracing::debug_span!("step", step))
            .await
    }

    /// The seed configuration of a request (spec "Step algorithm" 2).
    fn seed_config(&self, agent: &Agent, session: &Session) -> Result<LlmCallConfig, TurnFail> {
        let opts = agent.options();
        // Borrowed from the logged event: the header carries the rendered system prompt and the
        // tool schemas, which a clone would deep-copy on every request.
        let logged_event = session.request_header_event();
        let logged = logged_header(logged_event.as_deref());
        let requested = self.state().requested;
        let logged_route = logged.map(|h| (&h.config.provider, &h.config.model));
        let provider = opts
            .provider
            .clone()
            .or_else(|| logged_route.map(|r| r.0.clone()));
        let model = opts
            .model
            .clone()
            .or_else(|| logged_route.map(|r| r.1.clone()));
        let (Some(provider), Some(model)) = (provider, model) else {
            return Err(TurnFail::Error(LlmFailure::new(
                codes::INVALID_REQUEST,
                "no provider/model configured for this agent",
            )));
        };
        let same_route = logged_route.is_some_and(|(p, m)| *p == provider && *m == model);
        match logged {
            Some(h) if requested && same_route => {
                let defaults = h.adapter_defaults.unwrap_or_default();
                let mut c = h.config.clone();
                if defaults.max_tokens {
                    c.max_tokens = None;
                }
                if defaults.reasoning_effort {
                    c.reasoning_effort = None;
                }
                if opts.max_tokens.is_some() {
                    c.max_tokens = opts.max_tokens;
                }
                Ok(c)
            }
            other => {
                let mut c = LlmCallConfig::new(provider, model);
                c.max_tokens = opts.max_tokens;
                if let Some(h) = other
                    && same_route
                    && !h.adapter_defaults.unwrap_or_default().reasoning_effort
                {
                    c.reasoning_effort = h.config.reasoning_effort.clone();
                }
                Ok(c)
            }
        }
    }

    /// Logs `request/header` (first request of this loop instance, then only on change) and
    /// `request/context` (only when provider, model or window changed). The header is
    /// `EpochHeader::canonical(config, defaults, system, schemas)`; it is only built when it may
    /// have to be logged or compared: when the latest logged header is the one this loop
    /// instance logged from exactly these `schemas` and its config, defaults and system are
    /// equal, the header is unchanged without serializing the schemas again.
    fn log_header(
        &self,
        session: &Session,
        config: LlmCallConfig,
        defaults: dsh_llm::AdapterDefaults,
        system: Option<&str>,
        schemas: &[ToolSchema],
        context_window: Option<u64>,
    ) -> Result<(), SessionError> {
        // The route check reads state the header append does not change; the context is
        // built now, while `config` is still at hand (it moves into the header).
        let context_unchanged = session
            .request_context_event()
            .is_some_and(|e| match &e.data {
                EventData::RequestContext(c) => {
                    c.provider == config.provider
                        && c.model == config.model
                        && c.context_window == context_window
                }
                _ => false,
            });
        let context = (!context_unchanged).then(|| RequestContext {
            provider: config.provider.clone(),
            model: config.model.clone(),
            context_window,
        });
        // Compared in place (no copy of the logged header, its prompt or its tools).
        let prev_event = session.request_header_event();
        let prev = logged_header(prev_event.as_deref());
        let header_defaults = (!defaults.is_empty()).then_some(defaults);
        let (requested, same_tools) = {
            let st = self.state();
            let same_tools = match (&st.logged_tools, prev_event.as_deref()) {
                (Some((seq, logged)), Some(e)) => *seq == e.seq && logged.as_slice() == schemas,
                _ => false,
            };
            (st.requested, same_tools)
        };
        let unchanged = requested
            && same_tools
            && prev.is_some_and(|h| {
                h.config == config
                    && h.adapter_defaults == header_defaults
                    && h.system.as_deref() == system
            });
        let header = (!unchanged).then(|| {
            dsh_llm::EpochHeader::canonical(config, defaults, system.map(str::to_owned), schemas)
        });
        let reason = match &header {
            None => None,
            Some(_) if !requested => Some(if prev.is_some() {
                RequestHeaderReason::Resume
            } else {
                RequestHeaderReason::Initial
            }),
            Some(h) => (prev != Some(h)).then_some(RequestHeaderReason::Change),
        };
        drop(prev_event);
        self.state().requested = true;
        if let (Some(reason), Some(header)) = (reason, header) {
            let ev = session.append(
                "request/header",
                EventData::RequestHeader(RequestHeaderData { header, reason }),
                None,
            )?;
            self.state().logged_tools = Some((ev.seq, schemas.to_vec()));
        }
        if let Some(ctx) = context {
            session.append("request/context", EventData::RequestContext(ctx), None)?;
        }
        Ok(())
    }

    async fn run_step(
        &self,
        agent: &Agent,
        turn: u64,
        step: u64,
        system: Option<String>,
        signal: &CancellationToken,
    ) -> Result<StepEnd, TurnFail> {
        let session = agent.session().clone();
        let key = agent.key().clone();
        let llm = self
            .0
            .ctx
            .require::<LlmService>()
            .map_err(|e| TurnFail::Error(LlmFailure::new(codes::NO_ADAPTER, e.to_string())))?;
        let tools = self.0.ctx.get::<ToolRegistry>();
        loop {
            let seed = self.seed_config(agent, &session)?;
            let config = self
                .0
                .ctx
                .dispatch_to(Some(&key))
                .waterfall::<AgentRequest, _, _>(
                    RequestCtx {
                        session: session.clone(),
                        scope: Some(key.clone()),
                        turn,
                        step,
                        cancellation: signal.clone(),
                    },
                    move |_| async move { Ok(seed) },
                )
                .await
                .map_err(LoopError::RequestListener)?;
            let (config, defaults, window) = match llm.resolve_call_config(&config) {
                Ok(r) => (r.config, r.adapter_defaults, r.context_window),
                // Keep the proposed config so an `llm/stream` listener may serve it.
                Err(_) => (config, dsh_llm::AdapterDefaults::default(), None),
            };
            let schemas = tools
                .as_ref()
                .map(|t| t.schemas(Some(&key)))
                .unwrap_or_default();
            // As `EpochHeader::canonical` stores it: an empty prompt is absent.
            let system_text = system.clone().filter(|s| !s.is_empty());
            // The history is read before the header is logged: neither `request/header` nor
            // `request/context` derives a message.
            // Nameless tool calls get a note (`history::request_history`), still a pure
            // function of the log prefix.
            let mut opts = GenerateOptions::new(
                &config,
                crate::history::request_history(session.derive_messages()),
            );
            let provider = config.provider.clone();
            let model = config.model.clone();
            self.log_header(
                &session,
                config,
                defaults,
                system_text.as_deref(),
                &schemas,
                window,
            )?;
            opts.system = system_text;
            opts.tools = schemas;
            opts.signal = signal.clone();
            opts.session_id = Some(session.id().to_owned());

            let request = tracing::debug_span!("request", provider = %provider, model = %model);
            tracing::debug!(parent: &request, messages = opts.messages.len(), tools = opts.tools.len(), "request sent");
            let mut stream = llm.stream_scoped(Some(&key), opts);
            let mut asm = BlockAssembler::new();
            let mut seqs = Vec::new();
            // Indices whose redundant `block-end` was left out of the log (see `durable_chunk`).
            let mut closed_unlogged: Vec<u32> = Vec::new();
            let mut aborted = false;
            loop {
                // Cancellation still wins over a ready chunk (checked before every poll), but
                // the stream is polled first so that a ready chunk does not register and then
                // unregister a cancellation waiter (two lock round trips) per chunk.
                if signal.is_cancelled() {
                    aborted = true;
                    break;
                }
                let item = tokio::select! {
                    biased;
                    item = stream.next().instrument(request.clone()) => item,
                    () = signal.cancelled() => { aborted = true; break; }
                };
                let Some(item) = item else { break };
                let chunk = match item {
                    Ok(c) => c,
                    Err(failure) => StreamChunk::Finish {
                        reason: FinishReason::Error { failure },
                        replay_state: None,
                    },
                };
                let is_finish = matches!(chunk, StreamChunk::Finish { .. });
                if is_finish && signal.is_cancelled() {
                    aborted = true;
                    break;
                }
                if !durable_chunk(&asm, &mut closed_unlogged, &chunk) {
                    asm.push_owned(chunk);
                    continue;
                }
                let ev = session.append(
                    "assistant/chunk",
                    EventData::AssistantChunk(AssistantChunkData {
                        turn,
                        step,
                        chunk: chunk.clone(),
                    }),
                    None,
                )?;
                seqs.push(ev.seq);
                asm.push_owned(chunk);
                if is_finish {
                    break;
                }
            }
            drop(stream);
            tracing::debug!(parent: &request, chunks = seqs.len(), aborted, "request finished");
            if aborted || signal.is_cancelled() {
                let blocks = asm.interrupted_blocks();
                if !blocks.is_empty() {
                    let message = Message::assistant(blocks, provider, model, None);
                    session.append(
                        "assistant/message",
                        EventData::AssistantMessage(AssistantMessageData {
                            turn,
                            step,
                            message: Arc::new(message),
                            usage: asm.usage().copied(),
                            interrupted: Some(true),
                        }),
                        Some(SurfaceIntent::append_from(seqs)),
                    )?;
                }
                return Err(TurnFail::Aborted);
            }
            if let Some(failure) = asm.finish().failure().cloned() {
                let decision = self
                    .0
                    .ctx
                    .dispatch_to(Some(&key))
                    .waterfall::<AgentRequestError, _, _>(
                        RequestErrorCtx {
                            session: session.clone(),
                            scope: Some(key.clone()),
                            turn,
                            step,
                            provider: provider.clone(),
                            failure: failure.clone(),
                            retry_policy: None,
                            cancellation: signal.clone(),
                        },
                        |_| async { None },
                    )
                    .await;
                if signal.is_cancelled() {
                    return Err(TurnFail::Aborted);
                }
                if decision == Some(RetryDecision::Retry) {
                    continue;
                }
                return Err(TurnFail::Error(failure));
            }
            let message = asm
                .message(&provider, &model)
                .map_err(LoopError::MessageAssembly)?;
            let message = Arc::new(message);
            session.append(
                "assistant/message",
                EventData::AssistantMessage(AssistantMessageData {
                    turn,
                    step,
                    message: message.clone(),
                    usage: asm.usage().copied(),
                    interrupted: None,
                }),
                Some(SurfaceIntent::append_from(seqs)),
            )?;
            if matches!(asm.finish(), FinishReason::MaxTokens) {
                return Ok(StepEnd::End(TurnEndReason::MaxTokens));
            }
            let calls: Vec<ToolCallRequest> = message
                .tool_calls()
                .map(|(id, name, args)| ToolCallRequest::new(id.clone(), name, args))
                .collect();
            if calls.is_empty() {
                return Ok(StepEnd::End(TurnEndReason::Completed));
            }
            // Boxed: the scheduler's future is large (≈2.6 KB) and only needed when the model
            // called tools; inline it would grow every turn future that is moved into its box.
            return Box::pin(self.run_tools(agent, turn, step, calls, signal)).await;
        }
    }

    async fn run_tools(
        &self,
        agent: &Agent,
        turn: u64,
        step: u64,
        calls: Vec<ToolCallRequest>,
        signal: &CancellationToken,
    ) -> Result<StepEnd, TurnFail> {
        let Some(registry) = self.0.ctx.get::<ToolRegistry>() else {
            // No tool registry linked: every call still gets a result (UNKNOWN_TOOL).
            let registry = ToolRegistry::new(self.0.ctx.clone());
            return self
                .run_tools_with(&registry, agent, turn, step, calls, signal)
                .await;
        };
        self.run_tools_with(&registry, agent, turn, step, calls, signal)
            .await
    }

    async fn run_tools_with(
        &self,
        registry: &ToolRegistry,
        agent: &Agent,
        turn: u64,
        step: u64,
        calls: Vec<ToolCallRequest>,
        signal: &CancellationToken,
    ) -> Result<StepEnd, TurnFail> {
        let session = agent.session().clone();
        let caller = dsh_tools::ToolCaller::new(
            agent.key().clone(),
            agent.ctx().clone(),
            session.clone(),
            agent.id().clone(),
        );
        let hooks = SessionHooks::new(session, turn, step);
        let outcome = run_tool_calls(
            registry,
            Some(caller),
            calls,
            signal.clone(),
            &hooks,
            SchedulerConfig {
                max_parallel: self.0.config.max_parallel_tool_calls,
            },
        )
        .await
        .map_err(LoopError::ToolScheduler)?;
        // Additional contexts enter after the results, on the next step.
        for context in hooks.take_contexts() {
            agent.inject(context).map_err(LoopError::ContextInjection)?;
        }
        if outcome.aborted || signal.is_cancelled() {
            return Err(TurnFail::Aborted);
        }
        Ok(if outcome.concludes_turn {
            StepEnd::End(TurnEndReason::Completed)
        } else {
            StepEnd::Continue
        })
    }
}
