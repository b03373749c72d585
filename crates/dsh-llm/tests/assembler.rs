//! Unit tests for every rule of the `BlockAssembler` algorithm, with exact expected values.
//! See docs/upstream/llm.md (Block assembler (exact algorithm)).

// Test helpers outside #[test] fns may unwrap too (clippy.toml only covers #[test] bodies).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_llm::{
    BlockAssembler, CallId, ContentBlock, FinishReason, LlmFailure, MessageSource, ReplayEnvelope,
    Role, StreamChunk, TokenUsage,
};
use serde_json::json;

fn start(index: u32, t: &str) -> StreamChunk {
    StreamChunk::BlockStart {
        index,
        block_type: t.into(),
    }
}
fn text(index: u32, t: &str) -> StreamChunk {
    StreamChunk::TextDelta {
        index,
        text: t.into(),
    }
}
fn reasoning(index: u32, t: &str) -> StreamChunk {
    StreamChunk::ReasoningDelta {
        index,
        text: t.into(),
    }
}
fn tool(index: u32, id: &str, name: Option<&str>, args: &str) -> StreamChunk {
    StreamChunk::ToolCallDelta {
        index,
        id: CallId::new(id),
        name: name.map(str::to_owned),
        arguments_delta: args.into(),
    }
}
fn end(index: u32, block: ContentBlock) -> StreamChunk {
    StreamChunk::BlockEnd { index, block }
}
fn finish(reason: FinishReason, replay: Option<ReplayEnvelope>) -> StreamChunk {
    StreamChunk::Finish {
        reason,
        replay_state: replay,
    }
}
fn feed(chunks: &[StreamChunk]) -> BlockAssembler {
    let mut a = BlockAssembler::new();
    a.extend(chunks);
    a
}

#[test]
fn empty_assembler_defaults() {
    let a = BlockAssembler::new();
    assert_eq!(a.blocks().unwrap(), Vec::<ContentBlock>::new());
    assert_eq!(a.finish(), &FinishReason::Stop);
    assert!(!a.has_finish());
    assert_eq!(a.usage(), None);
    assert_eq!(a.replay_state().unwrap(), None);
    assert_eq!(a.interrupted_blocks(), Vec::<ContentBlock>::new());
    assert_eq!(a.seen_blocks(), 0);
}

#[test]
fn block_start_creates_and_duplicates_are_ignored() {
    let a = feed(&[
        start(0, "text"),
        text(0, "a"),
        start(0, "reasoning"),
        text(0, "b"),
    ]);
    assert_eq!(a.blocks().unwrap(), vec![ContentBlock::text("ab")]);
    assert_eq!(a.seen_blocks(), 1);
}

#[test]
fn deltas_create_partials_of_their_type_without_block_start() {
    let a = feed(&[reasoning(0, "th"), reasoning(0, "ink"), text(1, "hi")]);
    assert_eq!(
        a.blocks().unwrap(),
        vec![ContentBlock::reasoning("think"), ContentBlock::text("hi")]
    );
}

#[test]
fn deltas_after_close_are_ignored() {
    let a = feed(&[
        text(0, "a"),
        end(0, ContentBlock::text("final")),
        text(0, "zzz"),
        reasoning(0, "zzz"),
        tool(0, "x", Some("y"), "{}"),
    ]);
    assert_eq!(a.blocks().unwrap(), vec![ContentBlock::text("final")]);
}

#[test]
fn first_close_wins() {
    let a = feed(&[
        start(3, "text"),
        end(3, ContentBlock::text("one")),
        end(3, ContentBlock::text("two")),
    ]);
    assert_eq!(a.blocks().unwrap(), vec![ContentBlock::text("one")]);
}

#[test]
fn block_end_for_unseen_index_creates_it_in_order() {
    let a = feed(&[
        text(1, "x"),
        end(0, ContentBlock::tool_call("c", "bash", "{}")),
    ]);
    assert_eq!(
        a.blocks().unwrap(),
        vec![
            ContentBlock::text("x"),
            ContentBlock::tool_call("c", "bash", "{}")
        ]
    );
}

