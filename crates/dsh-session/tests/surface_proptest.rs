//! Property test: for random sequences of appends and replaces (valid and invalid),
//! `derive_messages()` always equals a naive fold of `derive_event_message` over
//! `fold_surface(events)`, the live surface equals the folded one, and a rejected operation
//! leaves the log unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_llm::{ContentBlock, Message, MessageId};
use dsh_session::{
    AssistantMessageData, EventData, EventType, Session, StepData, SurfaceIntent, TurnStartData,
    derive_event_message, fold_surface,
};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Op {
    User,
    Assistant {
        empty: bool,
    },
    LogOnly,
    /// Replace positions (a % len)..=(b % len) (ordered), with a user or assistant node.
    Replace {
        a: usize,
        b: usize,
        assistant: bool,
        drop_one: bool,
    },
    /// Replace with arbitrary (likely invalid) seqs.
    BadReplace {
        start: u64,
        end: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::User),
        3 => any::<bool>().prop_map(|empty| Op::Assistant { empty }),
        1 => Just(Op::LogOnly),
        2 => (any::<usize>(), any::<usize>(), any::<bool>(), prop::bool::weighted(0.2))
            .prop_map(|(a, b, assistant, drop_one)| Op::Replace { a, b, assistant, drop_one }),
        1 => (0u64..40, 0u64..40).prop_map(|(start, end)| Op::BadReplace { start, end }),
    ]
}

fn user(n: usize) -> EventData {
    let mut m = Message::user_text(format!("u{n}"));
    m.id = MessageId::new(format!("u{n}"));
    EventData::UserMessage(Arc::new(m))
}

fn assistant(n: usize, empty: bool) -> EventData {
    let content = if empty {
        vec![]
    } else {
        vec![ContentBlock::text(format!("a{n}"))]
    };
    let mut m = Message::assistant(content, "p", "m", None);
    m.id = MessageId::new(format!("a{n}"));
    EventData::AssistantMessage(AssistantMessageData {
        turn: 1,
        step: 1,
        message: Arc::new(m),
        usage: None,
        interrupted: None,
    })
}

fn naive(s: &Session) -> Vec<Arc<Message>> {
    let events = s.events();
    let fold = fold_surface(&events).expect("fold");
    assert_eq!(fold.nodes, s.surface().nodes);
    fold.nodes
        .iter()
        .filter_map(|seq| derive_event_message(&events[*seq as usize]))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn derive_messages_matches_naive_fold(ops in prop::collection::vec(op(), 1..60)) {
        let s = Session::create("p", None, None).expect("create");
        s.append(EventType::TURN_START, EventData::TurnStart(TurnStartData { turn: 1, trigger: None }), None).expect("turn");
        s.append(EventType::STEP_START, EventData::StepStart(StepData { turn: 1, step: 1 }), None).expect("step");
        for (n, op) in ops.into_iter().enumerate() {
            let before = s.len();
            let result = match op {
                Op::User => s.append(EventType::USER_MESSAGE, user(n), Some(SurfaceIntent::append())).map(|_| ()),
                Op::Assistant { empty } => s.append(EventType::ASSISTANT_MESSAGE, assistant(n, empty), Some(SurfaceIntent::append())).map(|_| ()),
                Op::LogOnly => s.append_value("session/title", json!({"title": n}), None, false).map(|_| ()),
                Op::Replace { a, b, assistant: asst, drop_one } => {
                    let nodes = s.surface().nodes;
                    if nodes.is_empty() {
                        continue;
                    }
                    let (i, j) = (a % nodes.len(), b % nodes.len());
                    let (lo, hi) = (i.min(j), i.max(j));
                    let mut src: Vec<u64> = nodes[lo..=hi].to_vec();
                    let must_fail = drop_one;
                    if drop_one {
                        src.pop();
                    }
                    let data = if asst { assistant(n, false) } else { user(n) };
                    let kind = if asst { EventType::ASSISTANT_MESSAGE } else { EventType::USER_MESSAGE };
                    let intent = if src.is_empty() && !asst {
                        SurfaceIntent { surface_op: dsh_session::SurfaceOp::Replace { start: nodes[lo], end: nodes[hi] }, source_event_seqs: None }
                    } else {
                        SurfaceIntent::replace(nodes[lo], nodes[hi], src)
                    };
                    let r = s.append(kind, data, Some(intent)).map(|_| ());
                    prop_assert_eq!(r.is_err(), must_fail);
                    r
                }
                Op::BadReplace { start, end } => s.append(EventType::USER_MESSAGE, user(n), Some(SurfaceIntent::replace(start, end, vec![]))).map(|_| ()),
            };
            if result.is_err() {
                prop_assert_eq!(s.len(), before);
            } else {
                prop_assert_eq!(s.len(), before + 1);
            }
            let expected = naive(&s);
            prop_assert_eq!(&s.derive_messages(), &expected);
            let snapshot = s.messages_snapshot();
            prop_assert_eq!(snapshot.as_ref(), &expected);
        }
    }
}
