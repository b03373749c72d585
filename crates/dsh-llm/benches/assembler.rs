//! Throughput of [`dsh_llm::BlockAssembler::push`] over a realistic chunk mix (reasoning, text and
//! tool-call deltas with block starts/ends, usage and finish). Target: ≥ 5 M chunks/s.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_llm::{BlockAssembler, CallId, ContentBlock, FinishReason, StreamChunk, TokenUsage};

fn chunks() -> Vec<StreamChunk> {
    let mut v = Vec::new();
    v.push(StreamChunk::BlockStart {
        index: 0,
        block_type: "reasoning".into(),
    });
    for i in 0..4000 {
        v.push(StreamChunk::ReasoningDelta {
            index: 0,
            text: format!("think{} ", i % 10),
        });
    }
    v.push(StreamChunk::BlockEnd {
        index: 0,
        block: ContentBlock::reasoning("…"),
    });
    for i in 0..4000 {
        v.push(StreamChunk::TextDelta {
            index: 1,
            text: format!("word{} ", i % 10),
        });
    }
    for call in 0..4u32 {
        let index = 2 + call;
        for i in 0..500 {
            v.push(StreamChunk::ToolCallDelta {
                index,
                id: CallId::new(format!("call_0{call}")),
                name: (i == 0).then(|| "bash".to_owned()),
                arguments_delta: "{\"a\":1".to_owned(),
            });
        }
    }
    v.push(StreamChunk::Usage {
        usage: TokenUsage {
            input_tokens: 10,
            output_tokens: 20,
            ..TokenUsage::default()
        },
    });
    v.push(StreamChunk::Finish {
        reason: FinishReason::ToolCalls,
        replay_state: None,
    });
    v
}

fn bench(c: &mut Criterion) {
    let input = chunks();
    let mut g = c.benchmark_group("assembler");
    g.throughput(Throughput::Elements(input.len() as u64));
    g.bench_function("push", |b| {
        b.iter(|| {
            let mut a = BlockAssembler::new();
            for ch in &input {
                a.push(black_box(ch));
            }
            black_box(a.seen_blocks())
        })
    });
    g.bench_function("push_and_blocks", |b| {
        b.iter(|| {
            let mut a = BlockAssembler::new();
            for ch in &input {
                a.push(black_box(ch));
            }
            black_box(a.blocks().map(|b| b.len()).unwrap_or(0))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
