//! `dsh-persistence-sqlite`: the opt-in SQLite session store (schema version 17,
//! `application_id = 0x44534850`), implementing `dsh-persistence`'s [`StorageBackend`] so it gets
//! the same seam semantics and the same crash repair through [`dsh_persistence::Persistence`].
//! The plugin (id `dsh-persistence-sqlite`, applied after `dsh-persistence`) registers it with the
//! seam as backend `sqlite` (selected by `[persistence] backend = "sqlite"`); the database is
//! `<dir>/sessions.sqlite`. Its own settings section `dsh-persistence-sqlite` is
//! [`SqliteSettings`].
//!
//! Behaviour: `docs/persistence.md` ("SQLite backend"; the schema is upstream's).
//! - Connection: `journal_mode=WAL`, `synchronous=FULL`, `foreign_keys=ON`; a fresh file gets the
//!   schema, `application_id`, `user_version = 17` and a `persistence_state` store id (UUID v4);
//!   any other identity/version is refused (no migrations).
//! - One row per logical event (`ignorable` = 1 only for ignorable events, else NULL), or one row
//!   per packed chunk run (`type` = `text-chunks|reasoning-chunks|tool-call-chunks`, `ignorable = 0`
//!   as the physical discriminator, seq/time of the first member, NULL surface fields).
//! - `data` is TEXT JSON below 4 KiB, else a zstd (level 3) BLOB when that is smaller.
//! - `source_event_seqs` is a BLOB: first seq as a varint, then ZigZag-varint deltas ([`varint`]).
//! - Appends run in `BEGIN IMMEDIATE`: validate the tail (first seq = stored next seq), insert,
//!   bump `sessions.revision` once. Transactions are atomic, so there is never a torn tail; repair
//!   only appends closers ([`dsh_persistence::interrupted_turn_closers`], shared with JSONL).

pub mod varint;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_persistence::{
    BackendConfig, BackendFactory, PersistenceBackends, PersistenceError, RawItem, RawLog, Result,
    Revision, SessionHeader, SessionLocation, SessionSnapshot, SharedPersistence, StorageBackend,
    StoredPrefix, VerifyError, codec,
};
use dsh_session::SessionEvent;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::{Map, Value};

/// SQLite `application_id` of a dsh/upstream session database (`"DSHP"`).
pub const APPLICATION_ID: i64 = 0x4453_4850;
/// Schema version stored in `user_version`.
pub const SCHEMA_VERSION: i64 = 17;
/// The schema DDL (STRICT tables).
pub const SCHEMA_SQL: &str = include_str!("schema.sql");
/// Packed-row types (the `ignorable = 0` physical rows).
pub const PACKED_TYPES: [&str; 3] = ["text-chunks", "reasoning-chunks", "tool-call-chunks"];

