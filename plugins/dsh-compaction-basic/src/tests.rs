#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use dsh_compaction::{
    CompactionError, CompactionEvent, CompactionService, CompactionTarget, SeqRange, SurfaceView,
    Trigger, active_lock, checkpoint::is_checkpoint,
};
use dsh_kernel::{ErrorCode as _, ScopeKey};
use dsh_llm::models::{ModelCatalog, ModelLimits, ModelsTable};
use dsh_llm::{
    CallPurpose, ContentBlock, EpochHeader, FinishReason, GenerateOptions, LlmCallConfig,
    LlmFailure, Message, MessageSource, TokenUsage,
};
use dsh_session::{
    AssistantMessageData, EventData, EventType, EventTypeRegistry, RequestHeaderData,
    RequestHeaderReason, Session, StepData, SurfaceIntent, ToolCallData, ToolResultData,
    TurnEndData, TurnEndReason, TurnStartData, check_invariants,
};
use futures::future::BoxFuture;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::config::CompactionConfig;
use crate::overflow::{
    is_context_overflow, is_overflow_response, mentions_context_overflow, stated_context_limit,
};
use crate::policy::{Thresholds, select_range, thresholds};
use crate::pruner::{self, MARKER, PrunerConfig, prune_content};
use crate::summarizer::{
    SECTION_HEADINGS, Summarizer, SummaryOutput, build_request, instruction, summary_blocks,
};
use crate::{BasicCompaction, ModelLookup};

// ---- log builder -------------------------------------------------------------------------

fn registry() -> Arc<EventTypeRegistry> {
    let r = EventTypeRegistry::with_upstream_catalog();
    dsh_compaction::events::register(&r, "dsh-compaction-basic").unwrap();
    Arc::new(r)
}

fn header() -> EpochHeader {
    EpochHeader {
        config: LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
        adapter_defaults: None,
        system: Some("You are dsh.".into()),
        tools: Some(
            json!([{"name": "bash", "description": "Run.", "parameters": {"type": "object"}}]),
        ),
    }
}

fn ev(s: &Session, kind: EventType, data: EventData) -> u64 {
    s.append(kind, data, None).unwrap().seq
}

fn surface(s: &Session, kind: EventType, data: EventData) -> u64 {
    s.append(kind, data, Some(SurfaceIntent::append()))
        .unwrap()
        .seq
}

/// header(0) turn/start(1) user(2), then `steps` closed steps of 5 events each (call at
/// 4+5(k-1), result at 6+5(k-1)), each result `result_chars` long. Turn 1 stays open.
fn log(steps: u64, result_chars: usize) -> Arc<Session> {
    let s = Session::create_with("s", None, None, registry()).unwrap();
    ev(
        &s,
        EventType::REQUEST_HEADER,
        EventData::RequestHeader(RequestHeaderData {
            header: header(),
            reason: RequestHeaderReason::Initial,
        }),
    );
    ev(
        &s,
        EventType::TURN_START,
        EventData::TurnStart(TurnStartData {
            turn: 1,
            trigger: None,
        }),
    );
    surface(
        &s,
        EventType::USER_MESSAGE,
        EventData::UserMessage(Arc::new(Message::user_text("list the files"))),
    );
    for step in 1..=steps {
        let sd = StepData { turn: 1, step };
        ev(&s, EventType::STEP_START, EventData::StepStart(sd));
        let id = format!("c{step}");
        let msg = Message::assistant(
            vec![ContentBlock::tool_call(
                id.as_str(),
                "bash",
                r#"{"command":"ls"}"#,
            )],
            "deepseek",
            "deepseek-v4-flash",
            None,
        );
        surface(
            &s,
            EventType::ASSISTANT_MESSAGE,
            EventData::AssistantMessage(AssistantMessageData {
                turn: 1,
                step,
                message: Arc::new(msg),
                usage: None,
                interrupted: None,
            }),
        );
        ev(
            &s,
            EventType::TOOL_CALL,
            EventData::ToolCall(ToolCallData {
                turn: 1,
                step,
                call_id: id.as_str().into(),
                name: "bash".into(),
                arguments: r#"{"command":"ls"}"#.into(),
            }),
        );
        surface(
            &s,
            EventType::TOOL_RESULT,
            EventData::ToolResult(ToolResultData {
                turn: 1,
                step,
                message: Arc::new(Message::tool_result(
                    id.as_str().into(),
                    vec![ContentBlock::text("x".repeat(result_chars))],
                    false,
                )),
                error: None,
                meta: None,
            }),
        );
        ev(&s, EventType::STEP_END, EventData::StepEnd(sd));
    }
    Arc::new(s)
}

fn end_turn(s: &Session) {
    ev(
        s,
        EventType::TURN_END,
        EventData::TurnEnd(TurnEndData {
            turn: 1,
            reason: TurnEndReason::Completed,
        }),
    );
}

// ---- a scripted summariser --------------------------------------------------------------

