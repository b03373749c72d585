//! Appends N small `assistant/chunk` events (N = first argument, default 2 000 000) and reports
//! the wall time per append on stderr. Used with `perf stat -e task-clock` to measure the append
//! cost independently of machine load (criterion's wall-clock numbers are noisy on shared CI).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use dsh_llm::StreamChunk;
use dsh_session::{AssistantChunkData, EventData, EventType, Session, StepData, TurnStartData};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let s = Session::create("loop", None, None).expect("create");
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
    let start = Instant::now();
    for i in 0..n {
        let chunk = StreamChunk::TextDelta {
            index: 0,
            text: if i.is_multiple_of(2) {
                "tok".into()
            } else {
                " en".into()
            },
        };
        s.append(
            EventType::ASSISTANT_CHUNK,
            EventData::AssistantChunk(AssistantChunkData {
                turn: 1,
                step: 1,
                chunk,
            }),
            None,
        )
        .expect("append");
    }
    let el = start.elapsed();
    eprintln!(
        "{n} appends in {el:?}: {:?}/append (wall clock), log length {}",
        el / u32::try_from(n).unwrap_or(u32::MAX),
        s.len()
    );
}