fn backend_err(e: impl std::fmt::Display) -> PersistenceError {
    PersistenceError::Backend {
        backend: "sqlite",
        detail: e.to_string(),
    }
}

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
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(backend_err)?;
        conn.pragma_update(None, "journal_mode", "wal")
            .map_err(backend_err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(backend_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(backend_err)?;
        conn.pragma_update(None, "trusted_schema", "OFF")
            .map_err(backend_err)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend_err)?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(backend_err)?;
        let app: i64 = tx
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(backend_err)?;
        if version == 0 {
            let objects: i64 = tx
                .query_row(
                    "SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'",
                    [],
                    |r| r.get(0),
                )
                .map_err(backend_err)?;
            if app != 0 || objects > 0 {
                return Err(backend_err(format!(
                    "session database at \"{}\" has an unversioned schema or application identity",
                    config.path.display()
                )));
            }
            tx.execute_batch(SCHEMA_SQL).map_err(backend_err)?;
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(backend_err)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(backend_err)?;
            tx.execute(
                "INSERT INTO persistence_state (singleton, store_id) VALUES (1, ?)",
                params![uuid::Uuid::new_v4().to_string()],
            )
            .map_err(backend_err)?;
        } else if version != SCHEMA_VERSION || app != APPLICATION_ID {
            return Err(backend_err(format!(
                "session database at \"{}\" has application id {app} / schema {version}, expected {APPLICATION_ID} / {SCHEMA_VERSION}",
                config.path.display()
            )));
        }
        tx.commit().map_err(backend_err)?;
        Ok(Self {
            conn: Mutex::new(conn),
            config,
        })
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

fn header_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(SessionHeader, Revision)> {
    let mut h = SessionHeader::new(row.get::<_, String>(0)?, row.get::<_, i64>(2)? as u64);
    h.version = row.get::<_, i64>(1)? as u64;
    h.cwd = row.get(3)?;
    h.parent_session = row.get(4)?;
    h.seed_length = row.get::<_, Option<i64>>(5)?.map(|v| v as u64);
    h.origin = row.get(6)?;
    h.delegation_depth = Some(row.get::<_, Option<i64>>(7)?.unwrap_or(0) as u64);
    h.agent_preset = row.get(8)?;
    let incarnation: String = row.get(9)?;
    let revision: i64 = row.get(10)?;
    Ok((h, Revision(format!("{incarnation}:{revision}"))))
}

const SESSION_COLUMNS: &str = "id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision";

/// One stored row as read back.
struct RawRow {
    seq: i64,
    kind: String,
    time: i64,
    data: rusqlite::types::Value,
    sources: Option<rusqlite::types::Value>,
    surface_op: Option<String>,
    ignorable: Option<i64>,
}

fn row_to_record(id: &str, r: RawRow) -> Result<Value> {
    let corrupt = |d: &str| {
        PersistenceError::corruption(id, Some(r.seq as u64), format!("row seq {}: {d}", r.seq))
    };
    let data: Value = match &r.data {
        rusqlite::types::Value::Text(t) => {
            serde_json::from_str(t).map_err(|e| corrupt(&e.to_string()))?
        }
        rusqlite::types::Value::Blob(b) => {
            let text = zstd::stream::decode_all(&b[..])
                .map_err(|e| corrupt(&format!("zstd data: {e}")))?;
            serde_json::from_slice(&text).map_err(|e| corrupt(&e.to_string()))?
        }
        _ => return Err(corrupt("data is neither TEXT nor BLOB")),
    };
    let mut obj = Map::new();
    obj.insert("type".into(), Value::from(r.kind.clone()));
    if r.ignorable == Some(0) {
        if !PACKED_TYPES.contains(&r.kind.as_str()) {
            return Err(corrupt("ignorable = 0 on a non-packed row"));
        }
        obj.insert("seq0".into(), Value::from(r.seq));
        obj.insert("time0".into(), Value::from(r.time));
        obj.insert("data".into(), data);
        return Ok(Value::Object(obj));
    }
    obj.insert("seq".into(), Value::from(r.seq));
    obj.insert("time".into(), Value::from(r.time));
    obj.insert("data".into(), data);
    match r.sources {
        None | Some(rusqlite::types::Value::Null) => {}
        Some(rusqlite::types::Value::Blob(b)) => {
            let seqs =
                varint::decode_seqs(&b).ok_or_else(|| corrupt("bad source_event_seqs varint"))?;
            obj.insert("sourceEventSeqs".into(), Value::from(seqs));
        }
        Some(_) => return Err(corrupt("source_event_seqs is not a BLOB")),
    }
    if let Some(op) = r.surface_op {
        let v = if op.starts_with('{') {
            serde_json::from_str(&op).map_err(|e| corrupt(&e.to_string()))?
        } else {
            Value::from(op)
        };
        obj.insert("surfaceOp".into(), v);
    }
    if r.ignorable == Some(1) {
        obj.insert("ignorable".into(), Value::Bool(true));
    }
    Ok(Value::Object(obj))
}

fn read_rows(conn: &Connection, id: &str, from_seq: i64) -> Result<Vec<SessionEvent>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq",
        )
        .map_err(backend_err)?;
    let rows = stmt
        .query_map(params![id, from_seq], |row| {
            Ok(RawRow {
                seq: row.get(0)?,
                kind: row.get(1)?,
                time: row.get(2)?,
                data: row.get(3)?,
                sources: row.get(4)?,
                surface_op: row.get(5)?,
                ignorable: row.get(6)?,
            })
        })
        .map_err(backend_err)?;
    let mut events = Vec::new();
    let mut next: u64 = 0;
    for row in rows {
        let row = row.map_err(backend_err)?;
        let seq = row.seq as u64;
        let record = row_to_record(id, row)?;
        for e in codec::decode_record(id, Some(seq), record)? {
            if e.seq != next {
                return Err(PersistenceError::corruption(
                    id,
                    Some(seq),
                    format!("seq gap in committed rows (expected {next}, got {})", e.seq),
                ));
            }
            next += 1;
            events.push(e);
        }
    }
    Ok(events)
}