#[derive(Default)]
struct Scripted {
    text: String,
    finish: Option<FinishReason>,
    seen: Mutex<Vec<GenerateOptions>>,
}

impl Summarizer for Scripted {
    fn summarize(
        &self,
        opts: GenerateOptions,
        _key: Option<ScopeKey>,
    ) -> BoxFuture<'static, SummaryOutput> {
        self.seen.lock().unwrap().push(opts);
        let out = SummaryOutput {
            blocks: vec![
                ContentBlock::reasoning("thinking"),
                ContentBlock::text(self.text.clone()),
            ],
            finish: self.finish.clone().unwrap_or(FinishReason::Stop),
            usage: Some(TokenUsage {
                input_tokens: 3000,
                output_tokens: 40,
                cache_read_tokens: None,
                cache_write_tokens: None,
                reasoning_tokens: None,
                estimated: false,
            }),
        };
        Box::pin(async move { out })
    }
}

fn engine(window: u64, text: &str) -> (BasicCompaction, Arc<Scripted>) {
    let mut table = ModelsTable::new();
    table.insert(
        "deepseek-v4-flash".into(),
        ModelLimits {
            context_window: Some(window),
            max_output_tokens: None,
            ..ModelLimits::default()
        },
    );
    let catalog = ModelCatalog::builtin().with_overrides(&table).unwrap();
    let lookup: ModelLookup = Arc::new(|_: &str, _: &str| None);
    let s = Arc::new(Scripted {
        text: text.into(),
        ..Scripted::default()
    });
    (
        BasicCompaction::new(CompactionConfig::default(), catalog, lookup, s.clone()),
        s,
    )
}

const SUMMARY: &str = "## Primary Request and Intent\n- list the files";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

// ---- overflow ---------------------------------------------------------------------------

#[test]
fn deepseek_and_openai_overflow_wording_is_recognised() {
    let deepseek = r#"{"error":{"message":"This model's maximum context length is 1048576 tokens. However, you requested 1050000 tokens (986000 in the messages, 64000 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#;
    let openai = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130415 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
    let other_400 = r#"{"error":{"message":"Model Not Exist","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#;
    assert!(is_overflow_response(400, deepseek));
    assert!(is_overflow_response(400, openai));
    assert!(!is_overflow_response(400, other_400));
    assert!(is_overflow_response(413, ""));
    assert!(!is_overflow_response(429, deepseek));
    assert_eq!(stated_context_limit(deepseek), Some(1_048_576));
    assert_eq!(stated_context_limit(openai), Some(128_000));
    assert_eq!(stated_context_limit(other_400), None);
    assert!(mentions_context_overflow("context_length_exceeded"));
    // llama.cpp (trial 14 defect 3).
    assert!(is_overflow_response(
        400,
        r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":17000,"n_ctx":16000}}"#
    ));
    let classified = LlmFailure::new("CONTEXT_WINDOW_EXCEEDED", "deepseek: too long (HTTP 400)");
    assert!(is_context_overflow(&classified));
    let plain = LlmFailure::new(
        "INVALID_REQUEST",
        "This model's maximum context length is 8 tokens",
    )
    .with_status(400);
    assert!(is_context_overflow(&plain));
    let auth = LlmFailure::new("AUTH", "maximum context length").with_status(401);
    assert!(!is_context_overflow(&auth));
}

// ---- policy -----------------------------------------------------------------------------

#[test]
fn thresholds_floor_the_ratios() {
    let cfg = CompactionConfig::default();
    assert_eq!(
        thresholds(16_000, &cfg).unwrap(),
        Thresholds {
            threshold: 12_800,
            retain: 2_560
        }
    );
    assert_eq!(
        thresholds(1_048_576, &cfg).unwrap(),
        Thresholds {
            threshold: 838_860,
            retain: 167_772
        }
    );
    let tokens = CompactionConfig {
        retain_tokens: Some(12_800),
        ..CompactionConfig::default()
    };
    assert_eq!(
        thresholds(16_000, &tokens).unwrap_err().to_string(),
        "compaction.retain_tokens: the retained tail (12800 tokens) must be smaller than the \
         threshold (12800 tokens of a 16000-token window)"
    );
    // Trial 14 defect 6: a bad ratio names the ratio key.
    let ratio = CompactionConfig {
        retain_ratio: Some(0.9),
        ..CompactionConfig::default()
    };
    assert_eq!(
        thresholds(16_000, &ratio).unwrap_err().to_string(),
        "compaction.retain_ratio: the retained tail (14400 tokens) must be smaller than the \
         threshold (12800 tokens of a 16000-token window)"
    );
    // Trial 14 defect 2: the threshold leaves room for the request's output.
    let t = thresholds(16_000, &cfg).unwrap();
    assert_eq!(t.reserving(16_000, Some(4000)).threshold, 12_000);
    assert_eq!(t.reserving(16_000, Some(1000)).threshold, 12_800);
    assert_eq!(t.reserving(16_000, None).threshold, 12_800);
    // An output that leaves no more than the retained tail is not reserved for.
    assert_eq!(t.reserving(16_000, Some(14_000)).threshold, 12_800);
}

