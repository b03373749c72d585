//! Property tests: random chunk sequences against a straightforward reference model of the spec
//! algorithm, plus structural invariants.
//! See docs/upstream/llm.md (Block assembler (exact algorithm)).

// Test helpers outside #[test] fns may unwrap too (clippy.toml only covers #[test] bodies).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_llm::{
    BlockAssembler, CallId, ContentBlock, FinishReason, LlmFailure, ReplayEnvelope, StreamChunk,
    TokenUsage,
};
use proptest::prelude::*;
use serde_json::json;

const TYPES: [&str; 4] = ["text", "reasoning", "tool-call", "widget"];
const INDICES: [u32; 6] = [0, 1, 2, 3, 1024, u32::MAX];

fn arb_block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        "[a-c ]{0,3}".prop_map(ContentBlock::text),
        "[a-c ]{0,3}".prop_map(ContentBlock::reasoning),
        ("[xy]", "[nm]{0,1}", "[{}]{0,2}").prop_map(|(i, n, a)| ContentBlock::tool_call(i, n, a)),
        Just(serde_json::from_value(json!({"type":"widget"})).unwrap()),
    ]
}

fn arb_reason() -> impl Strategy<Value = FinishReason> {
    prop_oneof![
        Just(FinishReason::Stop),
        Just(FinishReason::ToolCalls),
        Just(FinishReason::MaxTokens),
        Just(FinishReason::Error {
            failure: LlmFailure::new("SERVER", "x")
        }),
    ]
}

fn arb_chunk() -> impl Strategy<Value = StreamChunk> {
    let idx = proptest::sample::select(INDICES.to_vec());
    prop_oneof![
        (idx.clone(), proptest::sample::select(TYPES.to_vec())).prop_map(|(index, t)| {
            StreamChunk::BlockStart {
                index,
                block_type: t.into(),
            }
        }),
        (idx.clone(), "[a-c \n]{0,3}")
            .prop_map(|(index, text)| StreamChunk::TextDelta { index, text }),
        (idx.clone(), "[a-c \n]{0,3}")
            .prop_map(|(index, text)| StreamChunk::ReasoningDelta { index, text }),
        (
            idx.clone(),
            "[pq]",
            proptest::option::of("[nm]"),
            "[{}:]{0,2}"
        )
            .prop_map(|(index, id, name, args)| StreamChunk::ToolCallDelta {
                index,
                id: CallId::new(id),
                name,
                arguments_delta: args,
            }),
        (idx, arb_block()).prop_map(|(index, block)| StreamChunk::BlockEnd { index, block }),
        (0u64..5).prop_map(|n| StreamChunk::Usage {
            usage: TokenUsage {
                input_tokens: n,
                output_tokens: n,
                ..TokenUsage::default()
            }
        }),
        (
            arb_reason(),
            proptest::option::of(proptest::option::of(0usize..5))
        )
            .prop_map(|(reason, env)| StreamChunk::Finish {
                reason,
                replay_state: env.map(|n| ReplayEnvelope {
                    response: json!("r"),
                    blocks: n.map(|n| (0..n).map(|i| json!(i)).collect()),
                }),
            }),
    ]
}

/// `(index, blockType, text, toolCallId, toolCallName, args, block)`.
type RefPartial = (
    u32,
    String,
    String,
    Option<CallId>,
    Option<String>,
    String,
    Option<ContentBlock>,
);

/// The reference model: a literal transcription of the spec with linear lookups.
#[derive(Default)]
struct Model {
    order: Vec<u32>,
    partials: Vec<RefPartial>,
    usage: Option<TokenUsage>,
    finish: Option<FinishReason>,
    replay: Option<ReplayEnvelope>,
}