/// Next seq after the stored rows (decodes only the last row).
fn tail_next_seq(tx: &Connection, id: &str) -> Result<u64> {
    let row = tx
        .query_row(
            "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
            params![id],
            |row| {
                Ok(RawRow {
                    seq: row.get(0)?,
                    kind: row.get(1)?,
                    time: row.get(2)?,
                    data: row.get(3)?,
                    sources: row.get(4)?,
                    surface_op: row.get(5)?,
                    ignorable: row.get(6)?,
                })
            },
        )
        .optional()
        .map_err(backend_err)?;
    match row {
        None => Ok(0),
        Some(r) => {
            let seq = r.seq as u64;
            let events = codec::decode_record(id, Some(seq), row_to_record(id, r)?)?;
            Ok(events.last().map_or(seq, |e| e.seq + 1))
        }
    }
}

/// Payloads below this size (bytes of JSON text) are stored as TEXT.
pub const COMPRESS_THRESHOLD_BYTES: usize = 4096;

/// The `data` column value: TEXT JSON below [`COMPRESS_THRESHOLD_BYTES`], else a zstd (level 3)
/// BLOB when that is smaller.
fn stored_data(json: String) -> rusqlite::types::Value {
    if json.len() >= COMPRESS_THRESHOLD_BYTES
        && let Ok(blob) = zstd::bulk::compress(json.as_bytes(), 3)
        && blob.len() < json.len()
    {
        return rusqlite::types::Value::Blob(blob);
    }
    rusqlite::types::Value::Text(json)
}

fn insert_records(tx: &Connection, id: &str, records: &[Value]) -> Result<()> {
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .map_err(backend_err)?;
    for record in records {
        let get = |k: &str| record.get(k);
        let kind = get("type").and_then(Value::as_str).unwrap_or_default();
        let data = stored_data(
            get("data")
                .map(Value::to_string)
                .unwrap_or_else(|| "{}".into()),
        );
        if PACKED_TYPES.contains(&kind) && get("seq0").is_some() {
            let seq = get("seq0").and_then(Value::as_i64).unwrap_or_default();
            let time = get("time0").and_then(Value::as_i64).unwrap_or_default();
            stmt.execute(params![
                id,
                seq,
                kind,
                time,
                data,
                Option::<Vec<u8>>::None,
                Option::<String>::None,
                0i64
            ])
            .map_err(backend_err)?;
        } else {
            let seq = get("seq").and_then(Value::as_i64).unwrap_or_default();
            let time = get("time").and_then(Value::as_i64).unwrap_or_default();
            let sources: Option<Vec<u8>> =
                get("sourceEventSeqs").and_then(Value::as_array).map(|a| {
                    let seqs: Vec<u64> = a.iter().filter_map(Value::as_u64).collect();
                    varint::encode_seqs(&seqs)
                });
            let op: Option<String> = get("surfaceOp").map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            let ignorable: Option<i64> =
                (get("ignorable") == Some(&Value::Bool(true))).then_some(1);
            stmt.execute(params![id, seq, kind, time, data, sources, op, ignorable])
                .map_err(backend_err)?;
        }
    }
    Ok(())
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
        // Rows are transactional: no torn tail exists; the tail check in append_batch detects a
        // concurrent writer.
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

    fn release(&self, _id: &str) {}
}

/// Path helper: the default database file under a directory (`<dir>/sessions.sqlite`).
pub fn default_db_path(dir: &Path) -> PathBuf {
    dir.join("sessions.sqlite")
}

/// The name this backend registers under (the `backend` setting value that selects it).
pub const BACKEND_NAME: &str = "sqlite";

/// The first 16 bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Settings section `dsh-persistence-sqlite`: the options only this backend has.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SqliteSettings {
    /// Pack runs of ≥3 chunk deltas into packed rows (default `true`).
    pub pack_chunks: Option<bool>,
}

