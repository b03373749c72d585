//! Bounded output capture: a head+tail collector for foreground runs and an incremental ring for
//! background jobs. Memory stays bounded however much a command writes; totals (bytes, lines)
//! are always counted, and non-UTF-8 output is decoded lossily and flagged. A foreground
//! collector given a [`Spool`] also writes the whole stream to a file from the moment it
//! outgrows its cap, so the bytes the head+tail text leaves out stay readable; the marker line
//! then names that file (the one truncation layer of a command's output).
//!
//! Behaviour notes: `docs/tools.md` ("Process executor"; "Shell and job tools": bug case BC-20 — keep head and
//! tail, explicit marker with totals and omitted amount, a single huge line is cut by bytes —
//! and upstream's `CollectedOutput`; "Spill": the output files).

use std::collections::VecDeque;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// One captured stream of a finished foreground run (JSON: camelCase).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CollectedOutput {
    /// The kept text: the whole stream, or head + truncation marker line + tail.
    pub text: String,
    /// True when bytes were omitted (the stream exceeded its cap).
    pub truncated: bool,
    /// Bytes the stream produced in total (bytes).
    pub total_bytes: u64,
    /// Lines the stream produced in total (newlines, plus one for an unterminated last line).
    pub total_lines: u64,
    /// Bytes left out of `text` (bytes; 0 when not truncated).
    pub omitted_bytes: u64,
    /// True when the kept bytes were not valid UTF-8 and were decoded with U+FFFD replacements.
    pub invalid_utf8: bool,
    /// Absolute path of the file holding the stream's bytes from the first one on; present only
    /// when the stream outgrew its cap and the collector had a [`Spool`] whose file could be
    /// created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_file: Option<String>,
    /// Bytes in `output_file` (bytes): `total_bytes`, or fewer when the run's disk cap or a
    /// write error stopped the file; present with `output_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_file_bytes: Option<u64>,
}

/// Where a foreground run stores the whole of each stream that outgrows its in-memory cap
/// (`ProcessSpec::output_files`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFiles {
    /// The folder of the files: created (mode 0700, with its parents) when missing; a path that
    /// is not a real directory (e.g. a symlink) gets no file.
    pub dir: PathBuf,
    /// Name hint: a stream's file is `<12 random hex>-<name>-<stdout|stderr>.txt`, created
    /// exclusively with mode 0600 (characters outside `[A-Za-z0-9._-]` become `_`).
    pub name: String,
    /// Disk cap of one run, both streams together (bytes); the bytes beyond it are counted, not
    /// stored.
    pub max_bytes: u64,
}

/// The bytes a run may still write to its output files (bytes), shared by its streams.
#[derive(Debug, Clone)]
pub struct DiskBudget {
    cap: u64,
    left: Arc<AtomicU64>,
}

impl DiskBudget {
    /// A budget of `cap` bytes.
    pub fn new(cap: u64) -> Self {
        Self {
            cap,
            left: Arc::new(AtomicU64::new(cap)),
        }
    }

    /// Takes up to `want` bytes; returns how many were granted (bytes).
    fn take(&self, want: u64) -> u64 {
        let mut granted = 0;
        let _ = self
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                granted = left.min(want);
                Some(left - granted)
            });
        granted
    }
}

/// Why a spool file stopped before the end of its stream.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    /// The run's disk cap (bytes) was reached.
    Cap(u64),
    /// Writing failed (the I/O error's text).
    Error(String),
}

/// The file side of a [`HeadTail`]: nothing until the stream outgrows the collector's cap, then
/// every byte of the stream (those already in memory first) up to the run's [`DiskBudget`].
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    file_name: String,
    budget: DiskBudget,
    file: Option<File>,
    path: Option<PathBuf>,
    written: u64,
    stop: Option<Stop>,
    failed: bool,
}

impl Spool {
    /// The spool of stream `stream` (`stdout`/`stderr`) of a run storing its output per `files`,
    /// drawing on the run's shared `budget`. No I/O until the stream outgrows its cap.
    pub fn new(files: &OutputFiles, stream: &str, budget: DiskBudget) -> Self {
        let safe: String = files
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let random = uuid::Uuid::new_v4().simple().to_string();
        Self {
            dir: files.dir.clone(),
            file_name: format!("{}-{safe}-{stream}.txt", &random[..12]),
            budget,
            file: None,
            path: None,
            written: 0,
            stop: None,
            failed: false,
        }
    }

