//! Text model shared by `read` and `edit`: binary detection, BOM handling, the logical
//! (LF-normalised) view of a file, the literal edit with line-ending preservation, the
//! line-numbered read window and its model-facing rendering.
//!
//! # The normalisation rule (BC-11)
//! - A leading UTF-8 BOM (`EF BB BF`) is not part of the text: `read` never shows it and `edit`
//!   writes it back unchanged.
//! - The *logical view* of a file turns every `\r\n` pair into `\n`; a lone `\r` stays as is.
//!   `read` shows the logical view (a line's trailing `\r` is dropped) and `edit` matches
//!   `old_string` against the logical view after turning each `\r\n` in `old_string` and
//!   `new_string` into `\n`. Both use the same rule, so text copied from `read` matches.
//! - Only the matched spans are rewritten. Every byte outside them (including each untouched
//!   line's own ending) is copied verbatim from disk. Newlines inside `new_string` are written
//!   with the file's dominant ending: CRLF when the file has more `\r\n` than lone `\n`, else LF.
//!   So a CRLF file stays CRLF, an LF file stays LF, and in a mixed file the new lines take the
//!   dominant ending while untouched lines keep theirs.
//! - Tabs and all other characters are verbatim in both directions (BC-12).

use crate::error::{FsError, Result};

/// The UTF-8 byte-order mark.
pub const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Bytes sampled at the start of a file for the binary (NUL / magic number) check.
pub const BINARY_SAMPLE_BYTES: usize = 8192;

/// Classifies `sample` (the first bytes of a file, up to [`BINARY_SAMPLE_BYTES`]): `Some(kind)`
/// when the content is binary, naming the detected type (from magic numbers, else
/// `"binary data"` for a NUL byte), `None` when it may be text. Extension is never consulted.
pub fn detect_binary(sample: &[u8]) -> Option<&'static str> {
    const MAGIC: &[(&[u8], &str)] = &[
        (b"\x7fELF", "ELF executable"),
        (b"\x89PNG\r\n\x1a\n", "PNG image"),
        (b"\xff\xd8\xff", "JPEG image"),
        (b"GIF87a", "GIF image"),
        (b"GIF89a", "GIF image"),
        (b"%PDF-", "PDF document"),
        (b"PK\x03\x04", "ZIP archive"),
        (b"\x1f\x8b", "gzip archive"),
        (b"\0asm", "WebAssembly module"),
        (b"\xcf\xfa\xed\xfe", "Mach-O executable"),
        (b"\xfe\xed\xfa\xcf", "Mach-O executable"),
        (b"\xca\xfe\xba\xbe", "Mach-O universal binary"),
        (b"MZ\x90\0", "PE executable"),
    ];
    for (magic, kind) in MAGIC {
        if sample.starts_with(magic) {
            return Some(kind);
        }
    }
    let n = sample.len().min(BINARY_SAMPLE_BYTES);
    if sample[..n].contains(&0) {
        return Some("binary data");
    }
    None
}

/// A decoded text file: whether it starts with a BOM, and the text after it (raw line endings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedText {
    /// True when the file starts with `EF BB BF`.
    pub bom: bool,
    /// The UTF-8 text after the BOM, line endings as on disk.
    pub text: String,
}

/// Decodes whole-file `bytes` for operation `verb` on `display`.
///
/// # Errors
/// [`FsError::NotText`] for binary content (see [`detect_binary`]) or invalid UTF-8; the
/// message names the detected type and the size in bytes and carries no file bytes.
pub fn decode(bytes: &[u8], verb: &str, display: &str) -> Result<DecodedText> {
    if let Some(kind) = detect_binary(bytes) {
        return Err(not_text_binary(verb, display, kind, bytes.len() as u64));
    }
    let (bom, body) = match bytes.strip_prefix(BOM) {
        Some(rest) => (true, rest),
        None => (false, bytes),
    };
    match std::str::from_utf8(body) {
        Ok(s) => Ok(DecodedText {
            bom,
            text: s.to_owned(),
        }),
        Err(_) => Err(not_text_utf8(verb, display, bytes.len() as u64)),
    }
}

