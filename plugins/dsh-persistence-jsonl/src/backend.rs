//! The JSONL [`StorageBackend`]: `<root>/--<projectKey(cwd)>--/<encodeSegment(id)>/session.jsonl`,
//! a header line then one storage record per line (events verbatim or packed chunk rows).
//!
//! Behaviour: `docs/persistence.md` ("JSONL backend"). Writes: first append publishes
//! header + batch through a temp file, fsync and a no-overwrite hard link; later appends append +
//! fsync and truncate back on failure. Reads stream the file line by line (`BufReader`), so a
//! resume holds the decoded events plus one line buffer (memory ≈ decoded log + longest line).
//! Only an unterminated final line is a torn tail; any other malformed line, a seq gap or a bad
//! packed row is [`PersistenceError::Corruption`]. Listing reads only each log's first line.
//! With `compression: zstd` the log is `session.jsonl.zstd`: concatenated independent checksummed
//! zstd frames (one for the header line, one per append batch); such a log is read into memory
//! (compressed size + decoded events), a torn final frame keeps its complete records (re-appended
//! on repair), and a complete frame that fails its checksum is corruption. A root is
//! single-encoding: a log of the other encoding is refused.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_session::SessionEvent;

use dsh_persistence::{
    PersistenceError, Result, Revision, SessionHeader, SessionLocation, SessionSnapshot,
    StorageBackend, StoredPrefix, codec, header_to_line, parse_header_line,
};

use crate::fsio::{SessionLock, append_durable, publish_new, truncate_durable};
use crate::path::{LOG_FILE_NAME, ZSTD_LOG_FILE_NAME, encode_segment};

/// Largest header line `list` reads (bytes); a longer first line is skipped as not-a-header.
pub const MAX_HEADER_LINE_BYTES: usize = 1 << 20;

/// JSONL backend configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonlConfig {
    /// Root directory of all session logs.
    pub root: PathBuf,
    /// Pack runs of ≥3 chunk deltas into packed rows (default `true`).
    pub pack_chunks: bool,
    /// Physical encoding of new and read logs (a root is single-encoding).
    pub compression: Compression,
}

/// Physical encoding of JSONL logs (`compression` setting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Plain `session.jsonl` (dsh's default).
    #[default]
    None,
    /// `session.jsonl.zstd`: concatenated independent checksummed zstd frames — one for the
    /// header line, one per append batch (upstream's default layout).
    Zstd,
}

impl Compression {
    /// The log file name of this encoding.
    pub fn file_name(self) -> &'static str {
        match self {
            Self::None => LOG_FILE_NAME,
            Self::Zstd => ZSTD_LOG_FILE_NAME,
        }
    }
}

impl Default for JsonlConfig {
    fn default() -> Self {
        Self {
            root: PathBuf::from(".dsh/sessions"),
            pack_chunks: true,
            compression: Compression::None,
        }
    }
}

struct Writer {
    _lock: SessionLock,
    path: PathBuf,
    file: Option<File>,
    committed_len: u64,
    next_seq: u64,
}

/// The JSONL [`StorageBackend`]; wrap it in [`dsh_persistence::Persistence`] for the seam.
pub struct JsonlBackend {
    config: JsonlConfig,
    writers: Mutex<HashMap<String, Arc<Mutex<Writer>>>>,
}

fn lock_mutex<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The modification time of a file, epoch ms.
fn mtime_ms(meta: &std::fs::Metadata) -> Option<u64> {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The revision of a file: `dev:ino:size:mtime_ns` (unix) or `size:mtime_ns`.
fn file_revision(meta: &std::fs::Metadata) -> Revision {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Revision(format!(
            "{}:{}:{}:{}",
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime() as i128 * 1_000_000_000 + i128::from(meta.mtime_nsec())
        ))
    }
    #[cfg(not(unix))]
    {
        let ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        Revision(format!("{}:{}", meta.len(), ns))
    }
}

/// Result of scanning one log file.
#[derive(Debug)]
pub struct ScannedLog {
    /// The stored prefix (torn marker = byte offset of the torn final line).
    pub prefix: StoredPrefix,
    /// Byte length of the committed prefix (header + complete records).
    pub committed_len: u64,
    /// Number of events in the committed prefix (the stored next seq).
    pub next_seq: u64,
}