#[test]
fn range_selection_keeps_the_tail_and_moves_cuts_to_balanced_boundaries() {
    let s = log(8, 2000);
    let view = SurfaceView::of(&s);
    // user 12; each step: call 13, result 512.
    let mut costs = vec![12];
    for _ in 0..8 {
        costs.extend([13, 512]);
    }
    // retain 640: newest result 512 + call 13 + result 512 ≥ 640 lands on step 7's result
    // (position 14), which is moved to step 7's call (position 13).
    assert_eq!(select_range(&view, &costs, 640), Some((0, 12)));
    // retain 0: keep only the newest unit (step 8's call and result).
    assert_eq!(select_range(&view, &costs, 0), Some((0, 14)));
    // A tail bigger than everything: nothing to compact.
    assert_eq!(select_range(&view, &costs, 100_000), None);
}

// ---- summariser ------------------------------------------------------------------------

#[test]
fn the_request_replays_header_and_shadowed_messages_then_the_instruction() {
    let shadowed = vec![
        Arc::new(Message::user_text("a")),
        Arc::new(Message::user_text("b")),
    ];
    let mut h = header();
    h.config.reasoning_effort = Some("high".into());
    let opts = build_request(
        &h,
        shadowed.clone(),
        ("deepseek", "deepseek-v4-flash"),
        8192,
        Some("s".into()),
        CancellationToken::new(),
    )
    .unwrap();
    assert_eq!(opts.provider, "deepseek");
    assert_eq!(opts.reasoning_effort.as_deref(), Some("high"));
    assert_eq!(opts.system.as_deref(), Some("You are dsh."));
    assert_eq!(
        serde_json::to_value(&opts.tools).unwrap(),
        json!([{"name": "bash", "description": "Run.", "parameters": {"type": "object"}}])
    );
    assert_eq!(opts.max_tokens, Some(8192));
    assert_eq!(opts.purpose, Some(CallPurpose::Compaction));
    assert_eq!(opts.session_id.as_deref(), Some("s"));
    assert_eq!(opts.messages.len(), 3);
    assert_eq!(opts.messages[..2], shadowed[..]);
    let last = &opts.messages[2];
    assert_eq!(last.source, MessageSource::plugin("dsh-compaction-basic"));
    assert_eq!(last.text(), instruction());
    // Every heading, in order.
    let text = instruction();
    let at: Vec<usize> = SECTION_HEADINGS
        .iter()
        .map(|h| text.find(h).unwrap())
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}");
    // Another route drops the reasoning effort.
    let other = build_request(
        &h,
        vec![],
        ("local", "qwen"),
        100,
        None,
        CancellationToken::new(),
    )
    .unwrap();
    assert_eq!(
        (other.provider.as_str(), other.reasoning_effort),
        ("local", None)
    );
}

#[test]
fn summary_outcomes_map_to_errors() {
    let out = |blocks: Vec<ContentBlock>, finish| SummaryOutput {
        blocks,
        finish,
        usage: None,
    };
    let ok = summary_blocks(&out(
        vec![ContentBlock::reasoning("r"), ContentBlock::text("s")],
        FinishReason::Stop,
    ))
    .unwrap();
    assert_eq!(ok, vec![ContentBlock::text("s")]);
    let code = |r: Result<Vec<ContentBlock>, CompactionError>| match r.unwrap_err() {
        CompactionError::Summary { code, .. } => code,
        e => panic!("{e}"),
    };
    assert_eq!(
        code(summary_blocks(&out(
            vec![ContentBlock::text("s")],
            FinishReason::MaxTokens
        ))),
        "MAX_TOKENS"
    );
    assert_eq!(
        code(summary_blocks(&out(
            vec![],
            FinishReason::Error {
                failure: LlmFailure::new("SERVER", "boom")
            }
        ))),
        "SERVER"
    );
    assert_eq!(
        code(summary_blocks(&out(
            vec![ContentBlock::Image {
                attachment: json!({})
            }],
            FinishReason::Stop
        ))),
        "UNSUPPORTED_CONTENT"
    );
    assert_eq!(
        code(summary_blocks(&out(
            vec![ContentBlock::text(" \n")],
            FinishReason::Stop
        ))),
        "EMPTY_SUMMARY"
    );
}

// ---- pruner -----------------------------------------------------------------------------