    /// Creates the folder (0700) and the file (exclusively, 0600; a planted symlink fails).
    fn open(&mut self) {
        let made = DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .and_then(|()| std::fs::symlink_metadata(&self.dir))
            .and_then(|m| {
                if m.file_type().is_dir() {
                    Ok(())
                } else {
                    Err(std::io::Error::other("not a directory"))
                }
            });
        let path = self.dir.join(&self.file_name);
        let opened = made.and_then(|()| {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
        });
        match opened {
            Ok(f) => {
                self.file = Some(f);
                self.path = Some(path);
            }
            Err(e) => {
                tracing::warn!(target: "dsh_process", "cannot store the full output in {}: {e}", path.display());
                self.failed = true;
            }
        }
    }

    /// Appends `bytes` within the budget; stops at the cap or at the first write error.
    fn append(&mut self, bytes: &[u8]) {
        if bytes.is_empty() || self.stop.is_some() {
            return;
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let granted = self.budget.take(bytes.len() as u64);
        let take = usize::try_from(granted)
            .unwrap_or(bytes.len())
            .min(bytes.len());
        if let Err(e) = file.write_all(&bytes[..take]) {
            self.stop = Some(Stop::Error(e.to_string()));
            self.file = None;
            return;
        }
        self.written += take as u64;
        if take < bytes.len() {
            self.stop = Some(Stop::Cap(self.budget.cap));
            self.file = None;
        }
    }
}

/// Head+tail collector with a byte cap: the first `cap/2` bytes and the last `cap - cap/2` bytes
/// are kept; everything in between is only counted.
#[derive(Debug)]
pub struct HeadTail {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    newlines: u64,
    last: Option<u8>,
    spool: Option<Spool>,
}

impl HeadTail {
    /// A collector keeping at most `cap` bytes (bytes; `cap` 0 keeps nothing but still counts).
    pub fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Self {
            head_cap,
            tail_cap: cap - head_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            newlines: 0,
            last: None,
            spool: None,
        }
    }

    /// A collector like [`HeadTail::new`] that also writes the whole stream to `spool`'s file
    /// once it outgrows `cap` (the bytes so far first, then every later chunk).
    pub fn with_spool(cap: usize, spool: Spool) -> Self {
        Self {
            spool: Some(spool),
            ..Self::new(cap)
        }
    }

    /// Feeds one chunk.
    pub fn write(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        if let Some(spool) = self.spool.as_mut() {
            let cap = (self.head_cap + self.tail_cap) as u64;
            if spool.path.is_none() && !spool.failed && self.total + chunk.len() as u64 > cap {
                // nothing was dropped yet: head + tail are every byte so far
                spool.open();
                spool.append(&self.head);
                let (a, b) = self.tail.as_slices();
                spool.append(a);
                spool.append(b);
            }
            spool.append(chunk);
        }
        self.total += chunk.len() as u64;
        self.newlines += count_newlines(chunk);
        self.last = chunk.last().copied();
        let mut rest = chunk;
        if self.head.len() < self.head_cap {
            let take = (self.head_cap - self.head.len()).min(rest.len());
            self.head.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
        }
        if rest.is_empty() || self.tail_cap == 0 {
            return;
        }
        if rest.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&rest[rest.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + rest.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(rest);
        }
    }