/// Streams and validates a JSONL log. `id` names the session in errors; `from_seq` drops events
/// below it after validation (use 0 for all).
///
/// # Errors
/// [`PersistenceError::Corruption`] (missing/bad header, malformed complete line, bad packed row,
/// seq gap; `line` is 1-based); [`PersistenceError::FormatUnsupported`] (header version);
/// [`PersistenceError::Io`].
pub fn scan_log(path: &Path, id: &str, from_seq: u64) -> Result<ScannedLog> {
    if path.extension().is_some_and(|e| e == "zstd") {
        return scan_zstd_log(path, id, from_seq);
    }
    let file = File::open(path).map_err(|e| PersistenceError::io("open", path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| PersistenceError::io("stat", path, e))?;
    let revision = file_revision(&meta);
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut buf = Vec::with_capacity(4096);
    let n = reader
        .read_until(b'\n', &mut buf)
        .map_err(|e| PersistenceError::io("read", path, e))?;
    if n == 0 || buf.last() != Some(&b'\n') {
        return Err(PersistenceError::corruption(
            id,
            Some(1),
            "empty or header-less session log",
        ));
    }
    let header = parse_header_line(&buf[..n - 1], id, Some(path))?;
    let mut committed = n as u64;
    let mut events: Vec<SessionEvent> = Vec::new();
    let mut next_seq: u64 = 0;
    let mut line_no: u64 = 1;
    let mut torn = None;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| PersistenceError::io("read", path, e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if buf.last() != Some(&b'\n') {
            // Unterminated final record: a torn tail (only possible at EOF).
            torn = Some(committed);
            break;
        }
        let value: serde_json::Value = serde_json::from_slice(&buf[..n - 1]).map_err(|e| {
            PersistenceError::corruption(
                id,
                Some(line_no),
                format!("unparsable committed record: {e}"),
            )
        })?;
        let decoded = codec::decode_record(id, Some(line_no), value)?;
        for e in decoded {
            if e.seq != next_seq {
                return Err(PersistenceError::corruption(
                    id,
                    Some(line_no),
                    format!(
                        "seq gap in committed region (expected {next_seq}, got {})",
                        e.seq
                    ),
                ));
            }
            next_seq += 1;
            if e.seq >= from_seq {
                events.push(e);
            }
        }
        committed += n as u64;
    }
    Ok(ScannedLog {
        prefix: StoredPrefix {
            header,
            events,
            revision,
            torn_marker: torn,
            rewrite_from: None,
        },
        committed_len: committed,
        next_seq,
    })
}

/// Serializes events as JSONL record lines, each terminated by `\n`. With `pack` on, runs of
/// packable `assistant/chunk` deltas become packed rows ([`codec::encode_records`]).
pub fn encode_lines(events: &[Arc<SessionEvent>], pack: bool, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    if pack {
        for record in codec::encode_records(events, true) {
            let _ = serde_json::to_writer(&mut *out, &record);
            out.push(b'\n');
        }
    } else {
        for e in events {
            let _ = serde_json::to_writer(&mut *out, &**e);
            out.push(b'\n');
        }
    }
}

/// Encodes `bytes` as one independent zstd frame (level 3) with a content checksum.
///
/// # Errors
/// [`PersistenceError::Backend`] if the encoder fails.
pub fn zstd_frame(bytes: &[u8]) -> Result<Vec<u8>> {
    let err = |e: std::io::Error| PersistenceError::Backend {
        backend: "jsonl",
        detail: format!("zstd encode: {e}"),
    };
    let mut enc =
        zstd::stream::Encoder::new(Vec::with_capacity(bytes.len() / 3 + 64), 3).map_err(err)?;
    enc.include_checksum(true).map_err(err)?;
    enc.include_contentsize(true).map_err(err)?;
    enc.set_pledged_src_size(Some(bytes.len() as u64))
        .map_err(err)?;
    std::io::Write::write_all(&mut enc, bytes).map_err(err)?;
    enc.finish().map_err(err)
}

/// Decodes one complete record line into `events`, checking contiguity.
fn consume_line(
    id: &str,
    line_no: u64,
    line: &[u8],
    next_seq: &mut u64,
    from_seq: u64,
    events: &mut Vec<SessionEvent>,
) -> Result<()> {
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| {
        PersistenceError::corruption(
            id,
            Some(line_no),
            format!("unparsable committed record: {e}"),
        )
    })?;
    for e in codec::decode_record(id, Some(line_no), value)? {
        if e.seq != *next_seq {
            return Err(PersistenceError::corruption(
                id,
                Some(line_no),
                format!(
                    "seq gap in committed region (expected {next_seq}, got {})",
                    e.seq
                ),
            ));
        }
        *next_seq += 1;
        if e.seq >= from_seq {
            events.push(e);
        }
    }
    Ok(())
}