#[test]
fn pruner_keeps_head_and_tail_code_points() {
    let cfg = PrunerConfig::default();
    assert_eq!(
        prune_content(&[ContentBlock::text("é".repeat(8192))], &cfg),
        None
    );
    let text: String = (0..9000)
        .map(|i| {
            if i < 4096 {
                'h'
            } else if i >= 9000 - 1024 {
                't'
            } else {
                'm'
            }
        })
        .collect();
    let pruned = prune_content(&[ContentBlock::text(text)], &cfg).unwrap();
    let expected = format!("{}{MARKER}{}", "h".repeat(4096), "t".repeat(1024));
    assert_eq!(pruned, vec![ContentBlock::text(expected)]);
    // Across blocks, with a non-text block kept in place.
    let small = PrunerConfig {
        threshold_chars: 10,
        head_chars: 3,
        tail_chars: 2,
    };
    let blocks = vec![
        ContentBlock::text("ab"),
        ContentBlock::Image {
            attachment: json!({"id": 1}),
        },
        ContentBlock::text("cdefghijkl"),
    ];
    assert_eq!(
        prune_content(&blocks, &small).unwrap(),
        vec![
            ContentBlock::text("ab"),
            ContentBlock::Image {
                attachment: json!({"id": 1})
            },
            ContentBlock::text(format!("c{MARKER}kl")),
        ]
    );
}

#[test]
fn pruner_plans_old_oversized_results() {
    let s = log(2, 9000);
    let plans = pruner::plan(&SurfaceView::of(&s), &PrunerConfig::default());
    assert_eq!(plans.iter().map(|p| p.seq).collect::<Vec<_>>(), vec![6, 11]);
    // 9000/4 + 4 (text) + 4 (tool-result) + 4 (message)
    assert_eq!(plans[0].original_tokens, 2262);
    let ContentBlock::ToolResult { content, .. } = &plans[0].replacement.message.content[0] else {
        panic!("not a tool result")
    };
    assert_eq!(
        content[0].as_text().map(|t| t.chars().count()),
        Some(4096 + MARKER.len() + 1024)
    );
    assert_eq!(plans[0].replacement.step, 1);
    // Appended between steps (where `agent/pre-step` runs): prune, replacement, for each.
    assert_eq!(s.len(), 13);
    assert_eq!(pruner::apply(&s, plans).unwrap(), 2);
    let kinds: Vec<String> = s.events()[13..]
        .iter()
        .map(|e| e.kind.as_str().to_owned())
        .collect();
    assert_eq!(
        kinds,
        vec![
            "compaction/prune",
            "tool/result",
            "compaction/prune",
            "tool/result"
        ]
    );
    let CompactionEvent::Prune(p) = CompactionEvent::parse(&s.event(13).unwrap())
        .unwrap()
        .unwrap()
    else {
        panic!("not a prune")
    };
    assert_eq!(
        p,
        dsh_compaction::CompactionPrune {
            shadowed_range: SeqRange { start: 6, end: 6 },
            shadowed_seqs: vec![6],
            shadowed_token_count: 2262,
        }
    );
    assert_eq!(SurfaceView::of(&s).seqs(), vec![2, 4, 14, 9, 16]);
    assert_eq!(check_invariants(&s.events(), Some(s.registry())), vec![]);
    // Nothing left to prune.
    assert_eq!(
        pruner::plan(&SurfaceView::of(&s), &PrunerConfig::default()),
        vec![]
    );
}

// ---- engine ----------------------------------------------------------------------------

#[test]
fn pressure_compacts_keeping_the_tail() {
    let s = log(8, 2000);
    let (engine, seen) = engine(4000, SUMMARY);
    // header 7 + 22, user 12, 8 × 525.
    assert_eq!(engine.measure(&s).0.total_tokens, 29 + 12 + 8 * 525);
    let target = CompactionTarget::new(s.clone(), Some(1));
    let r = rt()
        .block_on(engine.compact_if_needed(&target, Trigger::Pressure, CancellationToken::new()))
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.start_seq, r.summary_seq, r.message_seq, r.end_seq),
        (43, 44, 45, 46)
    );
    assert_eq!(r.shadowed_range, SeqRange { start: 2, end: 31 });
    assert_eq!(r.shadowed_seqs.len(), 13);
    assert_eq!(r.shadowed_token_count, 12 + 6 * 525);
    assert_eq!(r.summary, vec![ContentBlock::text(SUMMARY)]);
    // The request: shadowed 13 messages + the instruction.
    let opts = seen.seen.lock().unwrap().pop().unwrap();
    assert_eq!(opts.messages.len(), 14);
    // 8192 of output does not fit a 4000-token window beside the input: what is left does.
    assert_eq!(opts.max_tokens, Some(544));
    // The surface: checkpoint, step 7, step 8.
    let view = SurfaceView::of(&s);
    assert_eq!(view.seqs(), vec![45, 34, 36, 39, 41]);
    let EventData::UserMessage(m) = &view.nodes[0].data else {
        panic!("not a checkpoint")
    };
    assert!(is_checkpoint(m));
    assert_eq!(
        engine.measure(&s).0.total_tokens,
        29 + r.message_tokens + 2 * 525
    );
    let CompactionEvent::Start(start) = CompactionEvent::parse(&s.event(43).unwrap())
        .unwrap()
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(start.turn, Some(1));
    let CompactionEvent::Summary(sum) = CompactionEvent::parse(&s.event(44).unwrap())
        .unwrap()
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        sum.raw_output,
        Some(vec![
            ContentBlock::reasoning("thinking"),
            ContentBlock::text(SUMMARY)
        ])
    );
    assert_eq!(sum.usage.map(|u| u.input_tokens), Some(3000));
    assert_eq!(check_invariants(&s.events(), Some(s.registry())), vec![]);
    // Below the threshold now: nothing more.
    let again = rt()
        .block_on(engine.compact_if_needed(&target, Trigger::Pressure, CancellationToken::new()))
        .unwrap();
    assert_eq!(again, None);
    assert_eq!(s.len(), 47);
}