    /// Bytes seen so far (bytes).
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// The collected output. When truncated, `text` is the head, then one marker line, then the
    /// tail. The marker line is, with an output file (a [`Spool`] whose file was created):
    /// `[... <omitted> bytes omitted. Showing first <h> and last <t> of <total> bytes (<lines>
    /// line(s)); full output in <path> (read/grep it) ...]`; when the file stopped early, the
    /// part after the semicolon is `the first <f> bytes are in <path> (read/grep it): the file
    /// stops at the <cap>-byte cap of one call` (or `: writing the rest failed: <error>`).
    /// Without one: `[... output truncated: <omitted> bytes omitted; total <total> bytes,
    /// <lines> line(s); kept the first <h> and last <t> bytes ...]`. `<omitted>` is exactly
    /// `<total> - <h> - <t>`. A UTF-8 sequence cut by the head or tail boundary is dropped
    /// whole (counted as omitted), so only genuinely invalid bytes set `invalid_utf8`.
    pub fn finish(&self) -> CollectedOutput {
        let lines = self.newlines + u64::from(self.total > 0 && self.last != Some(b'\n'));
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let kept = self.head.len() as u64 + tail.len() as u64;
        if kept == self.total {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            let (text, invalid) = decode(&all);
            return CollectedOutput {
                text,
                truncated: false,
                total_bytes: self.total,
                total_lines: lines,
                omitted_bytes: 0,
                invalid_utf8: invalid,
                output_file: None,
                output_file_bytes: None,
            };
        }
        let head = trim_incomplete_end(&self.head);
        let tail = trim_continuation_start(&tail);
        let (head_text, bad_head) = decode(head);
        let (tail_text, bad_tail) = decode(tail);
        let omitted = self.total - head.len() as u64 - tail.len() as u64;
        let mut text = head_text;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        let noun = if lines == 1 { "line" } else { "lines" };
        let (h, t, total) = (head.len(), tail.len(), self.total);
        let file = self
            .spool
            .as_ref()
            .and_then(|s| Some((s.path.as_ref()?.display().to_string(), s)));
        match &file {
            Some((path, spool)) => {
                let place = match &spool.stop {
                    None => format!("full output in {path} (read/grep it)"),
                    Some(stop) => {
                        let why = match stop {
                            Stop::Cap(cap) => format!("the file stops at the {cap}-byte cap of one call"),
                            Stop::Error(e) => format!("writing the rest failed: {e}"),
                        };
                        format!(
                            "the first {} bytes are in {path} (read/grep it): {why}",
                            spool.written
                        )
                    }
                };
                text.push_str(&format!(
                    "[... {omitted} bytes omitted. Showing first {h} and last {t} of {total} bytes ({lines} {noun}); {place} ...]\n"
                ));
            }
            None => text.push_str(&format!(
                "[... output truncated: {omitted} bytes omitted; total {total} bytes, {lines} {noun}; kept the first {h} and last {t} bytes ...]\n"
            )),
        }
        text.push_str(&tail_text);
        CollectedOutput {
            text,
            truncated: true,
            total_bytes: self.total,
            total_lines: lines,
            omitted_bytes: omitted,
            invalid_utf8: bad_head || bad_tail,
            output_file_bytes: file.as_ref().map(|(_, s)| s.written),
            output_file: file.map(|(p, _)| p),
        }
    }
}

/// Counts `\n` bytes.
fn count_newlines(b: &[u8]) -> u64 {
    b.iter().filter(|&&c| c == b'\n').count() as u64
}

/// Lossy UTF-8 decode; the flag is true when replacements were needed.
pub(crate) fn decode(b: &[u8]) -> (String, bool) {
    match std::str::from_utf8(b) {
        Ok(s) => (s.to_string(), false),
        Err(_) => (String::from_utf8_lossy(b).into_owned(), true),
    }
}

/// Drops an incomplete UTF-8 sequence at the very end (cut by a boundary).
fn trim_incomplete_end(b: &[u8]) -> &[u8] {
    let n = incomplete_suffix_len(b);
    &b[..b.len() - n]
}

/// Length of an incomplete (but so far valid) UTF-8 sequence at the end of `b`, or 0.
fn incomplete_suffix_len(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let byte = b[b.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // continuation byte, keep looking for the lead
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

/// Drops up to three leading continuation bytes (a sequence cut by the tail boundary).
fn trim_continuation_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take(3).take_while(|&&c| c & 0xC0 == 0x80).count();
    &b[n..]
}

/// A bounded ring for background output with an incremental read cursor: keeps the last
/// `cap` bytes; a read returns what was written since the previous read and reports whether
/// unread bytes were dropped.
#[derive(Debug)]
pub struct OutputRing {
    cap: usize,
    buf: VecDeque<u8>,
    start: u64,
    read: u64,
    total: u64,
}

/// One incremental read of an [`OutputRing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingRead {
    /// Text written since the previous read (lossily decoded).
    pub text: String,
    /// True when unread bytes were dropped from memory before this read.
    pub lossy: bool,
    /// True when the delta was not valid UTF-8.
    pub invalid_utf8: bool,
}