/// Scans a zstd-framed log: frame 0 holds exactly the header line; every later frame holds
/// complete record lines. The file is read into memory (memory ≈ compressed size + one decoded
/// frame + the decoded events). A complete frame that fails to decode (checksum) is
/// `Corruption`; an incomplete final frame is a torn tail: its complete lines are kept and
/// marked for re-append (`rewrite_from`), the tail is cut at the frame start.
///
/// # Errors
/// As [`scan_log`].
pub fn scan_zstd_log(path: &Path, id: &str, from_seq: u64) -> Result<ScannedLog> {
    let mut file = File::open(path).map_err(|e| PersistenceError::io("open", path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| PersistenceError::io("stat", path, e))?;
    let revision = file_revision(&meta);
    let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut data)
        .map_err(|e| PersistenceError::io("read", path, e))?;
    let complete = |pos: usize| -> Option<usize> {
        zstd::zstd_safe::find_frame_compressed_size(&data[pos..])
            .ok()
            .filter(|n| pos + n <= data.len())
    };
    let decode = |frame: &[u8], frame_no: u64| -> Result<Vec<u8>> {
        zstd::stream::decode_all(frame).map_err(|e| {
            PersistenceError::corruption(
                id,
                None,
                format!("zstd frame {frame_no} does not decode: {e}"),
            )
        })
    };
    let Some(hsize) = complete(0) else {
        return Err(PersistenceError::corruption(
            id,
            Some(1),
            "missing or incomplete header frame",
        ));
    };
    let hbytes = decode(&data[..hsize], 0)?;
    if hbytes.last() != Some(&b'\n') || hbytes.iter().filter(|b| **b == b'\n').count() != 1 {
        return Err(PersistenceError::corruption(
            id,
            Some(1),
            "header frame is not exactly one line",
        ));
    }
    let header = parse_header_line(&hbytes[..hbytes.len() - 1], id, Some(path))?;
    let mut pos = hsize;
    let mut events = Vec::new();
    let mut next_seq = 0u64;
    let mut line_no = 1u64;
    let mut frame_no = 0u64;
    let mut torn = None;
    let mut rewrite_from = None;
    while pos < data.len() {
        frame_no += 1;
        match complete(pos) {
            Some(size) => {
                let text = decode(&data[pos..pos + size], frame_no)?;
                if text.last() != Some(&b'\n') {
                    return Err(PersistenceError::corruption(
                        id,
                        None,
                        format!("zstd frame {frame_no} ends inside a record"),
                    ));
                }
                for line in text[..text.len() - 1].split(|b| *b == b'\n') {
                    line_no += 1;
                    consume_line(id, line_no, line, &mut next_seq, from_seq, &mut events)?;
                }
                pos += size;
            }
            None => {
                // Torn final frame: keep its complete lines (best effort), cut from its start.
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
                let keep = partial
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |i| i + 1);
                let first = next_seq;
                if keep > 0 {
                    for line in partial[..keep - 1].split(|b| *b == b'\n') {
                        line_no += 1;
                        // A damaged record inside a torn frame ends the salvage, not the load.
                        let mut probe_seq = next_seq;
                        let mut probe = Vec::new();
                        if consume_line(id, line_no, line, &mut probe_seq, 0, &mut probe).is_err() {
                            break;
                        }
                        next_seq = probe_seq;
                        events.extend(probe.into_iter().filter(|e| e.seq >= from_seq));
                    }
                }
                torn = Some(pos as u64);
                if next_seq > first {
                    rewrite_from = Some(first);
                }
                break;
            }
        }
    }
    let committed = torn.unwrap_or(data.len() as u64);
    Ok(ScannedLog {
        prefix: StoredPrefix {
            header,
            events,
            revision,
            torn_marker: torn,
            rewrite_from,
        },
        committed_len: committed,
        next_seq,
    })
}

/// Header, revision and modification time (epoch ms) of a log.
type HeaderRead = (SessionHeader, Revision, Option<u64>);