/// The `FS_NOT_TEXT` error for binary content: `cannot <verb> "<display>": binary file
/// (<kind>, <size> bytes)`.
pub fn not_text_binary(verb: &str, display: &str, kind: &str, size: u64) -> FsError {
    FsError::NotText(format!(
        "cannot {verb} \"{display}\": binary file ({kind}, {size} bytes)"
    ))
}

/// The `FS_NOT_TEXT` error for invalid UTF-8: `cannot <verb> "<display>": not valid UTF-8
/// text (<size> bytes)`.
pub fn not_text_utf8(verb: &str, display: &str, size: u64) -> FsError {
    FsError::NotText(format!(
        "cannot {verb} \"{display}\": not valid UTF-8 text ({size} bytes)"
    ))
}

/// Turns every `\r\n` into `\n` (lone `\r` untouched): the logical view of a text.
pub fn normalize_eol(s: &str) -> String {
    s.replace("\r\n", "\n")
}

/// A line ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eol {
    /// `\n`.
    Lf,
    /// `\r\n`.
    Crlf,
}

/// The dominant line ending of `raw`: [`Eol::Crlf`] when it has strictly more `\r\n` than lone
/// `\n`, else [`Eol::Lf`] (an empty or newline-free text is LF).
pub fn dominant_eol(raw: &str) -> Eol {
    let crlf = raw.matches("\r\n").count();
    let lf = raw.matches('\n').count() - crlf;
    if crlf > lf { Eol::Crlf } else { Eol::Lf }
}

/// Applies `eol` to an LF-normalised text (every `\n` becomes `\r\n` for CRLF).
pub fn apply_eol(lf_text: &str, eol: Eol) -> String {
    match eol {
        Eol::Lf => lf_text.to_owned(),
        Eol::Crlf => lf_text.replace('\n', "\r\n"),
    }
}

/// The logical view of a raw text plus the map back to raw byte offsets.
struct Logical {
    text: String,
    /// Logical byte offsets of the `\n`s that were `\r\n` on disk, ascending.
    crlf_at: Vec<usize>,
}

impl Logical {
    fn new(raw: &str) -> Self {
        let mut text = String::with_capacity(raw.len());
        let mut crlf_at = Vec::new();
        let mut rest = raw;
        while let Some(i) = rest.find("\r\n") {
            text.push_str(&rest[..i]);
            crlf_at.push(text.len());
            text.push('\n');
            rest = &rest[i + 2..];
        }
        text.push_str(rest);
        Self { text, crlf_at }
    }

    /// Raw byte offset of logical offset `l` (a position between characters).
    fn raw_offset(&self, l: usize) -> usize {
        l + self.crlf_at.partition_point(|&p| p < l)
    }
}

/// Every start offset of `needle` in `hay`, overlapping occurrences included (`aaa` occurs
/// twice in `aaaa`).
fn overlapping_matches(hay: &str, needle: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = hay[from..].find(needle) {
        let at = from + i;
        out.push(at);
        // advance one character, not one needle, so overlaps are counted
        let step = hay[at..].chars().next().map_or(1, char::len_utf8);
        from = at + step;
    }
    out
}

