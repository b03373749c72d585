//! The backend as the seam opens it: the settings section, the [`BackendFactory`] registered
//! under [`BACKEND_NAME`](crate::BACKEND_NAME), and the read-only reader `dsh sessions` uses on
//! database files.

use std::path::Path;
use std::sync::Arc;

use dsh_persistence::{
    BackendConfig, BackendFactory, PersistenceBackends, RawItem, RawLog, Result, SessionHeader,
    SharedPersistence, VerifyError,
};
use rusqlite::Connection;

use crate::store::{SESSION_COLUMNS, backend_err, header_from_row, raw_records};
use crate::{
    APPLICATION_ID, BACKEND_NAME, SCHEMA_VERSION, SqliteBackend, SqliteConfig, default_db_path,
};

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

pub(crate) fn apply(ctx: &dsh_kernel::Context) -> std::result::Result<(), dsh_kernel::BoxError> {
    let settings: SqliteSettings = ctx.settings_section(env!("CARGO_PKG_NAME"))?;
    let backends = ctx
        .get::<PersistenceBackends>()
        .ok_or("dsh-persistence-sqlite needs the dsh-persistence plugin")?;
    backends.register(BACKEND_NAME, Arc::new(SqliteFactory { settings }))?;
    Ok(())
}
