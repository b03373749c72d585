//! Write coordinator: fixed batching window (not reset by later events), flush drains, background
//! failure retained and retried, cursor after resume; kernel wiring (`session/event`,
//! `session/flush`) and the `llm/stream` checkpoint (fail-closed). Time is paused (virtual), so no
//! assertion depends on wall-clock speed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
#[path = "../crates/dsh-persistence/tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Script;
use dsh_persistence::{
    LoadedSession, PersistenceError, Result, SessionHeader, SessionPersistence, SessionSnapshot,
    WriteCoordinator,
};
use dsh_persistence_jsonl::JsonlConfig;
use dsh_session::SessionEvent;

#[derive(Default)]
struct Mock {
    batches: Mutex<Vec<Vec<u64>>>,
    fail: AtomicBool,
}

impl SessionPersistence for Mock {
    fn name(&self) -> &'static str {
        "mock"
    }
    fn locate(&self, _: &SessionHeader) -> Option<dsh_persistence::SessionLocation> {
        None
    }
    fn create(&self, _: SessionHeader) -> Result<()> {
        Ok(())
    }
    fn append(&self, id: &str, events: &[Arc<SessionEvent>]) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(PersistenceError::Backend {
                backend: "mock",
                detail: format!("disk full ({id})"),
            });
        }
        self.batches
            .lock()
            .unwrap()
            .push(events.iter().map(|e| e.seq).collect());
        Ok(())
    }
    fn load(&self, id: &str) -> Result<LoadedSession> {
        Err(PersistenceError::NotFound { id: id.into() })
    }
    fn inspect(&self, id: &str) -> Result<LoadedSession> {
        self.load(id)
    }
    fn read_from(&self, id: &str, _: u64) -> Result<Vec<SessionEvent>> {
        Err(PersistenceError::NotFound { id: id.into() })
    }
    fn list_snapshots(&self) -> Result<Vec<SessionSnapshot>> {
        Ok(vec![])
    }
    fn release(&self, _: &str) {}
}

fn events(n: usize) -> Vec<Arc<SessionEvent>> {
    let mut s = Script::default();
    s.full_turn(1);
    s.events.truncate(n);
    s.events
}