/// 1-based line number of logical offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// The logical line containing offset `at`, cut to 120 characters.
fn line_preview(text: &str, at: usize) -> String {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let line = &text[start..end];
    if line.chars().count() > 120 {
        let cut: String = line.chars().take(120).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

/// The outcome of [`apply_edit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditApplied {
    /// The new raw text (BOM excluded), untouched bytes verbatim.
    pub raw_after: String,
    /// How many spans were replaced (non-overlapping, left to right).
    pub replacements: usize,
}

/// Applies the literal edit `old → new` to `raw` (text after the BOM) under the module's
/// normalisation rule.
///
/// # Errors
/// - [`FsError::InvalidArgs`] when `old` is empty or `old == new` (after normalisation).
/// - [`FsError::EditNotFound`] when `old` does not occur; the message adds a whitespace hint
///   when a line matches only if indentation is ignored (e.g. tabs vs spaces, BC-12).
/// - [`FsError::AmbiguousEdit`] when `old` occurs more than once (overlapping occurrences
///   counted) and `replace_all` is false; the message names the count, the lines and a
///   one-line preview of each (at most 10 listed).
pub fn apply_edit(
    raw: &str,
    old: &str,
    new: &str,
    replace_all: bool,
    display: &str,
) -> Result<EditApplied> {
    let old_n = normalize_eol(old);
    let new_n = normalize_eol(new);
    if old_n.is_empty() {
        return Err(FsError::InvalidArgs(
            "old_string must be a non-empty string".to_owned(),
        ));
    }
    if old_n == new_n {
        return Err(FsError::InvalidArgs(
            "old_string and new_string must differ".to_owned(),
        ));
    }
    let lg = Logical::new(raw);
    let all = overlapping_matches(&lg.text, &old_n);
    if all.is_empty() {
        let mut msg = format!("old_string was not found in \"{display}\"");
        if let Some(hint) = whitespace_hint(&lg.text, &old_n) {
            msg.push('\n');
            msg.push_str(&hint);
        }
        return Err(FsError::EditNotFound(msg));
    }
    if all.len() > 1 && !replace_all {
        let lines: Vec<usize> = all.iter().map(|&a| line_of(&lg.text, a)).collect();
        let listed: Vec<String> = lines.iter().take(10).map(ToString::to_string).collect();
        let more = if lines.len() > 10 { ", …" } else { "" };
        let mut msg = format!(
            "old_string matched {} times in \"{display}\" (at lines {}{more}); provide a more specific old_string or set replace_all to true",
            all.len(),
            listed.join(", ")
        );
        for (&a, line) in all.iter().zip(&lines).take(10) {
            msg.push_str(&format!("\n{line}: {}", line_preview(&lg.text, a)));
        }
        return Err(FsError::AmbiguousEdit(msg));
    }
    // non-overlapping selection, left to right
    let mut selected = Vec::new();
    let mut end = 0;
    for &a in &all {
        if a >= end {
            selected.push(a);
            end = a + old_n.len();
        }
    }
    let new_raw = apply_eol(&new_n, dominant_eol(raw));
    let mut out = String::with_capacity(raw.len() + selected.len() * new_raw.len());
    let mut cursor = 0;
    for &s in &selected {
        let rs = lg.raw_offset(s);
        let re = lg.raw_offset(s + old_n.len());
        out.push_str(&raw[cursor..rs]);
        out.push_str(&new_raw);
        cursor = re;
    }
    out.push_str(&raw[cursor..]);
    Ok(EditApplied {
        raw_after: out,
        replacements: selected.len(),
    })
}

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn describe_indent(ws: &str) -> &'static str {
    match (ws.contains('\t'), ws.contains(' ')) {
        (true, true) => "tabs and spaces",
        (true, false) => "tabs",
        (false, true) => "spaces",
        (false, false) => "no indentation",
    }
}

/// A hint for a not-found edit whose first non-blank line matches a file line only when
/// whitespace is ignored.
fn whitespace_hint(text: &str, old: &str) -> Option<String> {
    let first = old.lines().find(|l| !l.trim().is_empty())?;
    let want = collapse_ws(first);
    let old_indent = &first[..first.len() - first.trim_start().len()];
    for (i, line) in text.split('\n').enumerate() {
        if collapse_ws(line) == want && line != first {
            let indent = &line[..line.len() - line.trim_start().len()];
            return Some(format!(
                "Hint: line {} matches only if whitespace is ignored: the file indents it with {}, old_string uses {}. read shows whitespace verbatim after the \"N: \" prefix; copy it exactly.",
                i + 1,
                describe_indent(indent),
                describe_indent(old_indent)
            ));
        }
    }
    None
}

/// One returned line of a read window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowLine {
    /// 1-based line number in the file.
    pub number: usize,
    /// The line text without its ending (and without a trailing `\r`), possibly truncated
    /// with the suffix `... (line truncated to N chars)`.
    pub text: String,
}