impl Model {
    fn ensure(&mut self, index: u32, t: &str) -> usize {
        if let Some(p) = self.partials.iter().position(|p| p.0 == index) {
            return p;
        }
        self.order.push(index);
        self.partials.push((
            index,
            t.to_owned(),
            String::new(),
            None,
            None,
            String::new(),
            None,
        ));
        self.partials.len() - 1
    }
    fn push(&mut self, c: &StreamChunk) {
        match c {
            StreamChunk::BlockStart { index, block_type } => {
                self.ensure(*index, block_type);
            }
            StreamChunk::TextDelta { index, text } => {
                let p = self.ensure(*index, "text");
                if self.partials[p].6.is_none() {
                    self.partials[p].2 += text;
                }
            }
            StreamChunk::ReasoningDelta { index, text } => {
                let p = self.ensure(*index, "reasoning");
                if self.partials[p].6.is_none() {
                    self.partials[p].2 += text;
                }
            }
            StreamChunk::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => {
                let p = self.ensure(*index, "tool-call");
                let part = &mut self.partials[p];
                if part.6.is_none() {
                    part.3 = Some(id.clone());
                    if let Some(n) = name {
                        part.4 = Some(n.clone());
                    }
                    part.5 += arguments_delta;
                }
            }
            StreamChunk::BlockEnd { index, block } => {
                let p = self.ensure(*index, block.type_tag());
                if self.partials[p].6.is_none() {
                    self.partials[p].6 = Some(block.clone());
                }
            }
            StreamChunk::Usage { usage } => self.usage = Some(*usage),
            StreamChunk::Finish {
                reason,
                replay_state,
            } => {
                self.finish = Some(reason.clone());
                self.replay = replay_state.clone();
            }
            StreamChunk::Other(_) => {}
        }
    }
    fn assemble(&self, i: usize) -> Option<ContentBlock> {
        let p = &self.partials[i];
        if let Some(b) = &p.6 {
            return Some(b.clone());
        }
        match p.1.as_str() {
            "text" => Some(ContentBlock::text(p.2.clone())),
            "reasoning" => Some(ContentBlock::reasoning(p.2.clone())),
            "tool-call" => Some(ContentBlock::tool_call(
                p.3.clone().unwrap_or(CallId(format!("call-{}", p.0))),
                p.4.clone().unwrap_or_default(),
                p.5.clone(),
            )),
            _ => None,
        }
    }
    fn blocks_and_replay(&self) -> Option<(Vec<ContentBlock>, Option<ReplayEnvelope>)> {
        let all: Option<Vec<_>> = (0..self.partials.len()).map(|i| self.assemble(i)).collect();
        let all = all?;
        let max = matches!(self.finish, Some(FinishReason::MaxTokens));
        let kept: Vec<bool> = all
            .iter()
            .map(|b| !max || b.type_tag() != "tool-call")
            .collect();
        let blocks: Vec<_> = all
            .iter()
            .zip(&kept)
            .filter(|(_, k)| **k)
            .map(|(b, _)| b.clone())
            .collect();
        let replay = match &self.replay {
            None => None,
            Some(env) => match &env.blocks {
                None => Some(env.clone()),
                Some(e) if e.len() != all.len() => None,
                Some(e) => Some(ReplayEnvelope {
                    response: env.response.clone(),
                    blocks: Some(
                        e.iter()
                            .zip(&kept)
                            .filter(|(_, k)| **k)
                            .map(|(v, _)| v.clone())
                            .collect(),
                    ),
                }),
            },
        };
        Some((blocks, replay))
    }
    fn interrupted(&self) -> Vec<ContentBlock> {
        (0..self.partials.len())
            .filter_map(|i| {
                let p = &self.partials[i];
                let t = p.6.as_ref().map_or(p.1.as_str(), |b| b.type_tag());
                if t != "text" && t != "reasoning" {
                    return None;
                }
                self.assemble(i)
            })
            .filter(|b| b.as_text().is_some_and(|t| !t.trim().is_empty()))
            .collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matches_reference_model(chunks in proptest::collection::vec(arb_chunk(), 0..40)) {
        let mut a = BlockAssembler::new();
        let mut owned = BlockAssembler::new();
        let mut m = Model::default();
        for c in &chunks {
            a.push(c);
            owned.push_owned(c.clone());
            m.push(c);
        }
        prop_assert_eq!(a.usage(), m.usage.as_ref());
        prop_assert_eq!(a.finish(), m.finish.as_ref().unwrap_or(&FinishReason::Stop));
        prop_assert_eq!(a.seen_blocks(), m.order.len());
        match m.blocks_and_replay() {
            None => {
                let err = a.blocks().unwrap_err();
                prop_assert_eq!(err.code(), "INCOMPLETE_BLOCK");
            }
            Some((blocks, replay)) => {
                let got = a.assembled().unwrap();
                prop_assert_eq!(&got.blocks, &blocks);
                prop_assert_eq!(&got.replay_state, &replay);
                prop_assert_eq!(owned.assembled().unwrap(), got);
            }
        }
        prop_assert_eq!(a.interrupted_blocks(), m.interrupted());
    }

    #[test]
    fn structural_invariants(chunks in proptest::collection::vec(arb_chunk(), 0..40)) {
        let mut a = BlockAssembler::new();
        a.extend(&chunks);
        // first-seen order of indices
        let mut order: Vec<u32> = Vec::new();
        for c in &chunks {
            let i = match c {
                StreamChunk::BlockStart { index, .. }
                | StreamChunk::TextDelta { index, .. }
                | StreamChunk::ReasoningDelta { index, .. }
                | StreamChunk::ToolCallDelta { index, .. }
                | StreamChunk::BlockEnd { index, .. } => *index,
                _ => continue,
            };
            if !order.contains(&i) {
                order.push(i);
            }
        }
        prop_assert_eq!(a.seen_blocks(), order.len());
        // interrupted ⊆ text/reasoning, never whitespace-only
        for b in a.interrupted_blocks() {
            let t = b.as_text();
            prop_assert!(t.is_some_and(|t| !t.trim().is_empty()));
        }
        if let Ok(blocks) = a.blocks() {
            let max = matches!(a.finish(), FinishReason::MaxTokens);
            if !max {
                prop_assert_eq!(blocks.len(), order.len());
                // a closed index yields exactly its first block-end
                for (pos, idx) in order.iter().enumerate() {
                    let first_end = chunks.iter().find_map(|c| match c {
                        StreamChunk::BlockEnd { index, block } if index == idx => Some(block),
                        _ => None,
                    });
                    if let Some(b) = first_end {
                        prop_assert_eq!(&blocks[pos], b);
                    }
                }
            } else {
                prop_assert!(blocks.iter().all(|b| b.type_tag() != "tool-call"));
            }
        }
    }
}