/// Waits (without advancing virtual time) until `f` holds; panics after a generous bound.
async fn until(mut f: impl FnMut() -> bool) {
    for _ in 0..20_000 {
        if f() {
            return;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("condition not reached (did not hang guard)");
}

fn setup() -> (Arc<Mock>, WriteCoordinator, SessionHeader) {
    let mock = Arc::new(Mock::default());
    let coord = WriteCoordinator::new(mock.clone(), Duration::from_millis(200));
    (mock, coord, SessionHeader::new("s", 1))
}

#[tokio::test(start_paused = true)]
async fn window_is_fixed_and_not_reset_by_later_events() {
    let (mock, coord, h) = setup();
    let ev = events(6);
    coord.admit(&h, &ev[0]);
    tokio::time::advance(Duration::from_millis(150)).await;
    coord.admit(&h, &ev[1]);
    tokio::time::advance(Duration::from_millis(49)).await;
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert!(mock.batches.lock().unwrap().is_empty());
    // 200 ms after the FIRST event (not 200 ms after the second) the batch is written.
    tokio::time::advance(Duration::from_millis(1)).await;
    until(|| coord.cursor("s") == Some((2, 0))).await;
    assert_eq!(*mock.batches.lock().unwrap(), vec![vec![0, 1]]);
    // The next event starts its own window.
    coord.admit(&h, &ev[2]);
    tokio::time::advance(Duration::from_millis(199)).await;
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert_eq!(mock.batches.lock().unwrap().len(), 1);
    tokio::time::advance(Duration::from_millis(1)).await;
    until(|| mock.batches.lock().unwrap().len() == 2).await;
    assert_eq!(mock.batches.lock().unwrap()[1], vec![2]);
}

#[tokio::test(start_paused = true)]
async fn flush_drains_and_surfaces_failure_then_retries() {
    let (mock, coord, h) = setup();
    let ev = events(5);
    for e in &ev[..3] {
        coord.admit(&h, e);
    }
    mock.fail.store(true, Ordering::SeqCst);
    let e = coord.flush("s").await.unwrap_err();
    assert_eq!(e.code(), "SESSION_PERSISTENCE_BACKEND");
    assert_eq!(
        coord.retained_failure("s").unwrap().code(),
        "SESSION_PERSISTENCE_BACKEND"
    );
    assert_eq!(coord.cursor("s"), Some((0, 3)));
    coord.admit(&h, &ev[3]);
    mock.fail.store(false, Ordering::SeqCst);
    coord.flush("s").await.unwrap();
    assert_eq!(*mock.batches.lock().unwrap(), vec![vec![0, 1, 2, 3]]);
    assert!(coord.retained_failure("s").is_none());
    assert_eq!(coord.cursor("s"), Some((4, 0)));
    // Flushing an idle or unknown session is a no-op.
    coord.flush("s").await.unwrap();
    coord.flush("other").await.unwrap();
    assert_eq!(mock.batches.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn background_failure_pauses_retry_until_new_event() {
    let (mock, coord, h) = setup();
    let ev = events(3);
    mock.fail.store(true, Ordering::SeqCst);
    coord.admit(&h, &ev[0]);
    tokio::time::advance(Duration::from_millis(200)).await;
    until(|| coord.retained_failure("s").is_some()).await;
    mock.fail.store(false, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(5)).await;
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert!(mock.batches.lock().unwrap().is_empty());
    assert_eq!(coord.cursor("s"), Some((0, 1)));
    coord.admit(&h, &ev[1]);
    tokio::time::advance(Duration::from_millis(200)).await;
    until(|| coord.cursor("s") == Some((2, 0))).await;
    assert_eq!(*mock.batches.lock().unwrap(), vec![vec![0, 1]]);
    assert!(coord.retained_failure("s").is_none());
}

#[tokio::test(start_paused = true)]
async fn cursor_skips_restored_events() {
    let (mock, coord, h) = setup();
    let mut s = Script::default();
    s.full_turn(1);
    coord.attach_restored(&h, 5);
    coord.admit(&h, &s.events[3]);
    coord.admit(&h, &s.events[5]);
    coord.admit(&h, &s.events[5]);
    coord.admit(&h, &s.events[6]);
    coord.flush("s").await.unwrap();
    assert_eq!(*mock.batches.lock().unwrap(), vec![vec![5, 6]]);
    coord.close().await.unwrap();
    coord.admit(&h, &s.events[7]);
    assert_eq!(coord.cursor("s"), Some((7, 0)));
}

// ---- kernel wiring ----

/// A kernel booted with every linked plugin and the JSONL backend at `dir` (1 h batching window,
/// so only flushes write).
async fn booted(
    dir: &std::path::Path,
) -> (dsh_kernel::Kernel, Arc<dsh_persistence::PersistenceService>) {
    use dsh_persistence_jsonl as _;
    use dsh_session as _;
    let kernel = dsh_kernel::Kernel::new();
    kernel
        .root()
        .provide(Arc::new(dsh_kernel::Settings::new().with_section(
            "dsh-persistence",
            serde_json::json!({"dir": dir, "write_batch_ms": 3_600_000}),
        )))
        .unwrap()
        .detach();
    let report = kernel.boot().await.unwrap();
    for id in ["dsh-session", "dsh-persistence", "dsh-persistence-jsonl"] {
        assert!(report.applied.contains(&id), "{:?}", report.applied);
    }
    let service = kernel
        .root()
        .require::<dsh_persistence::PersistenceService>()
        .unwrap();
    assert!(service.resolve().unwrap());
    (kernel, service)
}

#[tokio::test]
async fn kernel_session_events_are_persisted_and_flush_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (kernel, service) = booted(dir.path()).await;
    let backend = service.backend().unwrap();
    let store = kernel
        .root()
        .require::<dsh_session::SessionStore>()
        .unwrap();
    let mut meta = SessionHeader::new("k1", 5);
    meta.cwd = Some("/work/k".into());
    let session = store
        .create(
            Some("k1".into()),
            dsh_session::CreateOptions {
                meta: Some(meta),
                ..Default::default()
            },
        )
        .unwrap();
    session
        .append_value("turn/start", serde_json::json!({"turn": 1}), None, false)
        .unwrap();
    session
        .append_value(
            "turn/end",
            serde_json::json!({"turn": 1, "reason": {"kind": "completed"}}),
            None,
            false,
        )
        .unwrap();
    // Window is 1 h: nothing durable before the flush.
    assert_eq!(backend.list().unwrap(), vec![]);
    assert!(store.flush(&session).await.unwrap());
    let loaded = backend.inspect("k1").unwrap();
    assert_eq!(loaded.events.len(), 2);
    assert_eq!(loaded.header.cwd.as_deref(), Some("/work/k"));
    assert_eq!(service.coordinator().unwrap().cursor("k1"), Some((2, 0)));

    // llm/stream checkpoint: the terminal (adapter) runs only after the buffered event is durable.
    session
        .append_value("turn/start", serde_json::json!({"turn": 2}), None, false)
        .unwrap();
    let mut opts = dsh_llm::GenerateOptions::new(
        &dsh_llm::LlmCallConfig {
            provider: "p".into(),
            model: "m".into(),
            ..serde_json::from_value(serde_json::json!({"provider":"p","model":"m"})).unwrap()
        },
        vec![],
    );
    opts.session_id = Some("k1".into());
    let b2 = backend.clone();
    let seen = Arc::new(Mutex::new(None));
    let seen2 = seen.clone();
    let _stream = kernel
        .root()
        .waterfall::<dsh_llm::LlmStream, _, _>(opts, move |_opts| async move {
            *seen2.lock().unwrap() = Some(b2.inspect("k1").unwrap().events.len() - 1);
            futures::stream::empty().boxed()
        })
        .await;
    // 3 events were durable when the adapter ran (inspect adds 1 in-memory closer for turn 2).
    assert_eq!(*seen.lock().unwrap(), Some(3));
    kernel.dispose().await;
}

use futures::StreamExt;

#[tokio::test]
async fn llm_stream_checkpoint_is_fail_closed() {
    let kernel = dsh_kernel::Kernel::new();
    let ctx = kernel.root().child("p").unwrap();
    let mock = Arc::new(Mock::default());
    mock.fail.store(true, Ordering::SeqCst);
    let service = dsh_persistence::install(&ctx, mock.clone(), Duration::from_secs(3600)).unwrap();
    let h = SessionHeader::new("s", 1);
    service.coordinator().unwrap().admit(&h, &events(1)[0]);
    let mut opts = dsh_llm::GenerateOptions::new(
        &serde_json::from_value(serde_json::json!({"provider":"p","model":"m"})).unwrap(),
        vec![],
    );
    opts.session_id = Some("s".into());
    let ran = Arc::new(AtomicBool::new(false));
    let ran2 = ran.clone();
    let stream = kernel
        .root()
        .waterfall::<dsh_llm::LlmStream, _, _>(opts, move |_| async move {
            ran2.store(true, Ordering::SeqCst);
            futures::stream::empty().boxed()
        })
        .await;
    let items: Vec<_> = stream.collect().await;
    assert!(
        !ran.load(Ordering::SeqCst),
        "adapter must not run after a failed checkpoint"
    );
    assert_eq!(items.len(), 1);
    let failure = items.into_iter().next().unwrap().unwrap_err();
    assert_eq!(
        failure.code,
        dsh_persistence::checkpoint::SESSION_FLUSH_FAILED
    );
    assert_eq!(service.coordinator().unwrap().cursor("s"), Some((0, 1)));
    kernel.dispose().await;
}

#[tokio::test]
async fn resume_rebuilds_session_and_continues_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let backend = dsh_persistence_jsonl::jsonl_persistence(JsonlConfig {
        root: dir.path().to_path_buf(),
        pack_chunks: true,
        compression: Default::default(),
    });
    // A crashed session: turn 2 open with a logged, unanswered call.
    let mut s = Script::default();
    s.full_turn(1);
    s.turn_start(2);
    s.user("again");
    s.step_start(2, 1);
    s.assistant(2, 1, "x", &["c9"]);
    s.tool_call(2, 1, "c9");
    let mut h = SessionHeader::new("r1", 1);
    h.cwd = Some("/work/r".into());
    backend.create(h.clone()).unwrap();
    backend.append("r1", &s.events).unwrap();
    backend.release("r1");

    let kernel = dsh_kernel::Kernel::new();
    let ctx = kernel.root().child("p").unwrap();
    let fresh = dsh_persistence_jsonl::jsonl_persistence(JsonlConfig {
        root: dir.path().to_path_buf(),
        pack_chunks: true,
        compression: Default::default(),
    });
    let service = dsh_persistence::install(&ctx, fresh.clone(), Duration::from_secs(3600)).unwrap();
    let loaded = service.resume("r1").await.unwrap();
    assert_eq!(loaded.repair.closers, 3);
    let n = loaded.events.len() as u64;
    let session = dsh_session::Session::from_restore(
        "r1",
        loaded.events.clone(),
        Some(loaded.header.clone()),
    )
    .unwrap();
    assert_eq!(session.seq(), n);
    assert_eq!(session.open_turn(), None);
    // The restored events are below the cursor: re-admitting them writes nothing.
    for e in session.events() {
        service.coordinator().unwrap().admit(&loaded.header, &e);
    }
    assert_eq!(service.coordinator().unwrap().cursor("r1"), Some((n, 0)));
    let next = session
        .append_value("turn/start", serde_json::json!({"turn": 3}), None, false)
        .unwrap();
    service.coordinator().unwrap().admit(&loaded.header, &next);
    service.flush("r1").await.unwrap();
    let reread = dsh_persistence_jsonl::jsonl_persistence(JsonlConfig {
        root: dir.path().to_path_buf(),
        pack_chunks: true,
        compression: Default::default(),
    })
    .read_from("r1", 0)
    .unwrap();
    assert_eq!(reread.len() as u64, n + 1);
    assert_eq!(reread.last().unwrap().seq, n);
    kernel.dispose().await;
}

#[tokio::test]
async fn seeded_session_persists_its_seed() {
    let dir = tempfile::tempdir().unwrap();
    let (kernel, service) = booted(dir.path()).await;
    let backend = service.backend().unwrap();
    let store = kernel
        .root()
        .require::<dsh_session::SessionStore>()
        .unwrap();
    let mut seed = Script::default();
    seed.turn_start(1);
    seed.turn_end(1);
    let session = store
        .create(
            Some("fork1".into()),
            dsh_session::CreateOptions {
                seed: Some(common::to_plain(&seed.events)),
                ..Default::default()
            },
        )
        .unwrap();
    session
        .append_value("turn/start", serde_json::json!({"turn": 2}), None, false)
        .unwrap();
    assert!(store.flush(&session).await.unwrap());
    let stored = backend.read_from("fork1", 0).unwrap();
    let kinds: Vec<String> = stored.iter().map(|e| e.kind.to_string()).collect();
    assert_eq!(
        kinds,
        vec!["turn/start", "turn/end", "session/end-seed", "turn/start"]
    );
    assert_eq!(
        service
            .coordinator()
            .unwrap()
            .retained_failure("fork1")
            .map(|e| e.code()),
        None
    );
    kernel.dispose().await;
}

#[tokio::test]
async fn tool_body_runs_only_after_its_call_is_durable_and_fails_closed() {
    let kernel = dsh_kernel::Kernel::new();
    let ctx = kernel.root().child("p").unwrap();
    let mock = Arc::new(Mock::default());
    let service = dsh_persistence::install(&ctx, mock.clone(), Duration::from_secs(3600)).unwrap();
    let h = SessionHeader::new("s", 1);
    let ev = events(10);
    for e in &ev[..9] {
        service.coordinator().unwrap().admit(&h, e);
    }
    let exec = |id: &str, root: &str| dsh_tools::ToolDispatchExecution {
        exec: Arc::new(dsh_tools::ToolExecution {
            call_id: dsh_llm::CallId::new(id),
            root_call_id: dsh_llm::CallId::new(root),
            name: "bash".into(),
            arguments: serde_json::json!({}),
            caller: None,
            signal: dsh_kernel::CancellationToken::new(),
        }),
        def: None,
        signal: dsh_kernel::CancellationToken::new(),
    };
    let m2 = mock.clone();
    let seen = Arc::new(Mutex::new(None));
    let seen2 = seen.clone();
    let r = kernel
        .root()
        .waterfall::<dsh_tools::ToolsExecute, _, _>(exec("c1", "c1"), move |_| async move {
            *seen2.lock().unwrap() = Some(m2.batches.lock().unwrap().concat().len());
            Ok(dsh_tools::ToolExecutionResult::failure("body ran", None))
        })
        .await;
    assert!(r.is_ok());
    assert_eq!(
        *seen.lock().unwrap(),
        Some(9),
        "the body saw every admitted event durable"
    );

    // Fail-closed: the flush fails, the body never runs.
    service.coordinator().unwrap().admit(&h, &ev[9]);
    mock.fail.store(true, Ordering::SeqCst);
    let ran = Arc::new(AtomicBool::new(false));
    let ran2 = ran.clone();
    let r = kernel
        .root()
        .waterfall::<dsh_tools::ToolsExecute, _, _>(exec("c2", "c2"), move |_| async move {
            ran2.store(true, Ordering::SeqCst);
            Ok(dsh_tools::ToolExecutionResult::failure("body ran", None))
        })
        .await;
    assert!(r.is_err());
    assert!(!ran.load(Ordering::SeqCst));
    // A nested dispatch reuses the outer checkpoint (no flush, so no failure).
    let r = kernel
        .root()
        .waterfall::<dsh_tools::ToolsExecute, _, _>(exec("c3", "c2"), move |_| async move {
            Ok(dsh_tools::ToolExecutionResult::failure("nested ran", None))
        })
        .await;
    assert!(r.is_ok());
    kernel.dispose().await;
}