/// A bounded, line-numbered read window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadWindow {
    /// 1-based first line requested.
    pub offset: usize,
    /// Returned lines in order.
    pub lines: Vec<WindowLine>,
    /// Exact number of lines in the file (`""` has 0, `"a\n"` 1, `"a\nb"` 2).
    pub total_lines: usize,
    /// True when the selected output hit the byte cap before `limit` lines.
    pub truncated_by_bytes: bool,
}

/// Caps of one read window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowCaps {
    /// 1-based first line.
    pub offset: usize,
    /// Maximum number of lines.
    pub limit: usize,
    /// Maximum characters (Unicode scalar values) kept of one line.
    pub max_line_chars: usize,
    /// Maximum bytes of selected line text (joined with `\n`).
    pub max_bytes: usize,
}

/// Incremental builder of a [`ReadWindow`] from decoded text chunks; memory is bounded by the
/// caps, even for a single newline-free line of any size.
#[derive(Debug)]
pub struct WindowBuilder {
    caps: WindowCaps,
    lines: Vec<WindowLine>,
    total: usize,
    out_bytes: usize,
    truncated: bool,
    buf: String,
    buf_chars: usize,
    buf_nonempty: bool,
}

impl WindowBuilder {
    /// A builder for `caps`.
    pub fn new(caps: WindowCaps) -> Self {
        Self {
            caps,
            lines: Vec::new(),
            total: 0,
            out_bytes: 0,
            truncated: false,
            buf: String::new(),
            buf_chars: 0,
            buf_nonempty: false,
        }
    }

    /// True once no further line can enter the window (only counting remains).
    fn full(&self) -> bool {
        self.truncated || self.lines.len() >= self.caps.limit
    }

    fn append(&mut self, seg: &str) {
        if seg.is_empty() {
            return;
        }
        self.buf_nonempty = true;
        // the current line is number `total + 1`: keep its text only inside the window
        if self.total + 1 < self.caps.offset || self.full() {
            return;
        }
        let cap = self.caps.max_line_chars + 1;
        if self.buf_chars >= cap {
            return;
        }
        let room = cap - self.buf_chars;
        match seg.char_indices().nth(room) {
            Some((i, _)) => {
                self.buf.push_str(&seg[..i]);
                self.buf_chars = cap;
            }
            None => {
                self.buf.push_str(seg);
                self.buf_chars += seg.chars().count();
            }
        }
    }

    fn flush(&mut self) {
        self.total += 1;
        let mut line = std::mem::take(&mut self.buf);
        let chars = self.buf_chars;
        self.buf_chars = 0;
        self.buf_nonempty = false;
        if self.truncated || self.total < self.caps.offset || self.lines.len() >= self.caps.limit {
            return;
        }
        if chars > self.caps.max_line_chars {
            let cut = line
                .char_indices()
                .nth(self.caps.max_line_chars)
                .map_or(line.len(), |(i, _)| i);
            line.truncate(cut);
            line.push_str(&format!(
                "... (line truncated to {} chars)",
                self.caps.max_line_chars
            ));
        } else if line.ends_with('\r') {
            line.pop();
        }
        let bytes = line.len() + usize::from(!self.lines.is_empty());
        if self.out_bytes + bytes > self.caps.max_bytes {
            self.truncated = true;
            return;
        }
        self.out_bytes += bytes;
        self.lines.push(WindowLine {
            number: self.total,
            text: line,
        });
    }

    /// Feeds the next decoded chunk (chunk boundaries carry no meaning).
    pub fn push(&mut self, chunk: &str) {
        let mut rest = chunk;
        while !self.full() {
            let Some(i) = rest.find('\n') else {
                self.append(rest);
                return;
            };
            self.append(&rest[..i]);
            self.flush();
            rest = &rest[i + 1..];
        }
        // window complete: only count the remaining lines
        let newlines = rest.bytes().filter(|&b| b == b'\n').count();
        if newlines > 0 {
            self.total += newlines;
            self.buf_nonempty = !rest.ends_with('\n');
        } else if !rest.is_empty() {
            self.buf_nonempty = true;
        }
    }