/// Reads only the first line of a log and parses it as a header (for listing). Reads at most
/// [`MAX_HEADER_LINE_BYTES`]; usually one 4 KiB read.
///
/// # Errors
/// As [`parse_header_line`], plus I/O and an over-long/unterminated first line (`Corruption`).
fn read_header_with(path: &Path, buf: &mut Vec<u8>) -> Result<HeaderRead> {
    if path.extension().is_some_and(|e| e == "zstd") {
        return read_zstd_header(path);
    }
    let mut file = File::open(path).map_err(|e| PersistenceError::io("open", path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| PersistenceError::io("stat", path, e))?;
    buf.clear();
    let mut chunk = [0u8; 4096];
    let end = loop {
        let n = file
            .read(&mut chunk)
            .map_err(|e| PersistenceError::io("read", path, e))?;
        if n == 0 {
            break None;
        }
        let start = buf.len();
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf[start..].iter().position(|b| *b == b'\n') {
            break Some(start + i);
        }
        if buf.len() > MAX_HEADER_LINE_BYTES {
            break None;
        }
    };
    let Some(end) = end else {
        let hint = path.display().to_string();
        return Err(PersistenceError::corruption(
            &hint,
            Some(1),
            "empty or header-less session log",
        ));
    };
    let hint = path.display().to_string();
    Ok((
        parse_header_line(&buf[..end], &hint, Some(path))?,
        file_revision(&meta),
        mtime_ms(&meta),
    ))
}

/// Decodes only the header frame of a zstd log (reads at most [`MAX_HEADER_LINE_BYTES`]).
fn read_zstd_header(path: &Path) -> Result<HeaderRead> {
    let file = File::open(path).map_err(|e| PersistenceError::io("open", path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| PersistenceError::io("stat", path, e))?;
    let mut data = Vec::new();
    file.take(MAX_HEADER_LINE_BYTES as u64)
        .read_to_end(&mut data)
        .map_err(|e| PersistenceError::io("read", path, e))?;
    let hint = path.display().to_string();
    let size = zstd::zstd_safe::find_frame_compressed_size(&data)
        .ok()
        .filter(|n| *n <= data.len())
        .ok_or_else(|| {
            PersistenceError::corruption(&hint, Some(1), "missing or incomplete header frame")
        })?;
    let text = zstd::stream::decode_all(&data[..size])
        .map_err(|e| PersistenceError::corruption(&hint, Some(1), format!("header frame: {e}")))?;
    let end = text
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| PersistenceError::corruption(&hint, Some(1), "header frame has no line"))?;
    Ok((
        parse_header_line(&text[..end], &hint, Some(path))?,
        file_revision(&meta),
        mtime_ms(&meta),
    ))
}

/// Reads the headers of `logs` into `out` (missing logs skipped, unreadable ones logged).
fn read_headers(logs: &[PathBuf], out: &mut Vec<SessionSnapshot>) {
    let mut buf = Vec::with_capacity(4096);
    for log in logs {
        match read_header_with(log, &mut buf) {
            Ok((header, revision, updated_at)) => out.push(SessionSnapshot {
                header,
                revision,
                updated_at,
            }),
            Err(PersistenceError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %log.display(), error = %e, "skipping unreadable session log")
            }
        }
    }
}