#[test]
fn closed_block_is_returned_verbatim_even_if_type_differs() {
    let a = feed(&[
        start(0, "text"),
        text(0, "abc"),
        end(0, ContentBlock::reasoning("r")),
    ]);
    assert_eq!(a.blocks().unwrap(), vec![ContentBlock::reasoning("r")]);
}

#[test]
fn tool_call_delta_sets_id_name_if_present_and_appends_args() {
    let a = feed(&[
        tool(2, "call_a", Some("bash"), "{\"cmd\""),
        tool(2, "call_b", None, ":\"ls\""),
        tool(2, "call_b", Some("read"), "}"),
    ]);
    assert_eq!(
        a.blocks().unwrap(),
        vec![ContentBlock::tool_call(
            "call_b",
            "read",
            "{\"cmd\":\"ls\"}"
        )]
    );
}

#[test]
fn open_tool_call_without_id_or_name_gets_defaults() {
    let a = feed(&[start(7, "tool-call")]);
    assert_eq!(
        a.blocks().unwrap(),
        vec![ContentBlock::tool_call("call-7", "", "")]
    );
    let b = feed(&[tool(4, "id1", None, "{")]);
    assert_eq!(
        b.blocks().unwrap(),
        vec![ContentBlock::tool_call("id1", "", "{")]
    );
}

#[test]
fn text_delta_on_tool_call_partial_does_not_change_its_assembly() {
    let a = feed(&[
        start(0, "tool-call"),
        text(0, "ignored"),
        tool(0, "c", Some("n"), "1"),
    ]);
    assert_eq!(
        a.blocks().unwrap(),
        vec![ContentBlock::tool_call("c", "n", "1")]
    );
}

#[test]
fn open_unknown_type_is_a_typed_error_closed_unknown_is_fine() {
    let a = feed(&[text(0, "x"), start(1, "widget")]);
    let err = a.blocks().unwrap_err();
    assert_eq!(err.code(), "INCOMPLETE_BLOCK");
    assert_eq!(
        err.to_string(),
        "cannot assemble incomplete block of type \"widget\" at index 1"
    );
    assert_eq!(a.message("p", "m").unwrap_err().code(), "INCOMPLETE_BLOCK");
    // interrupted_blocks never fails and omits it.
    assert_eq!(a.interrupted_blocks(), vec![ContentBlock::text("x")]);

    let widget: ContentBlock = serde_json::from_value(json!({"type":"widget","w":1})).unwrap();
    let b = feed(&[start(1, "widget"), end(1, widget.clone())]);
    assert_eq!(b.blocks().unwrap(), vec![widget]);
}

#[test]
fn blocks_follow_first_seen_order_not_index_order() {
    let a = feed(&[
        text(5, "five"),
        reasoning(2, "two"),
        text(9, "nine"),
        text(2, "!"),
        text(u32::MAX, "max"),
        text(1500, "big"),
    ]);
    assert_eq!(
        a.blocks().unwrap(),
        vec![
            ContentBlock::text("five"),
            ContentBlock::reasoning("two!"),
            ContentBlock::text("nine"),
            ContentBlock::text("max"),
            ContentBlock::text("big"),
        ]
    );
}

#[test]
fn usage_last_wins() {
    let u1 = TokenUsage {
        input_tokens: 1,
        output_tokens: 2,
        ..TokenUsage::default()
    };
    let u2 = TokenUsage {
        input_tokens: 3,
        output_tokens: 4,
        cache_read_tokens: Some(5),
        ..TokenUsage::default()
    };
    let a = feed(&[
        StreamChunk::Usage { usage: u1 },
        StreamChunk::Usage { usage: u2 },
    ]);
    assert_eq!(a.usage(), Some(&u2));
}