impl OutputRing {
    /// A ring keeping the last `cap` bytes (bytes).
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            buf: VecDeque::new(),
            start: 0,
            read: 0,
            total: 0,
        }
    }

    /// Appends one chunk, dropping the oldest bytes beyond the cap.
    pub fn write(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if chunk.len() >= self.cap {
            self.start = self.total - self.cap as u64;
            self.buf.clear();
            self.buf.extend(&chunk[chunk.len() - self.cap..]);
            return;
        }
        let overflow = (self.buf.len() + chunk.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.start += overflow as u64;
        self.buf.extend(chunk);
    }

    /// The bytes the ring still keeps (read or not), lossily decoded, without consuming them.
    pub fn peek_kept(&self) -> String {
        let bytes: Vec<u8> = self.buf.iter().copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Consumes and returns the bytes written since the previous read. With `finished` false an
    /// incomplete UTF-8 sequence at the end stays unread until the rest arrives.
    pub fn read(&mut self, finished: bool) -> RingRead {
        let lossy = self.read < self.start;
        let from = self.read.max(self.start);
        let offset = (from - self.start) as usize;
        let bytes: Vec<u8> = self.buf.iter().skip(offset).copied().collect();
        let bytes_ref = if lossy {
            trim_continuation_start(&bytes)
        } else {
            &bytes[..]
        };
        let hold = if finished {
            0
        } else {
            incomplete_suffix_len(bytes_ref)
        };
        let take = &bytes_ref[..bytes_ref.len() - hold];
        self.read = self.total - hold as u64;
        let (text, invalid_utf8) = decode(take);
        RingRead {
            text,
            lossy,
            invalid_utf8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = HeadTail::new(10);
        c.write(b"abc\n");
        c.write(b"de");
        let out = c.finish();
        assert_eq!(
            out,
            CollectedOutput {
                text: "abc\nde".into(),
                truncated: false,
                total_bytes: 6,
                total_lines: 2,
                omitted_bytes: 0,
                invalid_utf8: false,
                output_file: None,
                output_file_bytes: None,
            }
        );
    }

    #[test]
    fn exact_cap_not_truncated_and_overflow_keeps_head_and_tail() {
        let mut c = HeadTail::new(10);
        c.write(b"0123456789");
        assert!(!c.finish().truncated);
        c.write(b"ABCDE");
        let out = c.finish();
        assert_eq!(
            out.text,
            "01234\n[... output truncated: 5 bytes omitted; total 15 bytes, 1 line; kept the first 5 and last 5 bytes ...]\nABCDE"
        );
        assert_eq!(out.omitted_bytes, 5);
    }

    #[test]
    fn utf8_cut_at_boundaries_is_not_flagged() {
        let mut c = HeadTail::new(4);
        c.write("é".repeat(10).as_bytes()); // 20 bytes
        let out = c.finish();
        assert!(!out.invalid_utf8);
        assert!(out.text.starts_with("é\n"), "{}", out.text);
        assert!(out.text.ends_with("...]\né"));
        let mut c = HeadTail::new(5);
        c.write("é".repeat(10).as_bytes());
        let out = c.finish();
        assert!(!out.invalid_utf8);
        assert_eq!(out.omitted_bytes, 16);
    }

    #[test]
    fn ring_reads_deltas_and_reports_loss() {
        let mut r = OutputRing::new(4);
        r.write(b"ab");
        assert_eq!(r.read(false).text, "ab");
        assert_eq!(r.read(false).text, "");
        r.write(b"cdefgh");
        let got = r.read(false);
        assert_eq!((got.text.as_str(), got.lossy), ("efgh", true));
        r.write(&"é".as_bytes()[..1]);
        assert_eq!(r.read(false).text, "");
        r.write(&"é".as_bytes()[1..]);
        assert_eq!(r.read(false).text, "é");
    }

    fn spool_files(dir: &Path, max_bytes: u64) -> OutputFiles {
        OutputFiles {
            dir: dir.join("out"),
            name: "bash call/1".into(),
            max_bytes,
        }
    }

    #[test]
    fn a_spooled_stream_is_whole_in_its_file_with_exact_counts() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let files = spool_files(tmp.path(), 1000);
        let mut c = HeadTail::with_spool(10, Spool::new(&files, "stdout", DiskBudget::new(1000)));
        c.write(b"0123456789");
        // still within the cap: no file, not even the folder
        assert!(!files.dir.exists());
        assert_eq!(c.finish().output_file, None);
        c.write(b"ABCDEFGHIJ");
        c.write(b"xyz\n");
        let out = c.finish();
        let path = out.output_file.clone().unwrap();
        let name = Path::new(&path)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(name.len(), 12 + "-bash_call_1-stdout.txt".len(), "{name}");
        assert!(name.ends_with("-bash_call_1-stdout.txt"), "{name}");
        assert!(name[..12].bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
        assert_eq!(Path::new(&path).parent().unwrap(), files.dir);
        assert_eq!(std::fs::read(&path).unwrap(), b"0123456789ABCDEFGHIJxyz\n");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&files.dir), mode(Path::new(&path))), (0o700, 0o600));
        assert_eq!(
            out,
            CollectedOutput {
                text: format!(
                    "01234\n[... 14 bytes omitted. Showing first 5 and last 5 of 24 bytes (1 line); full output in {path} (read/grep it) ...]\nJxyz\n"
                ),
                truncated: true,
                total_bytes: 24,
                total_lines: 1,
                omitted_bytes: 14,
                invalid_utf8: false,
                output_file: Some(path.clone()),
                output_file_bytes: Some(24),
            }
        );
    }

    #[test]
    fn the_file_stops_at_the_run_cap_shared_by_both_streams() {
        let tmp = tempfile::tempdir().unwrap();
        let files = spool_files(tmp.path(), 15);
        let budget = DiskBudget::new(15);
        let mut out = HeadTail::with_spool(4, Spool::new(&files, "stdout", budget.clone()));
        let mut err = HeadTail::with_spool(4, Spool::new(&files, "stderr", budget));
        out.write(&[b'o'; 12]);
        err.write(&[b'e'; 6]);
        out.write(&[b'o'; 8]);
        let (o, e) = (out.finish(), err.finish());
        let (op, ep) = (o.output_file.unwrap(), e.output_file.unwrap());
        assert!(op.ends_with("-stdout.txt") && ep.ends_with("-stderr.txt"));
        assert_eq!(std::fs::read(&op).unwrap(), vec![b'o'; 12]);
        assert_eq!(std::fs::read(&ep).unwrap(), vec![b'e'; 3]);
        assert_eq!(
            (o.output_file_bytes, e.output_file_bytes),
            (Some(12), Some(3))
        );
        assert_eq!(
            o.text,
            format!(
                "oo\n[... 16 bytes omitted. Showing first 2 and last 2 of 20 bytes (1 line); the first 12 bytes are in {op} (read/grep it): the file stops at the 15-byte cap of one call ...]\noo"
            )
        );
        assert_eq!(o.omitted_bytes, 16);
        assert_eq!(
            e.text,
            format!(
                "ee\n[... 2 bytes omitted. Showing first 2 and last 2 of 6 bytes (1 line); the first 3 bytes are in {ep} (read/grep it): the file stops at the 15-byte cap of one call ...]\nee"
            )
        );
    }

    #[test]
    fn a_folder_that_is_a_symlink_gets_no_file_and_the_plain_marker() {
        let tmp = tempfile::tempdir().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let files = spool_files(tmp.path(), 1000);
        std::os::unix::fs::symlink(&elsewhere, &files.dir).unwrap();
        let mut c = HeadTail::with_spool(4, Spool::new(&files, "stdout", DiskBudget::new(1000)));
        c.write(b"0123456789");
        let out = c.finish();
        assert_eq!((out.output_file, out.output_file_bytes), (None, None));
        assert_eq!(
            out.text,
            "01\n[... output truncated: 6 bytes omitted; total 10 bytes, 1 line; kept the first 2 and last 2 bytes ...]\n89"
        );
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }
}