/// The [`BackendFactory`] of this backend.
#[derive(Debug, Clone, Default)]
pub struct SqliteFactory {
    /// This backend's settings.
    pub settings: SqliteSettings,
}

impl BackendFactory for SqliteFactory {
    fn open(&self, config: &BackendConfig) -> Result<SharedPersistence> {
        let backend = SqliteBackend::open(SqliteConfig {
            path: default_db_path(&config.dir),
            pack_chunks: self.settings.pack_chunks.unwrap_or(true),
        })?;
        Ok(Arc::new(dsh_persistence::Persistence::with_registry(
            backend,
            config.registry.clone(),
        )))
    }

    fn read_file(&self, path: &Path) -> Option<Vec<RawLog>> {
        let mut head = [0u8; 16];
        let is_db = std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
            .is_ok_and(|()| &head == SQLITE_MAGIC);
        is_db.then(|| read_database(path))
    }
}

/// Every session of the database at `path` as raw logs, opened read-only (nothing is created or
/// migrated). A database that cannot be read yields one log holding the failure.
fn read_database(path: &Path) -> Vec<RawLog> {
    let failed = |detail: String| {
        vec![RawLog {
            path: path.to_path_buf(),
            items: vec![RawItem::Error(VerifyError::from_error(
                &backend_err(detail),
                None,
            ))],
            ..RawLog::default()
        }]
    };
    let conn = match Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) {
        Ok(c) => c,
        Err(e) => return failed(e.to_string()),
    };
    let identity = conn
        .query_row("PRAGMA application_id", [], |r| r.get::<_, i64>(0))
        .and_then(|app| {
            conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
                .map(|v| (app, v))
        });
    match identity {
        Ok((APPLICATION_ID, SCHEMA_VERSION)) => {}
        Ok((app, v)) => {
            return failed(format!(
                "application id {app} / schema {v}, expected {APPLICATION_ID} / {SCHEMA_VERSION}"
            ));
        }
        Err(e) => return failed(e.to_string()),
    }
    let headers = (|| -> rusqlite::Result<Vec<SessionHeader>> {
        let mut stmt = conn.prepare(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY id"
        ))?;
        let rows = stmt.query_map([], header_from_row)?;
        rows.map(|r| r.map(|(h, _)| h)).collect()
    })();
    let headers = match headers {
        Ok(h) => h,
        Err(e) => return failed(e.to_string()),
    };
    headers
        .into_iter()
        .map(|header| {
            let items = match raw_records(&conn, &header.id) {
                Ok(items) => items,
                Err(e) => vec![RawItem::Error(VerifyError::from_error(&e, None))],
            };
            RawLog {
                path: path.join(&header.id),
                header: Some(header),
                items,
                torn_tail: false,
            }
        })
        .collect()
}

/// The stored records of one session, undecoded (rows are transactional: never torn).
fn raw_records(conn: &Connection, id: &str) -> Result<Vec<RawItem>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ? ORDER BY seq",
        )
        .map_err(backend_err)?;
    let rows = stmt
        .query_map(params![id], |row| {
            Ok(RawRow {
                seq: row.get(0)?,
                kind: row.get(1)?,
                time: row.get(2)?,
                data: row.get(3)?,
                sources: row.get(4)?,
                surface_op: row.get(5)?,
                ignorable: row.get(6)?,
            })
        })
        .map_err(backend_err)?;
    let mut items = Vec::new();
    for row in rows {
        let row = row.map_err(backend_err)?;
        items.push(match row_to_record(id, row) {
            Ok(value) => RawItem::Record { line: None, value },
            Err(e) => RawItem::Error(VerifyError::from_error(&e, None)),
        });
    }
    Ok(items)
}

fn apply(ctx: &dsh_kernel::Context) -> std::result::Result<(), dsh_kernel::BoxError> {
    let settings: SqliteSettings = ctx.settings_section(env!("CARGO_PKG_NAME"))?;
    let backends = ctx
        .get::<PersistenceBackends>()
        .ok_or("dsh-persistence-sqlite needs the dsh-persistence plugin")?;
    backends.register(BACKEND_NAME, Arc::new(SqliteFactory { settings }))?;
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_persistence::PLUGIN],
    settings = SqliteSettings,
    start = apply,
}