#[test]
fn finish_stores_reason_and_replay_state() {
    let env = ReplayEnvelope {
        response: json!({"r":1}),
        blocks: None,
    };
    let a = feed(&[
        text(0, "x"),
        finish(FinishReason::ToolCalls, Some(env.clone())),
    ]);
    assert_eq!(a.finish(), &FinishReason::ToolCalls);
    assert!(a.has_finish());
    assert_eq!(a.replay_state().unwrap(), Some(env));
    let failure = LlmFailure::new("AUTH", "bad key");
    let b = feed(&[finish(
        FinishReason::Error {
            failure: failure.clone(),
        },
        None,
    )]);
    assert_eq!(b.finish(), &FinishReason::Error { failure });
}

#[test]
fn max_tokens_drops_every_tool_call_block() {
    let a = feed(&[
        reasoning(0, "r"),
        end(1, ContentBlock::tool_call("c1", "bash", "{}")),
        text(2, "t"),
        tool(3, "c2", Some("read"), "{\"pa"),
        finish(FinishReason::MaxTokens, None),
    ]);
    assert_eq!(
        a.blocks().unwrap(),
        vec![ContentBlock::reasoning("r"), ContentBlock::text("t")]
    );
    assert_eq!(a.seen_blocks(), 4);
}

#[test]
fn replay_state_rules() {
    let chunks = |reason: FinishReason, entries: Option<Vec<serde_json::Value>>| {
        vec![
            text(0, "a"),
            tool(1, "c", Some("n"), "{}"),
            text(2, "b"),
            finish(
                reason,
                Some(ReplayEnvelope {
                    response: json!("resp"),
                    blocks: entries,
                }),
            ),
        ]
    };
    // no `blocks` ⇒ unchanged (even under max-tokens)
    let a = feed(&chunks(FinishReason::MaxTokens, None));
    assert_eq!(
        a.replay_state().unwrap(),
        Some(ReplayEnvelope {
            response: json!("resp"),
            blocks: None
        })
    );
    // length mismatch ⇒ None
    let a = feed(&chunks(FinishReason::Stop, Some(vec![json!(0), json!(1)])));
    assert_eq!(a.replay_state().unwrap(), None);
    // aligned, nothing dropped ⇒ unchanged
    let aligned = vec![json!("e0"), json!("e1"), json!("e2")];
    let a = feed(&chunks(FinishReason::ToolCalls, Some(aligned.clone())));
    assert_eq!(
        a.replay_state().unwrap(),
        Some(ReplayEnvelope {
            response: json!("resp"),
            blocks: Some(aligned.clone())
        })
    );
    // aligned, max-tokens ⇒ pruned at the dropped positions
    let a = feed(&chunks(FinishReason::MaxTokens, Some(aligned)));
    assert_eq!(
        a.replay_state().unwrap(),
        Some(ReplayEnvelope {
            response: json!("resp"),
            blocks: Some(vec![json!("e0"), json!("e2")])
        })
    );
    // the mismatch check counts blocks before dropping
    let a = feed(&chunks(
        FinishReason::MaxTokens,
        Some(vec![json!(0), json!(2)]),
    ));
    assert_eq!(a.replay_state().unwrap(), None);
}

#[test]
fn interrupted_blocks_keep_only_non_whitespace_text_and_reasoning() {
    let a = feed(&[
        reasoning(0, "plan"),
        text(1, " \n\t\u{00A0}\u{FEFF}\u{3000}"),
        tool(2, "c", Some("bash"), "{}"),
        text(3, "partial"),
        end(4, ContentBlock::text("closed")),
        end(5, ContentBlock::tool_call("d", "x", "{}")),
        start(6, "widget"),
        text(7, "\u{0085}"),
        end(8, ContentBlock::reasoning("   ")),
    ]);
    assert_eq!(
        a.interrupted_blocks(),
        vec![
            ContentBlock::reasoning("plan"),
            ContentBlock::text("partial"),
            ContentBlock::text("closed"),
            // U+0085 is not whitespace for JavaScript's trim.
            ContentBlock::text("\u{0085}"),
        ]
    );
}