impl JsonlBackend {
    /// A backend over `config.root` (created lazily on first write).
    pub fn new(config: JsonlConfig) -> Self {
        Self {
            config,
            writers: Mutex::new(HashMap::new()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &JsonlConfig {
        &self.config
    }

    /// Finds the stored log of `id` under any project directory (ids are unique per root).
    ///
    /// # Errors
    /// [`PersistenceError::FormatUnsupported`]-free; I/O errors reading the root;
    /// [`PersistenceError::InvalidArgument`] for an empty id.
    pub fn find_log(&self, id: &str) -> Result<Option<PathBuf>> {
        if let Some(w) = lock_mutex(&self.writers).get(id) {
            return Ok(Some(lock_mutex(w).path.clone()));
        }
        let segment = encode_segment(id)?;
        let entries = match std::fs::read_dir(&self.config.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(PersistenceError::io("read-dir", &self.config.root, e)),
        };
        let own = self.config.compression.file_name();
        let other = match self.config.compression {
            Compression::None => ZSTD_LOG_FILE_NAME,
            Compression::Zstd => LOG_FILE_NAME,
        };
        for entry in entries.flatten() {
            let dir = entry.path().join(&segment);
            let log = dir.join(own);
            if log.is_file() {
                return Ok(Some(log));
            }
            if dir.join(other).is_file() {
                return Err(PersistenceError::Backend {
                    backend: "jsonl",
                    detail: format!(
                        "{} uses the other encoding; a root is single-encoding (configured: {own})",
                        dir.join(other).display()
                    ),
                });
            }
        }
        Ok(None)
    }

    /// The log path of a header under this root and encoding.
    fn path_of(&self, header: &SessionHeader) -> Result<PathBuf> {
        Ok(
            crate::path::session_dir(&self.config.root, header.cwd.as_deref(), &header.id)?
                .join(self.config.compression.file_name()),
        )
    }

    /// Serialises a batch in this root's encoding (plain lines, or one zstd frame).
    fn encode_batch(&self, events: &[Arc<SessionEvent>]) -> Result<Vec<u8>> {
        let mut lines = Vec::with_capacity(events.len() * 256);
        encode_lines(events, self.config.pack_chunks, &mut lines);
        match self.config.compression {
            Compression::None => Ok(lines),
            Compression::Zstd => zstd_frame(&lines),
        }
    }

    /// Appends a batch through a locked writer: publishes header + batch for a new log, else
    /// appends (truncating back on failure).
    fn append_locked(
        &self,
        w: &mut Writer,
        header: &SessionHeader,
        events: &[Arc<SessionEvent>],
    ) -> Result<()> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        if first.seq != w.next_seq {
            return Err(PersistenceError::SeqMismatch {
                id: header.id.clone(),
                expected: w.next_seq,
                got: first.seq,
            });
        }
        let batch = self.encode_batch(events)?;
        if w.file.is_none() {
            let mut head = header_to_line(header).into_bytes();
            head.push(b'\n');
            let mut bytes = match self.config.compression {
                Compression::None => head,
                Compression::Zstd => zstd_frame(&head)?,
            };
            bytes.extend_from_slice(&batch);
            let file = publish_new(&w.path, &bytes, &header.id)?;
            w.file = Some(file);
            w.committed_len = bytes.len() as u64;
        } else {
            let (committed, path) = (w.committed_len, w.path.clone());
            let Some(file) = w.file.as_mut() else {
                return Err(PersistenceError::Closed);
            };
            w.committed_len = append_durable(file, &path, committed, &batch)?;
        }
        w.next_seq += events.len() as u64;
        Ok(())
    }

    fn writer(&self, id: &str) -> Option<Arc<Mutex<Writer>>> {
        lock_mutex(&self.writers).get(id).cloned()
    }

    /// Creates the writer for a session: takes the lock; an existing log is scanned for its
    /// committed length and next seq (a torn tail is cut).
    fn open_writer(&self, header: &SessionHeader) -> Result<Arc<Mutex<Writer>>> {
        let path = self.path_of(header)?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let lock = SessionLock::acquire(&dir, &header.id)?;
        let mut salvage = Vec::new();
        let (file, committed_len, next_seq) = if path.is_file() {
            let scan = scan_log(&path, &header.id, 0)?;
            let mut next = scan.next_seq;
            if scan.prefix.torn_marker.is_some() {
                truncate_durable(&path, scan.committed_len)?;
                if let Some(from) = scan.prefix.rewrite_from {
                    salvage = scan.prefix.events[usize::try_from(from)
                        .unwrap_or(usize::MAX)
                        .min(scan.prefix.events.len())..]
                        .iter()
                        .cloned()
                        .map(Arc::new)
                        .collect();
                    next = from;
                }
            }
            let file = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .map_err(|e| PersistenceError::io("open", &path, e))?;
            (Some(file), scan.committed_len, next)
        } else {
            (None, 0, 0)
        };
        let w = Arc::new(Mutex::new(Writer {
            _lock: lock,
            path,
            file,
            committed_len,
            next_seq,
        }));
        lock_mutex(&self.writers).insert(header.id.clone(), w.clone());
        if !salvage.is_empty() {
            self.append_locked(&mut lock_mutex(&w), header, &salvage)?;
        }
        Ok(w)
    }
}

/// The repair batch of `adopt`: salvaged records of a torn zstd frame (if any), then the closers.
fn repair_batch(prefix: &StoredPrefix, closers: &[Arc<SessionEvent>]) -> Vec<Arc<SessionEvent>> {
    let mut batch: Vec<Arc<SessionEvent>> = match prefix.rewrite_from {
        Some(from) => prefix
            .events
            .iter()
            .filter(|e| e.seq >= from)
            .cloned()
            .map(Arc::new)
            .collect(),
        None => Vec::new(),
    };
    batch.extend(closers.iter().cloned());
    batch
}

impl StorageBackend for JsonlBackend {
    fn name(&self) -> &'static str {
        "jsonl"
    }

    fn locate(&self, header: &SessionHeader) -> Option<SessionLocation> {
        self.path_of(header).ok().map(|path| SessionLocation {
            kind: "jsonl",
            path,
        })
    }

    fn exists(&self, id: &str) -> Result<bool> {
        Ok(self.find_log(id)?.is_some())
    }

    fn load_stored(&self, id: &str) -> Result<Option<StoredPrefix>> {
        let Some(path) = self.find_log(id)? else {
            return Ok(None);
        };
        let scan = scan_log(&path, id, 0)?;
        Ok(Some(scan.prefix))
    }

    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let w = match self.writer(&header.id) {
            Some(w) => w,
            None => self.open_writer(header)?,
        };
        let mut w = lock_mutex(&w);
        self.append_locked(&mut w, header, events)
    }