#[test]
fn below_threshold_or_no_window_does_nothing() {
    let s = log(2, 2000);
    let (engine, seen) = engine(16_000, SUMMARY);
    let target = CompactionTarget::new(s.clone(), Some(1));
    let r = rt()
        .block_on(engine.compact_if_needed(&target, Trigger::Pressure, CancellationToken::new()))
        .unwrap();
    assert_eq!(r, None);
    // Unknown model: no window, automatic compaction is off.
    let lookup: ModelLookup = Arc::new(|_: &str, _: &str| None);
    let blind = BasicCompaction::new(
        CompactionConfig::default(),
        ModelCatalog::empty(),
        lookup,
        Arc::new(Scripted::default()),
    );
    assert_eq!(blind.context_window(&s), None);
    let r = rt()
        .block_on(blind.compact_if_needed(&target, Trigger::Pressure, CancellationToken::new()))
        .unwrap();
    assert_eq!(r, None);
    assert!(seen.seen.lock().unwrap().is_empty());
    assert_eq!(s.len(), 13);
}

#[test]
fn a_summary_not_smaller_is_rejected_and_the_bracket_closed() {
    let s = log(8, 2000);
    let (engine, _) = engine(4000, &"y".repeat(20_000));
    let target = CompactionTarget::new(s.clone(), Some(1));
    let err = rt()
        .block_on(engine.compact_if_needed(&target, Trigger::Pressure, CancellationToken::new()))
        .unwrap_err();
    assert_eq!(err.code(), "SUMMARY");
    assert!(err.to_string().contains("SUMMARY_NOT_SMALLER"), "{err}");
    // start + end {error}; surface untouched; lock released.
    assert_eq!(s.len(), 45);
    assert_eq!(s.event(44).unwrap().kind.as_str(), "compaction/end");
    assert!(
        s.event(44).unwrap().data.to_value()["error"]
            .as_str()
            .unwrap()
            .contains("not smaller")
    );
    assert_eq!(active_lock(&s.events()), None);
    assert_eq!(SurfaceView::of(&s).nodes.len(), 17);
}

#[test]
fn overflow_bypasses_the_threshold_and_keeps_only_the_newest_unit() {
    let s = log(2, 2000);
    let (engine, _) = engine(1_000_000, SUMMARY);
    let target = CompactionTarget::new(s.clone(), Some(1));
    let r = rt()
        .block_on(engine.compact_if_needed(
            &target,
            Trigger::ContextOverflow,
            CancellationToken::new(),
        ))
        .unwrap()
        .unwrap();
    assert_eq!(r.shadowed_seqs, vec![2, 4, 6]);
    assert_eq!(SurfaceView::of(&s).seqs(), vec![r.message_seq, 9, 11]);
}

#[test]
fn manual_compaction_needs_an_idle_session_and_never_repeats_a_region() {
    let s = log(3, 2000);
    let (engine, _) = engine(1_000_000, SUMMARY);
    let target = CompactionTarget::new(s.clone(), None);
    let busy = rt()
        .block_on(engine.compact_now(&target, CancellationToken::new(), Some("cmd-1".into())))
        .unwrap_err();
    assert_eq!((busy.code(), busy.kind()), ("BUSY", "busy"));
    end_turn(&s);
    let r = rt()
        .block_on(engine.compact_now(&target, CancellationToken::new(), Some("cmd-1".into())))
        .unwrap()
        .unwrap();
    assert_eq!(r.source_command_id.as_deref(), Some("cmd-1"));
    assert_eq!(r.shadowed_seqs, vec![2, 4, 6, 9, 11]);
    assert_eq!(
        r.command_text(),
        "Compacted 5 history items (~1062 tokens)."
    );
    let CompactionEvent::Start(start) = CompactionEvent::parse(&s.event(r.start_seq).unwrap())
        .unwrap()
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(start.turn, None);
    // Again: only the checkpoint would be compacted — nothing useful, nothing written.
    let len = s.len();
    let again = rt()
        .block_on(engine.compact_now(&target, CancellationToken::new(), None))
        .unwrap();
    assert_eq!(again, None);
    assert_eq!(s.len(), len);
    assert_eq!(check_invariants(&s.events(), Some(s.registry())), vec![]);
}

