//! Runtime-context snapshot diffing: exact message texts and sources, the retained-snapshot
//! state machine (log restore, live observation, compaction drop), and conformance with every
//! snapshot message in the upstream session corpus.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use dsh_llm::{ContextSection, Message, MessageSource};
use dsh_session::{EventData, Session, StepData, SurfaceIntent, TurnStartData};
use dsh_system_prompt::*;
use serde_json::{Value, json};

fn sec(name: &str, text: &str) -> ContextSection {
    ContextSection {
        name: name.to_owned(),
        text: text.to_owned(),
    }
}

fn source_json(m: &Message) -> Value {
    serde_json::to_value(&m.source).unwrap()
}

#[test]
fn first_snapshot_text_and_source_are_exact() {
    let current = vec![
        sec("sandbox:policy", "Policy A."),
        sec("approval:policy", "Approval B."),
    ];
    let m = snapshot_message(&RetainedSnapshot::Never, &current).unwrap();
    assert_eq!(m.role, dsh_llm::Role::User);
    assert_eq!(
        m.text(),
        "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\nPolicy A.\n\nApproval B."
    );
    assert_eq!(m.content.len(), 1);
    assert_eq!(
        source_json(&m),
        json!({
            "kind": "plugin",
            "plugin": "@deepseek-ai/dsh-system-prompt",
            "form": "snapshot",
            "sections": [
                {"name": "sandbox:policy", "text": "Policy A."},
                {"name": "approval:policy", "text": "Approval B."}
            ]
        })
    );
}

#[test]
fn unchanged_changed_and_cleared() {
    let a = vec![sec("x", "One.")];
    let text_a = join_context_sections(&a);
    let retained = RetainedSnapshot::Retained {
        seq: 7,
        text: Some(text_a.clone()),
    };
    // Unchanged ⇒ nothing.
    assert_eq!(snapshot_message(&retained, &a), None);
    // Same text from differently named sections is still unchanged (text comparison).
    assert_eq!(snapshot_message(&retained, &[sec("y", "One.")]), None);
    // Changed ⇒ a new snapshot.
    let m = snapshot_message(&retained, &[sec("x", "Two.")]).unwrap();
    assert_eq!(
        m.text(),
        "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\nTwo."
    );
    // Empty after non-empty ⇒ cleared text, plain plugin source (no form / sections).
    let m = snapshot_message(&retained, &[]).unwrap();
    assert_eq!(
        m.text(),
        "Current runtime context: none. Earlier runtime-context snapshots no longer apply."
    );
    assert_eq!(
        source_json(&m),
        json!({"kind": "plugin", "plugin": "@deepseek-ai/dsh-system-prompt"})
    );
    // Empty with no snapshot ever ⇒ nothing.
    assert_eq!(snapshot_message(&RetainedSnapshot::Never, &[]), None);
    // Empty sections only (all texts empty) count as empty.
    assert_eq!(
        snapshot_message(&RetainedSnapshot::Never, &[sec("e", "")]),
        None
    );
    // Empty after a dropped snapshot ⇒ cleared is (re)sent.
    assert_eq!(
        snapshot_message(&RetainedSnapshot::Dropped, &[])
            .unwrap()
            .text(),
        CLEARED_TEXT
    );
    // A retained cleared snapshot and still empty ⇒ nothing.
    let cleared = RetainedSnapshot::Retained {
        seq: 9,
        text: Some(CLEARED_TEXT.to_owned()),
    };
    assert_eq!(snapshot_message(&cleared, &[]), None);
    // Retained with non-text content never equals ⇒ re-sent.
    let odd = RetainedSnapshot::Retained { seq: 3, text: None };
    assert!(snapshot_message(&odd, &a).is_some());
    // Dropped (compacted away) and unchanged ⇒ re-sent.
    assert_eq!(
        snapshot_message(&RetainedSnapshot::Dropped, &a)
            .unwrap()
            .text(),
        text_a
    );
}

fn open_turn(s: &Session) {
    s.append(
        "turn/start",
        EventData::TurnStart(TurnStartData {
            turn: 1,
            trigger: None,
        }),
        None,
    )
    .unwrap();
    s.append(
        "step/start",
        EventData::StepStart(StepData { turn: 1, step: 1 }),
        None,
    )
    .unwrap();
}

