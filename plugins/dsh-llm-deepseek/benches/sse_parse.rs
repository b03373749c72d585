//! Criterion benchmark: SSE bytes → `StreamChunk`s through the adapter's in-process parser
//! (`translate_sse_bytes`: sse-stream decoding + chunk translation, no network). Throughput is
//! reported in elements = chunks produced. Target: ≥ 1 M chunks/s.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_llm_deepseek::{StreamTranslator, translate_sse_bytes};

/// A wire fixture from the reference corpus (`shared/fixtures/wire/`, found like the tests find
/// it; see `dsh-shared-corpus`). Panics, naming the searched places, when it is absent.
fn fixture(name: &str) -> Vec<u8> {
    let path = dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "fixtures/wire").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A long synthetic DeepSeek thinking + text stream: `n` reasoning frames, `n` text frames.
fn synthetic(n: usize) -> Vec<u8> {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!("data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-v4-pro\",\"system_fingerprint\":\"fp\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":null,\"reasoning_content\":\"tok{i} \"}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null}}\n\n"));
    }
    for i in 0..n {
        s.push_str(&format!("data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-v4-pro\",\"system_fingerprint\":\"fp\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"word{i} \",\"reasoning_content\":null}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null}}\n\n"));
    }
    s.push_str("data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15,\"prompt_cache_hit_tokens\":0,\"prompt_cache_miss_tokens\":10}}\n\ndata: [DONE]\n\n");
    s.into_bytes()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sse_to_chunks");
    let inputs = [
        ("synthetic_4000_frames", synthetic(2000), 16 * 1024),
        (
            "ds_v4_stream_thinking_tool_call",
            fixture("ds_v4_stream_thinking_tool_call.sse"),
            16 * 1024,
        ),
        (
            "ds_v4_stream_tool_calls_parallel",
            fixture("ds_v4_stream_tool_calls_parallel.sse"),
            16 * 1024,
        ),
    ];
    for (name, body, read) in inputs {
        let chunks = translate_sse_bytes(&body, read).len() as u64;
        g.throughput(Throughput::Elements(chunks));
        g.bench_function(name, |b| b.iter(|| translate_sse_bytes(&body, read)));
    }
    g.finish();

    // the chunk translator alone (SSE framing already done): where the time goes
    let mut g = c.benchmark_group("translator_only");
    let body = String::from_utf8(synthetic(2000)).unwrap_or_default();
    let payloads: Vec<&str> = body
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .collect();
    let run = |payloads: &[&str]| {
        let mut tr = StreamTranslator::new();
        let mut out = Vec::with_capacity(payloads.len() + 8);
        for p in payloads {
            tr.push_data(p, &mut out);
        }
        tr.finish_eof(&mut out);
        out
    };
    g.throughput(Throughput::Elements(run(&payloads).len() as u64));
    g.bench_function("synthetic_4000_frames", |b| b.iter(|| run(&payloads)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