#[test]
fn message_is_an_assistant_message_with_model_source_and_replay() {
    let a = feed(&[
        text(0, "hi"),
        tool(1, "c", Some("n"), "{}"),
        finish(
            FinishReason::MaxTokens,
            Some(ReplayEnvelope {
                response: json!({"id":"r"}),
                blocks: Some(vec![json!(1), json!(2)]),
            }),
        ),
    ]);
    let m = a.message("deepseek", "deepseek-v4").unwrap();
    assert_eq!(m.role, Role::Assistant);
    assert_eq!(m.content, vec![ContentBlock::text("hi")]);
    assert_eq!(
        serde_json::to_value(&m.source).unwrap(),
        json!({"kind":"model","provider":"deepseek","model":"deepseek-v4","replayState":{"response":{"id":"r"},"blocks":[1]}})
    );
    let m2 = a
        .message_with_source(MessageSource::plugin("dsh-llm/assembler"))
        .unwrap();
    assert_eq!(m2.role, Role::Assistant);
    assert_eq!(m2.content, vec![ContentBlock::text("hi")]);
    assert_eq!(m2.source, MessageSource::plugin("dsh-llm/assembler"));
    assert_ne!(m.id, m2.id);
    // Without replay state the source has none.
    let b = feed(&[text(0, "x")]);
    assert_eq!(
        serde_json::to_value(&b.message("p", "m").unwrap().source).unwrap(),
        json!({"kind":"model","provider":"p","model":"m"})
    );
}

#[test]
fn push_owned_matches_push() {
    let chunks = vec![
        start(0, "reasoning"),
        reasoning(0, "r"),
        end(0, ContentBlock::reasoning("R")),
        end(0, ContentBlock::reasoning("R2")),
        tool(1, "c", Some("n"), "{"),
        StreamChunk::Usage {
            usage: TokenUsage::default(),
        },
        finish(FinishReason::ToolCalls, None),
    ];
    let a = feed(&chunks);
    let mut b = BlockAssembler::new();
    for c in chunks {
        b.push_owned(c);
    }
    assert_eq!(a.assembled().unwrap(), b.assembled().unwrap());
    assert_eq!(a.finish(), b.finish());
    assert_eq!(a.usage(), b.usage());
}

#[test]
fn unknown_chunk_types_are_ignored() {
    let other: StreamChunk = serde_json::from_value(json!({"type":"mystery","index":0})).unwrap();
    let a = feed(&[other, text(0, "x")]);
    assert_eq!(a.blocks().unwrap(), vec![ContentBlock::text("x")]);
}

#[test]
fn open_block_is_true_only_for_an_open_block_its_chunks_already_assemble_to() {
    let mut a = BlockAssembler::new();
    assert!(!a.open_block_is(0, &ContentBlock::text("")), "unseen index");
    a.push(&start(0, "text"));
    assert!(a.open_block_is(0, &ContentBlock::text("")));
    a.push(&text(0, "Hel"));
    a.push(&text(0, "lo"));
    assert!(a.open_block_is(0, &ContentBlock::text("Hello")));
    assert!(!a.open_block_is(0, &ContentBlock::text("Hell")));
    assert!(
        !a.open_block_is(0, &ContentBlock::reasoning("Hello")),
        "other type"
    );
    a.push(&StreamChunk::ToolCallDelta {
        index: 1,
        id: CallId::new("c1"),
        name: Some("bash".into()),
        arguments_delta: "{\"a\":".into(),
    });
    a.push(&StreamChunk::ToolCallDelta {
        index: 1,
        id: CallId::new("c1"),
        name: None,
        arguments_delta: "1}".into(),
    });
    assert!(a.open_block_is(1, &ContentBlock::tool_call("c1", "bash", "{\"a\":1}")));
    assert!(!a.open_block_is(1, &ContentBlock::tool_call("c2", "bash", "{\"a\":1}")));
    assert!(!a.open_block_is(1, &ContentBlock::tool_call("c1", "read", "{\"a\":1}")));
    // Once closed, no block-end is redundant any more.
    a.push(&StreamChunk::BlockEnd {
        index: 0,
        block: ContentBlock::text("Hello"),
    });
    assert!(!a.open_block_is(0, &ContentBlock::text("Hello")));
    // An open block of a type deltas cannot build.
    a.push(&start(2, "image"));
    assert!(!a.open_block_is(2, &ContentBlock::text("")));
}