fn append_user(s: &Session, m: Message, intent: SurfaceIntent) -> u64 {
    s.append(
        "user/message",
        EventData::UserMessage(Arc::new(m)),
        Some(intent),
    )
    .unwrap()
    .seq
}

#[test]
fn retained_state_from_log_and_observation() {
    let s = Session::create("snap-1", None, None).unwrap();
    assert_eq!(RetainedSnapshot::from_session(&s), RetainedSnapshot::Never);
    open_turn(&s);
    let prompt = append_user(&s, Message::user_text("hello"), SurfaceIntent::append());
    let snap = snapshot_message(&RetainedSnapshot::Never, &[sec("x", "One.")]).unwrap();
    let snap_seq = append_user(&s, snap, SurfaceIntent::append());
    let mut live = RetainedSnapshot::Never;
    for e in s.events() {
        live.observe(&e);
    }
    let expected = RetainedSnapshot::Retained {
        seq: snap_seq,
        text: Some(
            "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\nOne."
                .to_owned(),
        ),
    };
    assert_eq!(live, expected);
    // After a resume the restored state is the same: an unchanged snapshot is not re-sent.
    let restored = RetainedSnapshot::from_session(&s);
    assert_eq!(restored, expected);
    assert_eq!(snapshot_message(&restored, &[sec("x", "One.")]), None);
    // The derived history helper sees the same sections.
    assert_eq!(
        last_snapshot_sections(&s.derive_messages()),
        Some(vec![sec("x", "One.")])
    );

    // A compaction-style replace whose provenance includes the snapshot drops it.
    let summary = Message::user(
        vec![dsh_llm::ContentBlock::text("Summary.")],
        MessageSource::plugin("dsh-compaction"),
    );
    let replace = s
        .append(
            "user/message",
            EventData::UserMessage(Arc::new(summary)),
            Some(SurfaceIntent::replace(
                prompt,
                snap_seq,
                vec![prompt, snap_seq],
            )),
        )
        .unwrap();
    live.observe(&replace);
    assert_eq!(live, RetainedSnapshot::Dropped);
    assert_eq!(
        RetainedSnapshot::from_session(&s),
        RetainedSnapshot::Dropped
    );
    assert_eq!(last_snapshot_sections(&s.derive_messages()), None);
    // The unchanged context is re-sent after the compaction.
    assert!(snapshot_message(&live, &[sec("x", "One.")]).is_some());
}

/// The corpus folder; panics (a failure, not a pass) when missing — these tests are
/// `#[ignore]`d at build time when the corpus is absent and `CI` is unset (see
/// `dsh-shared-corpus`).
fn corpus_dir() -> PathBuf {
    dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "conformance/upstream-sessions")
}

/// Every snapshot `user/message` the upstream harness logged is reproduced byte-for-byte (text
/// and source) from its recorded sections, and consecutive snapshots in one log (with no
/// surface replace between them) always differ — the loop only sends on change.
#[test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
fn upstream_corpus_snapshots_are_reproduced_exactly() {
    let dir = corpus_dir();
    let mut checked = 0;
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut previous: Option<String> = None;
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if v.get("surfaceOp").and_then(|o| o.get("op")).is_some() {
                previous = None;
            }
            if v["type"] != "user/message"
                || v["data"]["source"]["plugin"] != "@deepseek-ai/dsh-system-prompt"
            {
                continue;
            }
            let logged_text = v["data"]["content"][0]["text"].as_str().unwrap().to_owned();
            let sections: Vec<ContextSection> =
                serde_json::from_value(v["data"]["source"]["sections"].clone()).unwrap();
            let retained = match &previous {
                None => RetainedSnapshot::Never,
                Some(t) => RetainedSnapshot::Retained {
                    seq: 0,
                    text: Some(t.clone()),
                },
            };
            let m = snapshot_message(&retained, &sections).unwrap_or_else(|| {
                panic!(
                    "{}: logged snapshot equals the previous one",
                    path.display()
                )
            });
            assert_eq!(m.text(), logged_text, "{}", path.display());
            assert_eq!(source_json(&m), v["data"]["source"], "{}", path.display());
            previous = Some(logged_text);
            checked += 1;
        }
    }
    assert!(checked >= 100, "only {checked} snapshots checked");
}
