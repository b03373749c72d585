//! Bounded output capture: a head+tail collector for foreground runs and an incremental ring for
//! background jobs. Memory stays bounded however much a command writes; totals (bytes, lines)
//! are always counted, and non-UTF-8 output is decoded lossily and flagged.
//!
//! Behaviour notes: `docs/tools.md` ("Process executor"; "Shell and job tools": bug case BC-20 — keep head and
//! tail, explicit marker with totals and omitted amount, a single huge line is cut by bytes —
//! and upstream's `CollectedOutput`).

use std::collections::VecDeque;

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
        }
    }

    /// Feeds one chunk.
    pub fn write(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
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

    /// The collected output. When truncated, `text` is the head, then one marker line
    /// `[... output truncated: <omitted> bytes omitted; total <total> bytes, <lines> line(s);
    /// kept the first <h> and last <t> bytes ...]`, then the tail. A UTF-8 sequence cut by the
    /// head or tail boundary is dropped whole (counted as omitted), so only genuinely invalid
    /// bytes set `invalid_utf8`.
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
        text.push_str(&format!(
            "[... output truncated: {omitted} bytes omitted; total {} bytes, {lines} {}; kept the first {} and last {} bytes ...]\n",
            self.total,
            if lines == 1 { "line" } else { "lines" },
            head.len(),
            tail.len()
        ));
        text.push_str(&tail_text);
        CollectedOutput {
            text,
            truncated: true,
            total_bytes: self.total,
            total_lines: lines,
            omitted_bytes: omitted,
            invalid_utf8: bad_head || bad_tail,
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
                invalid_utf8: false
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
}
