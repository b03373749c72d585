//! The backend registry and cross-backend behaviour: the seam opens the backend named by its
//! `backend` setting among the registered ones (an unknown name is an error listing them), backend
//! plugins register themselves when booted, standalone files are read by the backend that
//! recognizes them, and JSONL ⇄ SQLite export/import keeps every event (scripted sessions and the
//! upstream conformance corpus).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
#[path = "../crates/dsh-persistence/tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use common::{Script, to_plain};
use dsh_persistence::{
    BackendConfig, PersistenceBackends, PersistenceService, PersistenceSettings, SessionHeader,
    SessionPersistence, copy_sessions,
};
use dsh_persistence_jsonl::{JsonlConfig, JsonlFactory, jsonl_persistence};
use dsh_persistence_sqlite::{SqliteConfig, SqliteFactory, open_persistence};
use dsh_session::EventTypeRegistry;

fn header(id: &str) -> SessionHeader {
    let mut h = SessionHeader::new(id, 1_700_000_000_000);
    h.cwd = Some("/work/proj".into());
    h
}

fn db(dir: &std::path::Path) -> Arc<dsh_persistence_sqlite::SqlitePersistence> {
    open_persistence(SqliteConfig {
        path: dir.join("s.sqlite"),
        pack_chunks: true,
    })
    .unwrap()
}

fn registry() -> Arc<PersistenceBackends> {
    let r = Arc::new(PersistenceBackends::new());
    r.register("jsonl", Arc::new(JsonlFactory::default()))
        .unwrap();
    r.register("sqlite", Arc::new(SqliteFactory::default()))
        .unwrap();
    r
}

fn settings(backend: Option<&str>, dir: &std::path::Path) -> PersistenceSettings {
    PersistenceSettings {
        backend: backend.map(str::to_owned),
        dir: Some(dir.to_path_buf()),
        write_batch_ms: None,
    }
}

#[test]
fn the_seam_opens_the_backend_named_by_its_setting() {
    let dir = tempfile::tempdir().unwrap();
    for (name, expected) in [
        (None, "jsonl"),
        (Some("jsonl"), "jsonl"),
        (Some("sqlite"), "sqlite"),
    ] {
        let service = PersistenceService::from_settings(
            settings(name, dir.path()),
            registry(),
            EventTypeRegistry::shared_default(),
        );
        assert_eq!(service.backend_name(), None, "resolution is deferred");
        assert!(service.resolve().unwrap());
        assert_eq!(service.backend_name(), Some(expected));
        assert_eq!(service.backend().unwrap().name(), expected);
    }
    assert!(dir.path().join("sessions.sqlite").is_file());
}

#[test]
fn an_unknown_backend_name_is_an_error_listing_the_registered_ones() {
    let dir = tempfile::tempdir().unwrap();
    let service = PersistenceService::from_settings(
        settings(Some("postgres"), dir.path()),
        registry(),
        EventTypeRegistry::shared_default(),
    );
    let e = service.resolve().unwrap_err();
    assert_eq!(e.code(), "SESSION_PERSISTENCE_UNKNOWN_BACKEND");
    assert_eq!(
        e.to_string(),
        "unknown session persistence backend `postgres` (registered: jsonl, sqlite)"
    );
    // Every later use fails the same way (fail-closed), and there is no coordinator.
    assert_eq!(service.backend().err().unwrap().to_string(), e.to_string());
    assert!(service.coordinator().is_none());
    let config = BackendConfig {
        dir: dir.path().to_path_buf(),
        registry: EventTypeRegistry::shared_default(),
    };
    let empty = PersistenceBackends::new();
    assert_eq!(
        empty.open("jsonl", &config).err().unwrap().to_string(),
        "unknown session persistence backend `jsonl` (registered: none)"
    );
}

#[test]
fn persistence_is_off_with_backend_none_or_without_a_dir() {
    let dir = tempfile::tempdir().unwrap();
    let off = PersistenceService::from_settings(
        settings(Some("none"), dir.path()),
        registry(),
        EventTypeRegistry::shared_default(),
    );
    assert!(!off.resolve().unwrap());
    assert_eq!(
        off.backend().err().unwrap().code(),
        "SESSION_PERSISTENCE_DISABLED"
    );
    let no_dir = PersistenceService::from_settings(
        PersistenceSettings::default(),
        registry(),
        EventTypeRegistry::shared_default(),
    );
    assert!(!no_dir.resolve().unwrap());
}

#[test]
fn names_are_unique_and_none_is_reserved() {
    let r = registry();
    assert_eq!(r.names(), vec!["jsonl", "sqlite"]);
    assert_eq!(
        r.register("jsonl", Arc::new(JsonlFactory::default()))
            .unwrap_err()
            .to_string(),
        "invalid argument: persistence backend `jsonl` is registered twice"
    );
    assert_eq!(
        r.register("none", Arc::new(JsonlFactory::default()))
            .unwrap_err()
            .code(),
        "INVALID_ARGUMENT"
    );
}

