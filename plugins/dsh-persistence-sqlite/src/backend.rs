//! The SQLite [`StorageBackend`]: one connection per database, appends in `BEGIN IMMEDIATE`
//! transactions that check the stored tail first, and one writer per session across processes
//! through a lock file in the session's own folder (as the JSONL backend does).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_persistence::{
    PersistenceError, Result, SessionHeader, SessionLocation, SessionSnapshot, StorageBackend,
    StoredPrefix, codec,
};
use dsh_session::SessionEvent;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::schema;
use crate::store::{
    SESSION_COLUMNS, backend_err, header_from_row, insert_records, read_rows, tail_next_seq,
};

/// SQLite backend configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteConfig {
    /// Database file path.
    pub path: PathBuf,
    /// Pack runs of ≥3 chunk deltas into packed rows (default `true`).
    pub pack_chunks: bool,
}

/// The SQLite [`StorageBackend`]; wrap it in [`dsh_persistence::Persistence`] for the seam.
pub struct SqliteBackend {
    conn: Mutex<Connection>,
    config: SqliteConfig,
    /// The writer locks this process holds (session id → the locked `session.lock`).
    locks: Mutex<HashMap<String, File>>,
}

/// File name of a session's writer lock inside its folder (same name as the JSONL backend's).
pub const LOCK_FILE_NAME: &str = "session.lock";

/// The folder holding every session folder of the database at `db`: `<db file name>.d` beside
/// it (`sessions.sqlite` ⇒ `sessions.sqlite.d`).
pub fn sessions_dir(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(".d");
    db.with_file_name(name)
}

/// Encodes a session id as one safe path segment, injectively, with the JSONL layout's rule:
/// `[A-Za-z0-9._-]` kept, every other UTF-16 code unit (and `~`) written `~XXXX`, `.`/`..`
/// escaped (`docs/persistence.md`, "JSONL backend").
pub fn encode_segment(raw: &str) -> String {
    match raw {
        "" => return "~".to_owned(),
        "." => return "~002E".to_owned(),
        ".." => return "~002E~002E".to_owned(),
        _ => {}
    }
    let mut out = String::with_capacity(raw.len());
    for unit in raw.encode_utf16() {
        match u8::try_from(unit) {
            Ok(b) if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') => {
                out.push(char::from(b));
            }
            _ => out.push_str(&format!("~{unit:04X}")),
        }
    }
    out
}

/// The seam over SQLite.
pub type SqlitePersistence = dsh_persistence::Persistence<SqliteBackend>;

