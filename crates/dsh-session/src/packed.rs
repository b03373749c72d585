//! The packed chunk-row codec shared by persistence backends and the conformance test.
//!
//! See docs/upstream/session.md (Packed rows). A run of ≥ 3 consecutive
//! `assistant/chunk` delta events of the same kind with the same turn/step/index (tool-call: same
//! `id` and same presence/value of `name`), exact whitelisted shapes, consecutive seqs and
//! safe-integer times (gaps may be negative) is stored as one row:
//!
//! - `{"type":"text-chunks"|"reasoning-chunks","seq0","time0","data":{"turn","step","index","dt":[…],"texts":[…]}}`
//! - `{"type":"tool-call-chunks","seq0","time0","data":{"turn","step","index","dt":[…],"id","name"?,"args":[…]}}`
//!
//! Member `k` has `seq = seq0 + k` and `time = time0 + sum(dt[0..k))`; `dt` has one entry fewer
//! than the members. Anything else is stored verbatim as the event JSON. Reading is
//! layout-blind: [`unpack`] accepts any mix; a malformed row fails loudly
//! (`MALFORMED_PACKED_ROW`).

use std::sync::Arc;

use dsh_llm::{CallId, StreamChunk};
use serde_json::{Map, Value, json};

use crate::error::SessionError;
use crate::event::{AssistantChunkData, EventData, EventType, SessionEvent};
use crate::lossless::MAX_SAFE_INTEGER;

/// `text-chunks`.
pub const TEXT_CHUNKS: &str = "text-chunks";
/// `reasoning-chunks`.
pub const REASONING_CHUNKS: &str = "reasoning-chunks";
/// `tool-call-chunks`.
pub const TOOL_CALL_CHUNKS: &str = "tool-call-chunks";
/// Minimum run length that is packed.
pub const MIN_PACKED_RUN: usize = 3;

/// True for the three packed row types.
pub fn is_packed_row_type(t: &str) -> bool {
    matches!(t, TEXT_CHUNKS | REASONING_CHUNKS | TOOL_CALL_CHUNKS)
}

/// The packable identity of one event: row type, turn, step, index, tool-call id/name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key<'a> {
    row: &'static str,
    turn: u64,
    step: u64,
    index: u32,
    id: Option<&'a CallId>,
    name: Option<&'a Option<String>>,
}

fn member<'a>(e: &'a SessionEvent) -> Option<(Key<'a>, &'a str)> {
    if e.ignorable
        || e.surface_op.is_some()
        || e.source_event_seqs.is_some()
        || e.residual.is_some()
    {
        return None;
    }
    let EventData::AssistantChunk(AssistantChunkData { turn, step, chunk }) = &e.data else {
        return None;
    };
    let k = |row, index, id, name| Key {
        row,
        turn: *turn,
        step: *step,
        index,
        id,
        name,
    };
    match chunk {
        StreamChunk::TextDelta { index, text } => Some((k(TEXT_CHUNKS, *index, None, None), text)),
        StreamChunk::ReasoningDelta { index, text } => {
            Some((k(REASONING_CHUNKS, *index, None, None), text))
        }
        StreamChunk::ToolCallDelta {
            index,
            id,
            name,
            arguments_delta,
        } => Some((
            k(TOOL_CALL_CHUNKS, *index, Some(id), Some(name)),
            arguments_delta,
        )),
        _ => None,
    }
}

/// Encodes events as stored records (packing maximal eligible runs of ≥ 3; no size cap).
pub fn pack(events: &[Arc<SessionEvent>]) -> Vec<Value> {
    pack_with(events, usize::MAX)
}

/// [`pack`] with at most `max_members` events per row (SQLite uses 1024).
pub fn pack_with(events: &[Arc<SessionEvent>], max_members: usize) -> Vec<Value> {
    let max_members = max_members.max(MIN_PACKED_RUN);
    let mut out = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let Some((key, _)) = member(&events[i]) else {
            out.push(events[i].to_value());
            i += 1;
            continue;
        };
        let mut j = i + 1;
        while j < events.len() && j - i < max_members {
            let prev = &events[j - 1];
            let cur = &events[j];
            match member(cur) {
                Some((k, _)) if k == key && cur.seq == prev.seq + 1 => {}
                _ => break,
            }
            j += 1;
        }
        if j - i < MIN_PACKED_RUN {
            for e in &events[i..j] {
                out.push(e.to_value());
            }
        } else {
            out.push(row(&events[i..j], &key));
        }
        i = j;
    }
    out
}

fn row(run: &[Arc<SessionEvent>], key: &Key<'_>) -> Value {
    // Times are safe integers, so every gap (possibly negative) is one too.
    let dt: Vec<i64> = run
        .windows(2)
        .map(|w| w[1].time as i64 - w[0].time as i64)
        .collect();
    let parts: Vec<&str> = run
        .iter()
        .filter_map(|e| member(e).map(|(_, t)| t))
        .collect();
    let mut data = Map::new();
    data.insert("turn".into(), json!(key.turn));
    data.insert("step".into(), json!(key.step));
    data.insert("index".into(), json!(key.index));
    data.insert("dt".into(), json!(dt));
    if key.row == TOOL_CALL_CHUNKS {
        if let Some(id) = key.id {
            data.insert("id".into(), json!(id));
        }
        if let Some(Some(name)) = key.name {
            data.insert("name".into(), json!(name));
        }
        data.insert("args".into(), json!(parts));
    } else {
        data.insert("texts".into(), json!(parts));
    }
    let mut r = Map::new();
    r.insert("type".into(), json!(key.row));
    r.insert("seq0".into(), json!(run[0].seq));
    r.insert("time0".into(), json!(run[0].time));
    r.insert("data".into(), Value::Object(data));
    Value::Object(r)
}