    /// Finishes the window.
    ///
    /// # Errors
    /// [`FsError::NotFound`] when `offset` is past the last line (`offset 1` of an empty file
    /// is allowed): `offset <o> is out of range for "<display>" (<n> lines)`.
    pub fn finish(mut self, display: &str) -> Result<ReadWindow> {
        if self.buf_nonempty {
            self.flush();
        }
        if !self.truncated
            && self.caps.offset > self.total
            && !(self.total == 0 && self.caps.offset == 1)
        {
            return Err(FsError::NotFound(format!(
                "offset {} is out of range for \"{display}\" ({} lines)",
                self.caps.offset, self.total
            )));
        }
        Ok(ReadWindow {
            offset: self.caps.offset,
            lines: self.lines,
            total_lines: self.total,
            truncated_by_bytes: self.truncated,
        })
    }
}

/// Renders a read window as the model-facing envelope (upstream format):
///
/// ```text
/// <path>{display}</path>
/// <type>file</type>
/// <content>
/// 1: first line
/// 2: second line
///
/// (End of file - total 2 lines)
/// </content>
/// ```
///
/// Each line is `<number>: <text>`; the prefix is digits followed by `": "`, so tabs and spaces
/// of the file are unambiguous (BC-12). The footer is `(Showing lines a-b of n. Use
/// offset=b+1 to continue.)` when more lines follow, or `(Output capped. Showing lines a-b.
/// Use offset=b+1 to continue.)` when the byte cap was hit.
pub fn format_read(display: &str, w: &ReadWindow) -> String {
    let end = w
        .lines
        .last()
        .map_or(w.offset.saturating_sub(1), |l| l.number);
    let footer = if w.truncated_by_bytes {
        format!(
            "(Output capped. Showing lines {}-{end}. Use offset={} to continue.)",
            w.offset,
            end + 1
        )
    } else if end < w.total_lines {
        format!(
            "(Showing lines {}-{end} of {}. Use offset={} to continue.)",
            w.offset,
            w.total_lines,
            end + 1
        )
    } else {
        format!("(End of file - total {} lines)", w.total_lines)
    };
    let body = if w.lines.is_empty() {
        footer
    } else {
        let mut b = String::new();
        for l in &w.lines {
            b.push_str(&format!("{}: {}\n", l.number, l.text));
        }
        b.push('\n');
        b.push_str(&footer);
        b
    };
    format!("<path>{display}</path>\n<type>file</type>\n<content>\n{body}\n</content>")
}

/// Unchanged bytes a diff keeps on each side of a change inside a long line (bytes): the
/// record of an edit is bounded by the changed bytes plus this fixed context, however long the
/// edited line is. See [`unified_diff`].
pub const DIFF_CONTEXT_BYTES: usize = 2048;

/// The marker standing for `n` bytes a diff leaves out: `[… <n> bytes …]`.
fn elided(n: usize) -> String {
    format!("[… {n} bytes …]")
}

/// Largest index `<= i` on a char boundary of `s`.
fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Smallest index `>= i` on a char boundary of `s`.
fn ceil_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Length of the common prefix of `a` and `b` (bytes, on a char boundary of both).
fn common_prefix(a: &str, b: &str) -> usize {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    floor_char(a, n)
}

/// Length of the common suffix of `a` and `b` (bytes, on a char boundary of both).
fn common_suffix(a: &str, b: &str) -> usize {
    let n = a
        .bytes()
        .rev()
        .zip(b.bytes().rev())
        .take_while(|(x, y)| x == y)
        .count();
    a.len() - ceil_char(a, a.len() - n)
}

/// An unchanged (context) line: kept whole up to `2 * DIFF_CONTEXT_BYTES`, else its first and
/// last [`DIFF_CONTEXT_BYTES`] around an [`elided`] marker (its line ending kept).
fn clip_context_line(line: &str) -> String {
    let c = DIFF_CONTEXT_BYTES;
    let body = line.strip_suffix('\n').unwrap_or(line);
    if body.len() <= 2 * c {
        return line.to_owned();
    }
    let head = floor_char(body, c);
    let tail = ceil_char(body, body.len() - c);
    let nl = if body.len() < line.len() { "\n" } else { "" };
    format!(
        "{}{}{}{nl}",
        &body[..head],
        elided(tail - head),
        &body[tail..]
    )
}