#[test]
fn a_live_lock_blocks_and_cancellation_closes_the_bracket() {
    let s = log(8, 2000);
    // Below the threshold nothing is needed: no lock scan, no error.
    let (roomy, _) = engine(1_000_000, SUMMARY);
    let target = CompactionTarget::new(s.clone(), Some(1));
    let bracket = dsh_compaction::Bracket::begin(&s, Some(1), None).unwrap();
    let none = rt()
        .block_on(roomy.compact_if_needed(&target, Trigger::Pressure, CancellationToken::new()))
        .unwrap();
    assert_eq!(none, None);
    let (engine, _) = engine(4000, SUMMARY);
    let busy = rt()
        .block_on(engine.compact_if_needed(&target, Trigger::Pressure, CancellationToken::new()))
        .unwrap_err();
    assert_eq!(busy.code(), "BUSY");
    let region = rt()
        .block_on(engine.compact_region(&target, 2, 31, CancellationToken::new()))
        .unwrap_err();
    assert_eq!(region.code(), "BUSY");
    bracket
        .close_failed(&s, &CompactionError::Cancelled)
        .unwrap();
    let signal = CancellationToken::new();
    signal.cancel();
    let err = rt()
        .block_on(engine.compact_region(&target, 2, 31, signal))
        .unwrap_err();
    assert_eq!(err.code(), "CANCELLED");
    assert_eq!(active_lock(&s.events()), None);
    let bad = rt()
        .block_on(engine.compact_region(&target, 2, 4, CancellationToken::new()))
        .unwrap_err();
    assert_eq!(bad.code(), "INVALID_REGION");
    let r = rt()
        .block_on(engine.compact_region(&target, 2, 31, CancellationToken::new()))
        .unwrap();
    assert_eq!(r.shadowed_range, SeqRange { start: 2, end: 31 });
}

#[test]
fn the_plugin_boots_and_provides_the_service() {
    rt().block_on(async {
        let kernel = dsh_kernel::Kernel::new();
        kernel.boot().await.unwrap();
        let c = kernel.root().require::<dsh_compaction::Compaction>();
        assert!(c.is_ok());
        let reg = kernel.root().require::<EventTypeRegistry>().unwrap();
        assert_eq!(
            reg.get("compaction/start").map(|d| d.owner),
            Some("dsh-compaction-basic".to_owned())
        );
    });
}

// ---- pruner first, live events, refused regions -------------------------------------------

type Seen<T> = Arc<Mutex<Vec<T>>>;

/// A kernel whose root context records every emitted `compaction/completed` and
/// `compaction/notice`.
fn capture() -> (
    dsh_kernel::Kernel,
    Seen<dsh_compaction::CompactionCompletedPayload>,
    Seen<dsh_compaction::CompactionNoticePayload>,
) {
    let kernel = dsh_kernel::Kernel::new();
    let done: Seen<dsh_compaction::CompactionCompletedPayload> = Arc::default();
    let notes: Seen<dsh_compaction::CompactionNoticePayload> = Arc::default();
    let d = done.clone();
    kernel
        .root()
        .on_emit::<dsh_compaction::CompactionCompleted>(move |p| d.lock().unwrap().push(p.clone()))
        .unwrap()
        .detach();
    let n = notes.clone();
    kernel
        .root()
        .on_emit::<dsh_compaction::CompactionNotice>(move |p| n.lock().unwrap().push(p.clone()))
        .unwrap()
        .detach();
    (kernel, done, notes)
}

fn nested_text(m: &Message) -> String {
    m.content
        .iter()
        .map(|b| match b {
            ContentBlock::ToolResult { content, .. } => {
                content.iter().filter_map(ContentBlock::as_text).collect()
            }
            b => b.as_text().unwrap_or_default().to_owned(),
        })
        .collect()
}

#[test]
fn pruning_alone_can_bring_the_request_under_the_threshold() {
    // 3 steps with 9,000-character results: 29 + 12 + 3 × (13 + 2262) = 6866 tokens against
    // a 6,400-token threshold (window 8,000). Pruned to 4096 + marker + 1024 code points
    // (1302 tokens each): 3986, so nothing is summarised.
    let (kernel, done, notes) = capture();
    let s = log(3, 9000);
    let (engine, seen) = engine(8000, SUMMARY);
    let engine = engine.with_events(kernel.root().clone());
    assert_eq!(engine.measure(&s).0.total_tokens, 6866);
    let target = CompactionTarget::new(s.clone(), Some(1));
    let r = rt()
        .block_on(engine.compact_if_needed(&target, Trigger::Pressure, CancellationToken::new()))
        .unwrap();
    assert_eq!(r, None);
    assert!(
        seen.seen.lock().unwrap().is_empty(),
        "no summarisation call"
    );
    assert_eq!(engine.measure(&s).0.total_tokens, 3986);
    assert_eq!(
        kinds_from(&s, 18),
        ["compaction/prune", "tool/result"].repeat(3)
    );
    assert_eq!(
        *done.lock().unwrap(),
        vec![dsh_compaction::CompactionCompletedPayload {
            session_id: "s".into(),
            scope: None,
            turn: Some(1),
            trigger: dsh_compaction::CompactionCause::Pressure,
            compaction_id: None,
            tokens_before: 6866,
            tokens_after: 3986,
            shadowed_count: 0,
            pruned_count: 3,
        }]
    );
    assert_eq!(*notes.lock().unwrap(), vec![]);
}