fn bad(m: impl Into<String>) -> SessionError {
    SessionError::MalformedPackedRow { message: m.into() }
}

fn get_u64(m: &Map<String, Value>, k: &str) -> Result<u64, SessionError> {
    m.get(k)
        .and_then(Value::as_u64)
        .filter(|v| *v <= MAX_SAFE_INTEGER)
        .ok_or_else(|| bad(format!("`{k}` must be a safe non-negative integer")))
}

fn get_strs<'a>(m: &'a Map<String, Value>, k: &str) -> Result<Vec<&'a str>, SessionError> {
    m.get(k)
        .and_then(Value::as_array)
        .ok_or_else(|| bad(format!("`{k}` must be an array")))?
        .iter()
        .map(|v| {
            v.as_str()
                .ok_or_else(|| bad(format!("`{k}` must hold strings")))
        })
        .collect()
}

/// Expands one packed row (`{type, seq0, time0, data}`) into its member events.
///
/// # Errors
/// [`SessionError::MalformedPackedRow`]: not a packed row type, missing/ill-typed fields,
/// unknown keys, fewer than one member, `dt` length ≠ members − 1, or times overflowing the
/// safe-integer range.
pub fn expand_row(row: &Value) -> Result<Vec<SessionEvent>, SessionError> {
    let obj = row.as_object().ok_or_else(|| bad("row is not an object"))?;
    let t = obj
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| is_packed_row_type(t))
        .ok_or_else(|| bad("not a packed row type"))?;
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "type" | "seq0" | "time0" | "data"))
    {
        return Err(bad(format!("unknown row field `{k}`")));
    }
    let seq0 = get_u64(obj, "seq0")?;
    let time0 = get_u64(obj, "time0")?;
    let data = obj
        .get("data")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("`data` must be an object"))?;
    let allowed: &[&str] = if t == TOOL_CALL_CHUNKS {
        &["turn", "step", "index", "dt", "id", "name", "args"]
    } else {
        &["turn", "step", "index", "dt", "texts"]
    };
    if let Some(k) = data.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!("unknown row data field `{k}`")));
    }
    let turn = get_u64(data, "turn")?;
    let step = get_u64(data, "step")?;
    let index = u32::try_from(get_u64(data, "index")?).map_err(|_| bad("`index` too large"))?;
    let dt: Vec<i64> = data
        .get("dt")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("`dt` must be an array"))?
        .iter()
        .map(|v| {
            v.as_i64()
                .filter(|v| v.unsigned_abs() <= MAX_SAFE_INTEGER)
                .ok_or_else(|| bad("`dt` must hold safe integers"))
        })
        .collect::<Result<_, _>>()?;
    let (parts, id, name) = if t == TOOL_CALL_CHUNKS {
        let id = data
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("`id` must be a string"))?;
        let name = match data.get("name") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(bad("`name` must be a string")),
        };
        (get_strs(data, "args")?, Some(CallId::new(id)), name)
    } else {
        (get_strs(data, "texts")?, None, None)
    };
    if parts.is_empty() {
        return Err(bad("row has no members"));
    }
    if dt.len() + 1 != parts.len() {
        return Err(bad(format!(
            "`dt` has {} entries for {} members",
            dt.len(),
            parts.len()
        )));
    }
    let mut out = Vec::with_capacity(parts.len());
    let mut time = time0;
    for (k, part) in parts.into_iter().enumerate() {
        if k > 0 {
            time = time
                .checked_add_signed(dt[k - 1])
                .filter(|t| *t <= MAX_SAFE_INTEGER)
                .ok_or_else(|| bad("member time leaves the safe non-negative range"))?;
        }
        let text = part.to_owned();
        let chunk = match t {
            TEXT_CHUNKS => StreamChunk::TextDelta { index, text },
            REASONING_CHUNKS => StreamChunk::ReasoningDelta { index, text },
            _ => StreamChunk::ToolCallDelta {
                index,
                id: id.clone().unwrap_or_else(|| CallId::new("")),
                name: name.clone(),
                arguments_delta: text,
            },
        };
        out.push(SessionEvent {
            kind: EventType::ASSISTANT_CHUNK,
            seq: seq0 + k as u64,
            time,
            data: EventData::AssistantChunk(AssistantChunkData { turn, step, chunk }),
            ignorable: false,
            source_event_seqs: None,
            surface_op: None,
            residual: None,
        });
    }
    Ok(out)
}

/// Decodes stored records (events verbatim or packed rows) into events, in order.
///
/// # Errors
/// [`SessionError::MalformedPackedRow`] for a bad row, [`SessionError::MalformedEvent`] for a
/// bad event record. Contiguity is not checked here (the session does that).
pub fn unpack(records: impl IntoIterator<Item = Value>) -> Result<Vec<SessionEvent>, SessionError> {
    let mut out = Vec::new();
    for r in records {
        let is_row = r
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(is_packed_row_type);
        if is_row {
            out.extend(expand_row(&r)?);
        } else {
            out.push(SessionEvent::from_value(r)?);
        }
    }
    Ok(out)
}
