//! Reading a standalone JSONL log (plain or zstd-framed) into a [`RawLog`] for verification and
//! import: every complete line becomes a record or a read failure in place, without stopping at
//! the first problem, and nothing is decoded beyond JSON.
//!
//! Behaviour: `docs/persistence.md` ("Verify", "JSONL backend").

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use dsh_persistence::{RawItem, RawLog, VerifyError, parse_header_line};
use serde_json::Value;

/// The four magic bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

fn finding(code: &str, message: impl Into<String>, line: Option<u64>) -> RawItem {
    RawItem::Error(VerifyError {
        code: code.to_owned(),
        message: message.into(),
        line,
    })
}

const CORRUPTION: &str = "SESSION_PERSISTENCE_CORRUPTION";
const IO: &str = "SESSION_PERSISTENCE_IO";

/// Whether `path` is a JSONL log: its name ends in `.jsonl`, `.jsonl.zstd`, `.zstd` or `.zst`,
/// or its content starts with a zstd frame or a `{`.
pub fn recognizes(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if [".jsonl", ".zstd", ".zst"]
        .iter()
        .any(|s| name.ends_with(s))
    {
        return true;
    }
    let mut head = [0u8; 4];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    head[..n].starts_with(&ZSTD_MAGIC) || (n > 0 && head[0] == b'{')
}

fn is_zstd(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name.ends_with(".zstd") || name.ends_with(".zst") {
        return true;
    }
    let mut head = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head == ZSTD_MAGIC)
}

/// Reads the log at `path` (see the module docs).
pub fn read_log(path: &Path) -> RawLog {
    let mut raw = RawLog {
        path: path.to_path_buf(),
        ..RawLog::default()
    };
    let mut header_line = |raw: &mut RawLog, bytes: &[u8]| {
        let hint = path.display().to_string();
        match parse_header_line(bytes, &hint, Some(path)) {
            Ok(h) => raw.header = Some(h),
            Err(e) => raw
                .items
                .push(RawItem::Error(VerifyError::from_error(&e, Some(1)))),
        }
    };
    if is_zstd(path) {
        read_zstd(path, &mut raw, &mut header_line);
    } else {
        read_plain(path, &mut raw, &mut header_line);
    }
    raw
}

/// One complete record line as an item.
fn record(line_no: u64, bytes: &[u8]) -> RawItem {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(value) => RawItem::Record {
            line: Some(line_no),
            value,
        },
        Err(e) => finding(
            CORRUPTION,
            format!("unparsable committed record: {e}"),
            Some(line_no),
        ),
    }
}

fn read_plain(path: &Path, raw: &mut RawLog, header_line: &mut dyn FnMut(&mut RawLog, &[u8])) {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            raw.items
                .push(finding(IO, format!("cannot open: {e}"), None));
            return;
        }
    };
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut buf = Vec::with_capacity(4096);
    match reader.read_until(b'\n', &mut buf) {
        Ok(0) => {
            raw.items
                .push(finding(CORRUPTION, "the file is empty", Some(1)));
            return;
        }
        Ok(_) => {}
        Err(e) => {
            raw.items
                .push(finding(IO, format!("read failed: {e}"), Some(1)));
            return;
        }
    }
    if buf.last() != Some(&b'\n') {
        raw.items.push(finding(
            CORRUPTION,
            "the header line is unterminated (no events)",
            Some(1),
        ));
    }
    let header = buf.strip_suffix(b"\n").unwrap_or(&buf).to_vec();
    header_line(raw, &header);
    let mut line_no = 1u64;
    loop {
        buf.clear();
        let n = match reader.read_until(b'\n', &mut buf) {
            Ok(n) => n,
            Err(e) => {
                raw.items
                    .push(finding(IO, format!("read failed: {e}"), Some(line_no + 1)));
                break;
            }
        };
        if n == 0 {
            break;
        }
        line_no += 1;
        if buf.last() != Some(&b'\n') {
            raw.torn_tail = true;
            break;
        }
        raw.items.push(record(line_no, &buf[..n - 1]));
    }
}

fn read_zstd(path: &Path, raw: &mut RawLog, header_line: &mut dyn FnMut(&mut RawLog, &[u8])) {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) => {
            raw.items
                .push(finding(IO, format!("cannot read: {e}"), None));
            return;
        }
    };
    if data.is_empty() {
        raw.items
            .push(finding(CORRUPTION, "the file is empty", Some(1)));
        return;
    }
    let complete = |pos: usize| -> Option<usize> {
        zstd::zstd_safe::find_frame_compressed_size(&data[pos..])
            .ok()
            .filter(|n| pos + n <= data.len())
    };
    let Some(hsize) = complete(0) else {
        raw.items.push(finding(
            CORRUPTION,
            "missing or incomplete header frame",
            Some(1),
        ));
        return;
    };
    let head = match zstd::stream::decode_all(&data[..hsize]) {
        Ok(t) => t,
        Err(e) => {
            raw.items.push(finding(
                CORRUPTION,
                format!("header frame does not decode: {e}"),
                Some(1),
            ));
            return;
        }
    };
    if head.last() != Some(&b'\n') || head.iter().filter(|b| **b == b'\n').count() != 1 {
        raw.items.push(finding(
            CORRUPTION,
            "header frame is not exactly one line",
            Some(1),
        ));
    }
    let first = head.split(|b| *b == b'\n').next().unwrap_or_default();
    header_line(raw, first);
    let mut pos = hsize;
    let mut line_no = 1u64;
    let mut frame_no = 0u64;
    while pos < data.len() {
        frame_no += 1;
        let Some(size) = complete(pos) else {
            // Torn final frame: a load keeps its complete lines and cuts the rest.
            raw.torn_tail = true;
            let mut partial = Vec::new();
            if let Ok(mut dec) = zstd::stream::read::Decoder::with_buffer(&data[pos..]) {
                let mut chunk = [0u8; 8192];
                loop {
                    match dec.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => partial.extend_from_slice(&chunk[..n]),
                    }
                }
            }
            if let Some(end) = partial.iter().rposition(|b| *b == b'\n') {
                for line in partial[..end].split(|b| *b == b'\n') {
                    line_no += 1;
                    match record(line_no, line) {
                        RawItem::Error(_) => break,
                        item => raw.items.push(item),
                    }
                }
            }
            return;
        };
        let text = match zstd::stream::decode_all(&data[pos..pos + size]) {
            Ok(t) => t,
            Err(e) => {
                raw.items.push(finding(
                    CORRUPTION,
                    format!("zstd frame {frame_no} does not decode: {e}"),
                    Some(line_no + 1),
                ));
                return;
            }
        };
        if text.last() != Some(&b'\n') {
            raw.items.push(finding(
                CORRUPTION,
                format!("zstd frame {frame_no} ends inside a record"),
                Some(line_no + 1),
            ));
            return;
        }
        for line in text[..text.len() - 1].split(|b| *b == b'\n') {
            line_no += 1;
            raw.items.push(record(line_no, line));
        }
        pos += size;
    }
}
