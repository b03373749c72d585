//! Criterion benchmarks of dsh-session: the append hot path for small events (target
//! ≥ 2 M appends/s) and `derive_messages()` after one append on a 100k-event log (must project
//! only the new node; the returned `Vec` is a copy of `Arc` pointers).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_llm::{Message, MessageId, StreamChunk};
use dsh_session::{
    AssistantChunkData, EventData, EventType, Session, StepData, SurfaceIntent, TurnStartData,
};

fn open(s: &Session) {
    s.append(
        EventType::TURN_START,
        EventData::TurnStart(TurnStartData {
            turn: 1,
            trigger: None,
        }),
        None,
    )
    .expect("turn");
    s.append(
        EventType::STEP_START,
        EventData::StepStart(StepData { turn: 1, step: 1 }),
        None,
    )
    .expect("step");
}

fn chunk(i: u64) -> EventData {
    EventData::AssistantChunk(AssistantChunkData {
        turn: 1,
        step: 1,
        chunk: StreamChunk::TextDelta {
            index: 0,
            text: if i.is_multiple_of(2) {
                "tok".into()
            } else {
                " en".into()
            },
        },
    })
}

fn user(i: u64) -> EventData {
    let mut m = Message::user_text(format!("message {i}"));
    m.id = MessageId::new(format!("m{i}"));
    EventData::UserMessage(Arc::new(m))
}

fn bench_append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append");
    g.throughput(Throughput::Elements(1));
    g.bench_function("assistant_chunk", |b| {
        b.iter_custom(|iters| {
            let s = Session::create("bench", None, None).expect("create");
            open(&s);
            let start = Instant::now();
            for i in 0..iters {
                s.append(EventType::ASSISTANT_CHUNK, chunk(i), None)
                    .expect("append");
            }
            start.elapsed()
        })
    });
    g.bench_function("step_boundary", |b| {
        b.iter_custom(|iters| {
            let s = Session::create("bench", None, None).expect("create");
            open(&s);
            s.append(
                EventType::STEP_END,
                EventData::StepEnd(StepData { turn: 1, step: 1 }),
                None,
            )
            .expect("end");
            let start = Instant::now();
            for i in 0..iters {
                let d = StepData {
                    turn: 1,
                    step: i + 2,
                };
                s.append(EventType::STEP_START, EventData::StepStart(d), None)
                    .expect("start");
            }
            start.elapsed()
        })
    });
    g.finish();
}

fn bench_derive(c: &mut Criterion) {
    // 100k events: 90k chunks + 10k user messages.
    let s = Session::create("bench", None, None).expect("create");
    open(&s);
    let mut n = 0u64;
    while s.len() < 100_000 {
        if n.is_multiple_of(10) {
            s.append(
                EventType::USER_MESSAGE,
                user(n),
                Some(SurfaceIntent::append()),
            )
            .expect("user");
        } else {
            s.append(EventType::ASSISTANT_CHUNK, chunk(n), None)
                .expect("chunk");
        }
        n += 1;
    }
    let _ = s.derive_messages();
    let mut g = c.benchmark_group("derive_100k");
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("append_then_derive_messages", |b| {
        b.iter(|| {
            n += 1;
            s.append(
                EventType::USER_MESSAGE,
                user(n),
                Some(SurfaceIntent::append()),
            )
            .expect("user");
            s.derive_messages().len()
        })
    });
    g.bench_function("append_then_messages_snapshot", |b| {
        b.iter(|| {
            n += 1;
            s.append(
                EventType::USER_MESSAGE,
                user(n),
                Some(SurfaceIntent::append()),
            )
            .expect("user");
            s.messages_snapshot().len()
        })
    });
    g.bench_function("append_then_derived_len", |b| {
        b.iter(|| {
            n += 1;
            s.append(
                EventType::USER_MESSAGE,
                user(n),
                Some(SurfaceIntent::append()),
            )
            .expect("user");
            s.derived_len()
        })
    });
    g.bench_function("append_user_message_only", |b| {
        b.iter(|| {
            n += 1;
            s.append(
                EventType::USER_MESSAGE,
                user(n),
                Some(SurfaceIntent::append()),
            )
            .expect("user")
            .seq
        })
    });
    g.finish();
}

criterion_group!(benches, bench_append, bench_derive);
criterion_main!(benches);