/// A run of removed lines `old` and added lines `new` (each the lines' concatenation, endings
/// included) with the unchanged text they share at both ends cut to [`DIFF_CONTEXT_BYTES`]
/// next to the change. Runs whose lines are all short stay whole.
fn clip_change(old: &str, new: &str) -> (String, String) {
    let c = DIFF_CONTEXT_BYTES;
    let long = |s: &str| s.split_inclusive('\n').any(|l| l.len() > 2 * c);
    if !long(old) && !long(new) {
        return (old.to_owned(), new.to_owned());
    }
    let p = common_prefix(old, new);
    let s = common_suffix(&old[p..], &new[p..]);
    // shared head: everything but the last `c` bytes is elided (same bytes in both texts)
    let start = if p > c { ceil_char(old, p - c) } else { 0 };
    let clip = |text: &str| -> String {
        let tail_from = text.len() - s;
        let keep_end = floor_char(text, tail_from + s.min(c));
        let mut out = String::new();
        if start > 0 {
            out.push_str(&elided(start));
        }
        out.push_str(&text[start..keep_end]);
        let rest = &text[keep_end..];
        if !rest.is_empty() {
            // the final line ending stays, so the line structure of the diff is kept
            let (gone, nl) = match rest.strip_suffix('\n') {
                Some(r) => (r.len(), "\n"),
                None => (rest.len(), ""),
            };
            if gone > 0 {
                out.push_str(&elided(gone));
            }
            out.push_str(nl);
        }
        out
    };
    (clip(old), clip(new))
}

/// Writes `text` as diff lines tagged `tag`, with git's `\ No newline at end of file` after a
/// last line without an ending.
fn push_lines(out: &mut String, tag: char, text: &str) {
    for line in text.split_inclusive('\n') {
        out.push(tag);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

/// A unified diff (3 lines of context) between two LF texts, with `a/<path>` and `b/<path>`
/// headers; empty when the texts are equal.
///
/// Bounded for long lines: inside a run of changed lines that has a line longer than
/// `2 * DIFF_CONTEXT_BYTES`, the unchanged text the old and new side share at either end is cut
/// to [`DIFF_CONTEXT_BYTES`] next to the change, and a longer unchanged context line keeps its
/// first and last [`DIFF_CONTEXT_BYTES`]; each cut is written `[… <n> bytes …]`. So a one-word
/// edit of a 9 MB single-line file yields a diff of about `4 * DIFF_CONTEXT_BYTES`, not twice
/// the line. Diffs of texts with short lines are the plain unified diff.
pub fn unified_diff(path: &str, before: &str, after: &str) -> String {
    if before == after {
        return String::new();
    }
    let diff = similar::TextDiff::from_lines(before, after);
    let mut out = String::new();
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        if out.is_empty() {
            out.push_str(&format!("--- a/{path}\n+++ b/{path}\n"));
        }
        out.push_str(&format!("{}\n", hunk.header()));
        let (mut old, mut new) = (String::new(), String::new());
        for change in hunk.iter_changes() {
            match change.tag() {
                similar::ChangeTag::Delete => old.push_str(change.value()),
                similar::ChangeTag::Insert => new.push_str(change.value()),
                similar::ChangeTag::Equal => {
                    flush_change(&mut out, &mut old, &mut new);
                    push_lines(&mut out, ' ', &clip_context_line(change.value()));
                }
            }
        }
        flush_change(&mut out, &mut old, &mut new);
    }
    out
}

fn flush_change(out: &mut String, old: &mut String, new: &mut String) {
    if old.is_empty() && new.is_empty() {
        return;
    }
    let (o, n) = clip_change(old, new);
    push_lines(out, '-', &o);
    push_lines(out, '+', &n);
    old.clear();
    new.clear();
}