impl SqliteBackend {
    /// Opens (creating if needed) the database at `config.path`.
    ///
    /// # Errors
    /// [`PersistenceError::Backend`] when SQLite fails, or the file has another application id or
    /// schema version, or a foreign unversioned schema.
    pub fn open(config: SqliteConfig) -> Result<Self> {
        if let Some(dir) = config.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| PersistenceError::io("create-dir", dir, e))?;
        }
        let mut conn = Connection::open(&config.path).map_err(backend_err)?;
        schema::prepare(&mut conn, &config.path)?;
        Ok(Self {
            conn: Mutex::new(conn),
            config,
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// The folder session `id` owns: `<database>.d/<encoded id>/` (its lock file and spilled
    /// tool output).
    pub fn session_dir_of(&self, id: &str) -> PathBuf {
        sessions_dir(&self.config.path).join(encode_segment(id))
    }

    /// Takes the writer lock of `id` unless this process holds it already.
    ///
    /// # Errors
    /// [`PersistenceError::Locked`] when another open file (another process) holds it;
    /// I/O errors creating the folder or the lock file.
    fn take_lock(&self, id: &str) -> Result<()> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if locks.contains_key(id) {
            return Ok(());
        }
        let file = acquire_lock(&self.session_dir_of(id), id)?;
        locks.insert(id.to_owned(), file);
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &SqliteConfig {
        &self.config
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A seam over a fresh or existing SQLite database.
///
/// # Errors
/// As [`SqliteBackend::open`].
pub fn open_persistence(config: SqliteConfig) -> Result<Arc<SqlitePersistence>> {
    Ok(Arc::new(dsh_persistence::Persistence::new(
        SqliteBackend::open(config)?,
    )))
}

impl StorageBackend for SqliteBackend {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn locate(&self, _header: &SessionHeader) -> Option<SessionLocation> {
        None
    }

    fn exists(&self, id: &str) -> Result<bool> {
        let conn = self.conn();
        conn.query_row("SELECT 1 FROM sessions WHERE id = ?", params![id], |_| {
            Ok(())
        })
        .optional()
        .map(|r| r.is_some())
        .map_err(backend_err)
    }

    fn load_stored(&self, id: &str) -> Result<Option<StoredPrefix>> {
        let mut conn = self.conn();
        // A read transaction gives a consistent header + rows snapshot.
        let tx = conn.transaction().map_err(backend_err)?;
        let session = tx
            .query_row(
                &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"),
                params![id],
                header_from_row,
            )
            .optional()
            .map_err(backend_err)?;
        let Some((header, revision)) = session else {
            return Ok(None);
        };
        dsh_persistence::check_version(id, header.version, None)?;
        let events = read_rows(&tx, id, 0)?;
        tx.commit().map_err(backend_err)?;
        Ok(Some(StoredPrefix {
            header,
            events,
            revision,
            torn_marker: None,
            rewrite_from: None,
        }))
    }

    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>]) -> Result<()> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        let id = header.id.as_str();
        self.take_lock(id)?;
        let records = codec::encode_records(events, self.config.pack_chunks);
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend_err)?;
        let exists: bool = tx
            .query_row("SELECT 1 FROM sessions WHERE id = ?", params![id], |_| {
                Ok(())
            })
            .optional()
            .map_err(backend_err)?
            .is_some();
        if !exists {
            tx.execute(
                "INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
                params![
                    id,
                    header.version as i64,
                    header.created_at as i64,
                    header.cwd,
                    header.parent_session,
                    header.seed_length.map(|v| v as i64),
                    header.origin,
                    header.depth() as i64,
                    header.agent_preset,
                    uuid::Uuid::new_v4().to_string(),
                ],
            )
            .map_err(backend_err)?;
        }
        let next = tail_next_seq(&tx, id)?;
        if first.seq != next {
            return Err(PersistenceError::SeqMismatch {
                id: id.to_owned(),
                expected: next,
                got: first.seq,
            });
        }
        insert_records(&tx, id, &records)?;
        tx.execute(
            "UPDATE sessions SET revision = revision + 1 WHERE id = ?",
            params![id],
        )
        .map_err(backend_err)?;
        tx.commit().map_err(backend_err)
    }

    fn adopt(&self, prefix: &StoredPrefix, closers: &[Arc<SessionEvent>]) -> Result<()> {
        // The writer role first (a second process is refused here, before any model call or
        // tool runs); rows are transactional, so no torn tail exists, and the tail check in
        // append_batch still detects a writer that ignores the lock.
        self.take_lock(&prefix.header.id)?;
        self.append_batch(&prefix.header, closers)
    }

    fn list(&self) -> Result<Vec<SessionSnapshot>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY id"
            ))
            .map_err(backend_err)?;
        let rows = stmt.query_map([], header_from_row).map_err(backend_err)?;
        let mut out = Vec::new();
        for row in rows {
            let (header, revision) = row.map_err(backend_err)?;
            out.push(SessionSnapshot {
                header,
                revision,
                updated_at: None,
            });
        }
        Ok(out)
    }

    fn release(&self, id: &str) {
        self.locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }

    fn session_dir(&self, header: &SessionHeader) -> Option<PathBuf> {
        Some(self.session_dir_of(&header.id))
    }

    fn delete(&self, id: &str) -> Result<()> {
        if !self.exists(id)? {
            return Err(PersistenceError::NotFound { id: id.to_owned() });
        }
        let dir = self.session_dir_of(id);
        let held = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(id);
        if held {
            return Err(PersistenceError::Locked {
                id: id.to_owned(),
                path: dir.join(LOCK_FILE_NAME),
            });
        }
        let lock = acquire_lock(&dir, id)?;
        {
            let mut conn = self.conn();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend_err)?;
            tx.execute("DELETE FROM events WHERE session_id = ?", params![id])
                .map_err(backend_err)?;
            tx.execute("DELETE FROM sessions WHERE id = ?", params![id])
                .map_err(backend_err)?;
            tx.commit().map_err(backend_err)?;
        }
        std::fs::remove_dir_all(&dir).map_err(|e| PersistenceError::io("remove-dir", &dir, e))?;
        drop(lock);
        Ok(())
    }
}

/// Creates `dir` if needed and takes an exclusive advisory lock on `dir/session.lock` without
/// waiting; the lock is released when the file is dropped (and by the OS when the process dies).
fn acquire_lock(dir: &Path, id: &str) -> Result<File> {
    std::fs::create_dir_all(dir).map_err(|e| PersistenceError::io("create-dir", dir, e))?;
    let path = dir.join(LOCK_FILE_NAME);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| PersistenceError::io("open-lock", &path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(PersistenceError::Locked {
            id: id.to_owned(),
            path,
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(PersistenceError::io("lock", &path, e)),
    }
}

/// Path helper: the default database file under a directory (`<dir>/sessions.sqlite`).
pub fn default_db_path(dir: &Path) -> PathBuf {
    dir.join("sessions.sqlite")
}