fn kinds_from(s: &Session, from: u64) -> Vec<&'static str> {
    s.events_from(from)
        .iter()
        .map(|e| match e.kind.as_str() {
            "compaction/prune" => "compaction/prune",
            "compaction/start" => "compaction/start",
            "compaction/summary" => "compaction/summary",
            "compaction/end" => "compaction/end",
            "tool/result" => "tool/result",
            "user/message" => "user/message",
            _ => "other",
        })
        .collect()
}

#[test]
fn old_oversized_results_are_pruned_before_anything_is_summarised() {
    // 8 steps of 9,000-character results: 18,241 tokens; pruned: 10,561, still over the
    // 6,400-token threshold, so the span before step 8 is summarised — from the pruned text.
    let (kernel, done, _) = capture();
    let s = log(8, 9000);
    let (engine, seen) = engine(8000, SUMMARY);
    let engine = engine.with_events(kernel.root().clone());
    assert_eq!(engine.measure(&s).0.total_tokens, 18_241);
    let target = CompactionTarget::new(s.clone(), Some(1));
    let r = rt()
        .block_on(engine.compact_if_needed(&target, Trigger::Pressure, CancellationToken::new()))
        .unwrap()
        .unwrap();
    // 43 original events, 8 × (prune, replacement), then the bracket.
    let mut expected = ["compaction/prune", "tool/result"].repeat(8);
    expected.extend([
        "compaction/start",
        "compaction/summary",
        "user/message",
        "compaction/end",
    ]);
    assert_eq!(kinds_from(&s, 43), expected);
    assert_eq!(
        (r.start_seq, r.summary_seq, r.message_seq, r.end_seq),
        (59, 60, 61, 62)
    );
    // The user message and 7 steps (13 + 1302 each) are shadowed: pruned replacements.
    assert_eq!(r.shadowed_token_count, 12 + 7 * 1315);
    assert_eq!(r.shadowed_seqs.len(), 15);
    assert_eq!(r.shadowed_seqs[2], 44);
    // The summarisation request carried the shortened results; the oldest part (the user
    // message and two steps) does not fit the 8000-token window and is dropped with a marker.
    let opts = seen.seen.lock().unwrap().pop().unwrap();
    assert_eq!(opts.messages.len(), 12);
    assert_eq!(
        nested_text(&opts.messages[0]),
        "[5 older history items were dropped here without being summarised: they did not \
         fit the model's context window]"
    );
    let sent = nested_text(&opts.messages[2]);
    assert_eq!(sent.chars().count(), 4096 + MARKER.len() + 1024);
    assert!(sent.contains(MARKER));
    // The request surface: checkpoint, step 8's call and its pruned result.
    let msgs = s.derive_messages();
    assert_eq!(msgs.len(), 3);
    assert!(is_checkpoint(&msgs[0]));
    assert_eq!(nested_text(&msgs[2]).chars().count(), 5159);
    // The log keeps every original.
    for seq in [6, 11, 41] {
        let EventData::ToolResult(d) = &s.event(seq).unwrap().data else {
            panic!("seq {seq} is not a tool result")
        };
        assert_eq!(nested_text(&d.message), "x".repeat(9000));
    }
    assert_eq!(check_invariants(&s.events(), Some(s.registry())), vec![]);
    let after = 29 + r.message_tokens + 1315;
    assert_eq!(engine.measure(&s).0.total_tokens, after);
    assert_eq!(
        *done.lock().unwrap(),
        vec![dsh_compaction::CompactionCompletedPayload {
            session_id: "s".into(),
            scope: None,
            turn: Some(1),
            trigger: dsh_compaction::CompactionCause::Pressure,
            compaction_id: Some(r.compaction_id.clone()),
            tokens_before: 18_241,
            tokens_after: after,
            shadowed_count: 15,
            pruned_count: 8,
        }]
    );
}

