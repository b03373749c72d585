//! The database's identity and schema: the `application_id`, the schema version and DDL, and
//! the connection setup that creates a fresh database or refuses a foreign one.

use std::path::Path;

use dsh_persistence::Result;
use rusqlite::{Connection, TransactionBehavior, params};

use crate::store::backend_err;

/// SQLite `application_id` of a dsh/upstream session database (`"DSHP"`).
pub const APPLICATION_ID: i64 = 0x4453_4850;
/// Schema version stored in `user_version`.
pub const SCHEMA_VERSION: i64 = 17;
/// The schema DDL (STRICT tables).
pub const SCHEMA_SQL: &str = include_str!("schema.sql");
/// Packed-row types (the `ignorable = 0` physical rows).
pub const PACKED_TYPES: [&str; 3] = ["text-chunks", "reasoning-chunks", "tool-call-chunks"];

/// Sets the connection's pragmas (`journal_mode=WAL`, `synchronous=FULL`, `foreign_keys=ON`,
/// `trusted_schema=OFF`, a 5 s busy timeout), then, in one `BEGIN IMMEDIATE` transaction, gives
/// a fresh file the schema, `application_id`, `user_version` and a store id, or checks an
/// existing file's identity (no migrations).
///
/// # Errors
/// [`dsh_persistence::PersistenceError::Backend`] when SQLite fails, or the file at `path` has
/// another application id or schema version, or a foreign unversioned schema.
pub(crate) fn prepare(conn: &mut Connection, path: &Path) -> Result<()> {
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
                path.display()
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
            path.display()
        )));
    }
    tx.commit().map_err(backend_err)?;
    Ok(())
}