    fn adopt(&self, prefix: &StoredPrefix, closers: &[Arc<SessionEvent>]) -> Result<()> {
        let id = &prefix.header.id;
        if let Some(w) = self.writer(id) {
            // Already the writer in this process: the stored state is ours.
            let mut w = lock_mutex(&w);
            if let Some(off) = prefix.torn_marker {
                truncate_durable(&w.path, off)?;
                w.committed_len = off;
            }
            if let Some(from) = prefix.rewrite_from {
                w.next_seq = from;
            }
            let batch = repair_batch(prefix, closers);
            return self.append_locked(&mut w, &prefix.header, &batch);
        }
        let path = self
            .find_log(id)?
            .ok_or_else(|| PersistenceError::NotFound { id: id.clone() })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let lock = SessionLock::acquire(&dir, id)?;
        let meta = std::fs::metadata(&path).map_err(|e| PersistenceError::io("stat", &path, e))?;
        if file_revision(&meta) != prefix.revision {
            return Err(PersistenceError::Conflict { id: id.clone() });
        }
        let committed_len = match prefix.torn_marker {
            Some(off) => {
                truncate_durable(&path, off)?;
                off
            }
            None => meta.len(),
        };
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| PersistenceError::io("open", &path, e))?;
        let next_seq = prefix.rewrite_from.unwrap_or(prefix.events.len() as u64);
        let w = Arc::new(Mutex::new(Writer {
            _lock: lock,
            path,
            file: Some(file),
            committed_len,
            next_seq,
        }));
        lock_mutex(&self.writers).insert(id.clone(), w.clone());
        let batch = repair_batch(prefix, closers);
        self.append_locked(&mut lock_mutex(&w), &prefix.header, &batch)
    }

    fn list(&self) -> Result<Vec<SessionSnapshot>> {
        let projects: Vec<PathBuf> = match std::fs::read_dir(&self.config.root) {
            Ok(e) => e.flatten().map(|e| e.path()).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(PersistenceError::io("read-dir", &self.config.root, e)),
        };
        let mut logs = Vec::new();
        for project in projects {
            let Ok(sessions) = std::fs::read_dir(&project) else {
                continue;
            };
            let name = self.config.compression.file_name();
            logs.extend(sessions.flatten().map(|s| s.path().join(name)));
        }
        // Headers are read on up to 4 threads (one open + one read + one fstat per log).
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4);
        let per = logs.len().div_ceil(threads).max(1);
        let mut out = Vec::new();
        std::thread::scope(|scope| {
            let handles: Vec<_> = logs
                .chunks(per)
                .map(|group| {
                    scope.spawn(move || {
                        let mut part = Vec::new();
                        read_headers(group, &mut part);
                        part
                    })
                })
                .collect();
            for h in handles {
                if let Ok(part) = h.join() {
                    out.extend(part);
                }
            }
        });
        out.sort_by(|a, b| a.header.id.cmp(&b.header.id));
        Ok(out)
    }

    fn release(&self, id: &str) {
        lock_mutex(&self.writers).remove(id);
    }

    fn session_dir(&self, header: &SessionHeader) -> Option<PathBuf> {
        crate::path::session_dir(&self.config.root, header.cwd.as_deref(), &header.id).ok()
    }

    fn delete(&self, id: &str) -> Result<()> {
        let path = self
            .find_log(id)?
            .ok_or_else(|| PersistenceError::NotFound { id: id.to_owned() })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        // The lock first: a live writer (this or another process) refuses the delete.
        let lock = SessionLock::acquire(&dir, id)?;
        // The log goes first, so an interrupted delete never leaves a loadable half.
        std::fs::remove_file(&path).map_err(|e| PersistenceError::io("remove", &path, e))?;
        std::fs::remove_dir_all(&dir).map_err(|e| PersistenceError::io("remove-dir", &dir, e))?;
        drop(lock);
        Ok(())
    }
}