#[test]
fn a_refused_summary_is_a_notice_and_its_region_is_not_retried_at_once() {
    let (kernel, done, notes) = capture();
    let s = log(8, 2000);
    let (engine, seen) = engine(4000, &"y".repeat(20_000));
    let engine = engine.with_events(kernel.root().clone());
    let target = CompactionTarget::new(s.clone(), Some(1));
    let go = || {
        rt().block_on(engine.compact_if_needed(
            &target,
            Trigger::Pressure,
            CancellationToken::new(),
        ))
    };
    let err = go().unwrap_err();
    let notice = notes.lock().unwrap().clone();
    assert_eq!(notice.len(), 1);
    assert_eq!(
        notice[0],
        dsh_compaction::CompactionNoticePayload {
            session_id: "s".into(),
            scope: None,
            turn: Some(1),
            trigger: dsh_compaction::CompactionCause::Pressure,
            level: dsh_compaction::NoticeLevel::Warning,
            code: "SUMMARY_NOT_SMALLER".into(),
            message: format!("automatic compaction failed; the turn goes on uncompacted: {err}"),
        }
    );
    assert_eq!(seen.seen.lock().unwrap().len(), 1);
    assert_eq!(s.len(), 45);
    // The same region again: skipped, nothing written, no call, no second notice.
    assert_eq!(go().unwrap(), None);
    assert_eq!(seen.seen.lock().unwrap().len(), 1);
    assert_eq!(s.len(), 45);
    assert_eq!(notes.lock().unwrap().len(), 1);
    // A context overflow over the same span (retain 0 keeps only the newest step) is a
    // different region: tried.
    let err = rt()
        .block_on(engine.compact_if_needed(
            &target,
            Trigger::ContextOverflow,
            CancellationToken::new(),
        ))
        .unwrap_err();
    assert_eq!(err.code(), "SUMMARY");
    assert_eq!(seen.seen.lock().unwrap().len(), 2);
    assert_eq!(
        notes.lock().unwrap()[1].message,
        format!("compaction after a context-window error failed: {err}")
    );
    assert_eq!(
        notes.lock().unwrap()[1].trigger,
        dsh_compaction::CompactionCause::ContextOverflow
    );
    assert_eq!(*done.lock().unwrap(), vec![]);
}

#[test]
fn manual_compaction_emits_completed() {
    let (kernel, done, _) = capture();
    let s = log(3, 2000);
    end_turn(&s);
    let (engine, _) = engine(1_000_000, SUMMARY);
    let engine = engine.with_events(kernel.root().clone());
    let before = engine.measure(&s).0.total_tokens;
    assert_eq!(before, 29 + 12 + 3 * 525);
    let target = CompactionTarget::new(s.clone(), None);
    let r = rt()
        .block_on(engine.compact_now(&target, CancellationToken::new(), Some("cmd-1".into())))
        .unwrap()
        .unwrap();
    assert_eq!(
        *done.lock().unwrap(),
        vec![dsh_compaction::CompactionCompletedPayload {
            session_id: "s".into(),
            scope: None,
            turn: None,
            trigger: dsh_compaction::CompactionCause::Manual,
            compaction_id: Some(r.compaction_id.clone()),
            tokens_before: before,
            tokens_after: 29 + r.message_tokens + 525,
            shadowed_count: 5,
            pruned_count: 0,
        }]
    );
}

/// Trial defect 1: a session past its window (here ~6k tokens of history against a 4000-token
/// window) is still compactable: the summarisation request keeps only the newest items that
/// fit, with a marker for the dropped oldest part, and its `max_tokens` fits what is left.
#[test]
fn a_summarisation_request_past_the_window_drops_the_oldest_part_with_a_marker() {
    let s = log(12, 2000);
    end_turn(&s);
    let (engine, scripted) = engine(4000, SUMMARY);
    let target = CompactionTarget::new(s.clone(), None);
    let r = rt()
        .block_on(engine.compact_now(&target, CancellationToken::new(), None))
        .unwrap()
        .unwrap();
    // The whole span is still shadowed: the oldest part is gone, not kept.
    assert_eq!(r.shadowed_seqs.len(), 23);
    let seen = scripted.seen.lock().unwrap();
    let opts = &seen[0];
    let input = dsh_token_meter::estimate_header(&header())
        + opts
            .messages
            .iter()
            .map(|m| dsh_token_meter::estimate_message(m))
            .sum::<u64>();
    let max_tokens = opts.max_tokens.unwrap();
    assert!(input + max_tokens <= 4000, "{input} + {max_tokens}");
    assert_eq!(
        nested_text(&opts.messages[0]),
        "[11 older history items were dropped here without being summarised: they did not \
         fit the model's context window]"
    );
    // The kept part starts at a balanced boundary: an assistant tool call, not its result.
    assert_eq!(opts.messages[1].role, dsh_llm::Role::Assistant);
    assert_eq!((opts.messages.len(), max_tokens), (14, 556));
}

#[test]
fn fit_to_window_keeps_everything_that_fits_and_caps_the_output() {
    use crate::summarizer::fit_to_window;
    assert_eq!(
        fit_to_window(None, 10, &[5, 5], &[true, true], 8192),
        (0, 8192)
    );
    assert_eq!(
        fit_to_window(Some(16_000), 100, &[1000, 1000], &[true, true], 8192),
        (0, 8192)
    );
    // 8192 of output does not fit beside 10,977 of input: the output shrinks.
    assert_eq!(
        fit_to_window(Some(16_000), 977, &[5000, 5000], &[true, true], 8192),
        (0, 5023)
    );
    // Too much input: the oldest item goes, the cut moves to the next balanced boundary.
    assert_eq!(
        fit_to_window(
            Some(16_000),
            1000,
            &[9000, 3000, 3000, 3000],
            &[true, false, true, true],
            8192
        ),
        (2, 8192)
    );
}