#[tokio::test]
async fn booted_backend_plugins_register_and_the_setting_picks_one() {
    use dsh_persistence_jsonl as _;
    use dsh_persistence_sqlite as _;
    use dsh_session as _;
    let dir = tempfile::tempdir().unwrap();
    let kernel = dsh_kernel::Kernel::new();
    kernel
        .root()
        .provide(Arc::new(dsh_kernel::Settings::new().with_section(
            "dsh-persistence",
            serde_json::json!({"backend": "sqlite", "dir": dir.path()}),
        )))
        .unwrap()
        .detach();
    kernel.boot().await.unwrap();
    let backends = kernel.root().require::<PersistenceBackends>().unwrap();
    assert_eq!(backends.names(), vec!["jsonl", "sqlite"]);
    let service = kernel.root().require::<PersistenceService>().unwrap();
    assert!(service.resolve().unwrap());
    assert_eq!(service.backend_name(), Some("sqlite"));
    kernel.root().require::<dsh_agent::SessionLoader>().unwrap();
    kernel.dispose().await;
}

#[test]
fn standalone_files_are_read_by_the_backend_that_recognizes_them() {
    let dir = tempfile::tempdir().unwrap();
    let j = jsonl_persistence(JsonlConfig {
        root: dir.path().join("j"),
        pack_chunks: true,
        compression: Default::default(),
    });
    let mut s = Script::default();
    s.full_turn(1);
    j.create(header("x")).unwrap();
    j.append("x", &s.events).unwrap();
    let q = db(dir.path());
    copy_sessions(&*j, &*q).unwrap();
    let r = registry();
    let log =
        dsh_persistence_jsonl::log_path(&dir.path().join("j"), Some("/work/proj"), "x").unwrap();
    let types = EventTypeRegistry::shared_default();
    for path in [log, dir.path().join("s.sqlite")] {
        let raws = r.read_file(&path).unwrap();
        assert_eq!(raws.len(), 1, "{}", path.display());
        let report = dsh_persistence::verify_log(raws.into_iter().next().unwrap(), &types);
        assert!(report.ok(), "{}: {:?}", path.display(), report.errors);
        assert_eq!(report.events, to_plain(&s.events));
    }
    let other = dir.path().join("notes.txt");
    std::fs::write(&other, "hello").unwrap();
    assert_eq!(
        r.read_file(&other).unwrap_err().to_string(),
        format!(
            "{} is not a session file of any registered backend (registered: jsonl, sqlite)",
            other.display()
        )
    );
}

#[test]
fn jsonl_sqlite_export_import_identical() {
    let dir = tempfile::tempdir().unwrap();
    let j = jsonl_persistence(JsonlConfig {
        root: dir.path().join("j"),
        pack_chunks: true,
        compression: Default::default(),
    });
    let mut s = Script::default();
    s.full_turn(1);
    s.full_turn(2);
    for id in ["x", "y"] {
        j.create(header(id)).unwrap();
        j.append(id, &s.events).unwrap();
    }
    let q = db(dir.path());
    assert_eq!(copy_sessions(&*j, &*q).unwrap(), 2);
    let j2 = jsonl_persistence(JsonlConfig {
        root: dir.path().join("j2"),
        pack_chunks: true,
        compression: Default::default(),
    });
    assert_eq!(copy_sessions(&*q, &*j2).unwrap(), 2);
    for id in ["x", "y"] {
        assert_eq!(q.inspect(id).unwrap().events, to_plain(&s.events));
        let a = std::fs::read(
            dsh_persistence_jsonl::log_path(&dir.path().join("j"), Some("/work/proj"), id).unwrap(),
        )
        .unwrap();
        let b = std::fs::read(
            dsh_persistence_jsonl::log_path(&dir.path().join("j2"), Some("/work/proj"), id)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(a, b);
    }
}

#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
#[test]
fn conformance_corpus_jsonl_to_sqlite_identical_events() {
    let files = common::corpus_files();
    let mut checked = 0;
    for file in &files {
        let filled = common::load_corpus_file(file);
        if filled.records.is_empty() {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let (id, _) = common::write_raw_log(&dir.path().join("j"), &filled, layout);
        let j = jsonl_persistence(JsonlConfig {
            root: dir.path().join("j"),
            pack_chunks: true,
            compression: Default::default(),
        });
        let q = db(dir.path());
        copy_sessions(&*j, &*q).unwrap();
        let from_jsonl = j.inspect(&id).unwrap();
        let from_sqlite = q.inspect(&id).unwrap();
        assert_eq!(from_sqlite.events, from_jsonl.events, "{}", file.display());
        assert_eq!(from_sqlite.header.id, from_jsonl.header.id);
        checked += 1;
    }
    assert!(checked > 100, "{checked}");
}

fn layout(root: &std::path::Path, cwd: Option<&str>, id: &str) -> std::path::PathBuf {
    dsh_persistence_jsonl::log_path(root, cwd, id).unwrap()
}
