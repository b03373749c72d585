//! The rows: session headers and events read from and written to the `sessions` and `events`
//! tables (JSON `data` as TEXT or zstd BLOB, packed chunk rows, varint `source_event_seqs`).

use dsh_persistence::{
    PersistenceError, RawItem, Result, Revision, SessionHeader, VerifyError, codec,
};
use dsh_session::SessionEvent;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Map, Value};

use crate::{PACKED_TYPES, varint};

/// A [`PersistenceError::Backend`] naming this backend, from any SQLite failure.
pub(crate) fn backend_err(e: impl std::fmt::Display) -> PersistenceError {
    PersistenceError::Backend {
        backend: "sqlite",
        detail: e.to_string(),
    }
}

/// A `sessions` row ([`SESSION_COLUMNS`] order) as a header and its revision.
pub(crate) fn header_from_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<(SessionHeader, Revision)> {
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

/// The `sessions` columns [`header_from_row`] reads, in order.
pub(crate) const SESSION_COLUMNS: &str = "id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision";

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

/// A `RawRow` from the columns `seq, type, time, data, source_event_seqs, surface_op,
/// ignorable` (the order every events query selects them in).
fn raw_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        seq: row.get(0)?,
        kind: row.get(1)?,
        time: row.get(2)?,
        data: row.get(3)?,
        sources: row.get(4)?,
        surface_op: row.get(5)?,
        ignorable: row.get(6)?,
    })
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

pub(crate) fn read_rows(conn: &Connection, id: &str, from_seq: i64) -> Result<Vec<SessionEvent>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq",
        )
        .map_err(backend_err)?;
    let rows = stmt
        .query_map(params![id, from_seq], raw_row)
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
pub(crate) fn tail_next_seq(tx: &Connection, id: &str) -> Result<u64> {
    let row = tx
        .query_row(
            "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
            params![id],
            raw_row,
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

pub(crate) fn insert_records(tx: &Connection, id: &str, records: &[Value]) -> Result<()> {
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

/// The stored records of one session, undecoded (rows are transactional: never torn).
pub(crate) fn raw_records(conn: &Connection, id: &str) -> Result<Vec<RawItem>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ? ORDER BY seq",
        )
        .map_err(backend_err)?;
    let rows = stmt.query_map(params![id], raw_row).map_err(backend_err)?;
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
