//! Bounded SSE reading: the line/event cap ([`MAX_SSE_LINE_BYTES`]), lossy UTF-8 repair of the
//! body, activity counting for the idle watchdog, and the body failure mapping. Every
//! streaming HTTP provider reads its response through [`SseBody`].
//!
//! See docs/upstream/deepseek.md (Bounded SSE lines; Invalid UTF-8; Timeouts).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dsh_llm::{LlmFailure, codes};
use futures::{Stream, StreamExt};

use crate::utf8::Utf8Repair;

/// Failure code of an attempt whose SSE body holds one line or event longer than
/// [`MAX_SSE_LINE_BYTES`]. Not in the default retryable codes: the same server would send the
/// same oversized line again. See docs/upstream/deepseek.md (Bounded SSE lines).
pub const SSE_LINE_TOO_LONG: &str = "SSE_LINE_TOO_LONG";

/// The most bytes one SSE line, or the `data` lines of one event, may hold (16 MiB): the
/// decoder buffers a line until its end, so without a cap a provider sending no newline grows
/// dsh's memory without bound. Beyond it the attempt fails with [`SSE_LINE_TOO_LONG`].
pub const MAX_SSE_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Why reading the response body stopped: the transport failed, or the body holds an SSE line
/// (or event) longer than [`MAX_SSE_LINE_BYTES`].
#[derive(Debug, thiserror::Error)]
pub enum BodyReadError {
    /// The transport failed.
    #[error(transparent)]
    Http(reqwest::Error),
    /// An SSE line or event exceeds the cap.
    #[error("an SSE line or event is longer than {MAX_SSE_LINE_BYTES} bytes")]
    LineTooLong,
}

/// Counts the bytes the SSE decoder holds before the body reaches it: the current line (any
/// line, comments included) and the `data`-carrying lines of the current event (reset by a
/// blank line). Line ends are LF, CR or CRLF, as the SSE grammar has them.
#[derive(Debug, Default)]
pub struct LineGuard {
    line: usize,
    event: usize,
    comment: bool,
    after_cr: bool,
}

impl LineGuard {
    /// Accounts for one read.
    ///
    /// # Errors
    /// [`BodyReadError::LineTooLong`] once the current line, or the current event, exceeds
    /// [`MAX_SSE_LINE_BYTES`].
    pub fn push(&mut self, mut read: &[u8]) -> Result<(), BodyReadError> {
        while let Some(&first) = read.first() {
            if std::mem::take(&mut self.after_cr) && first == b'\n' {
                read = &read[1..];
                continue;
            }
            let end = read.iter().position(|&c| c == b'\n' || c == b'\r');
            let len = end.unwrap_or(read.len());
            if len > 0 {
                if self.line == 0 {
                    self.comment = first == b':';
                }
                self.line += len;
                let held = if self.comment {
                    self.line
                } else {
                    self.event + self.line
                };
                if held > MAX_SSE_LINE_BYTES {
                    return Err(BodyReadError::LineTooLong);
                }
            }
            let Some(end) = end else { break };
            if self.line == 0 {
                self.event = 0;
            } else if !self.comment {
                self.event += self.line;
            }
            self.line = 0;
            self.after_cr = read[end] == b'\r';
            read = &read[end + 1..];
        }
        Ok(())
    }
}

/// The failure of an SSE body that stopped with `e`: `SSE_LINE_TOO_LONG` for an oversized line,
/// else `TRANSPORT`.
pub fn body_failure(route: &str, url: &str, e: &sse_stream::Error) -> LlmFailure {
    let too_long = match e {
        sse_stream::Error::Body(b) => {
            matches!(b.downcast_ref(), Some(BodyReadError::LineTooLong))
        }
        _ => false,
    };
    if too_long {
        return LlmFailure::new(
            SSE_LINE_TOO_LONG,
            format!(
                "{route}: POST {url}: the provider sent an SSE line or event longer than \
                 {MAX_SSE_LINE_BYTES} bytes; dsh stops reading the response"
            ),
        );
    }
    LlmFailure::new(
        codes::TRANSPORT,
        format!("{route}: POST {url}: the response body failed: {e}"),
    )
}

/// The decoded SSE events of one response body.
pub type SseEvents = Pin<Box<dyn Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>>;

/// One streaming response body as SSE events: every read counts as activity for the idle
/// watchdog (keep-alive comments included), passes the [`LineGuard`] and the [`Utf8Repair`]
/// before the `sse-stream` decoder sees it.
pub struct SseBody {
    events: SseEvents,
    activity: Arc<AtomicU64>,
    utf8: Arc<std::sync::Mutex<Utf8Repair>>,
}

impl std::fmt::Debug for SseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseBody")
            .field("reads", &self.activity.load(Ordering::Relaxed))
            .finish()
    }
}

impl SseBody {
    /// The body of `resp` as SSE events.
    pub fn new(resp: reqwest::Response) -> Self {
        let activity = Arc::new(AtomicU64::new(0));
        let counter = activity.clone();
        let utf8 = Arc::new(std::sync::Mutex::new(Utf8Repair::default()));
        let repair = utf8.clone();
        let mut guard = LineGuard::default();
        let bytes = resp.bytes_stream().map(move |r| {
            counter.fetch_add(1, Ordering::Relaxed);
            let b = r.map_err(BodyReadError::Http)?;
            guard.push(&b)?;
            Ok(repair.lock().unwrap_or_else(|e| e.into_inner()).push(b))
        });
        let tail = utf8.clone();
        let bytes = bytes.chain(futures::stream::iter(std::iter::from_fn(move || {
            tail.lock()
                .unwrap_or_else(|e| e.into_inner())
                .finish()
                .map(Ok::<bytes::Bytes, BodyReadError>)
        })));
        let events: SseEvents = Box::pin(sse_stream::SseStream::from_bytes_stream(bytes));
        Self {
            events,
            activity,
            utf8,
        }
    }

    /// Invalid UTF-8 sequences replaced by U+FFFD so far.
    pub fn replaced(&self) -> u64 {
        self.utf8
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replaced()
    }

    /// Waits for the next SSE event under the idle watchdog: any received bytes, keep-alive
    /// comments included, restart the timer. `Ok(None)` = end of body; `Err(())` = `idle`
    /// passed without a byte.
    #[allow(
        clippy::result_unit_err,
        reason = "the only error is the elapsed watchdog"
    )]
    pub async fn next_event(
        &mut self,
        idle: Duration,
    ) -> Result<Option<Result<sse_stream::Sse, sse_stream::Error>>, ()> {
        loop {
            let before = self.activity.load(Ordering::Relaxed);
            match tokio::time::timeout(idle, self.events.next()).await {
                Ok(v) => return Ok(v),
                Err(_) => {
                    if self.activity.load(Ordering::Relaxed) == before {
                        return Err(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(reads: &[&[u8]]) -> Result<(), BodyReadError> {
        let mut g = LineGuard::default();
        reads.iter().try_for_each(|r| g.push(r))
    }

    #[test]
    fn the_line_guard_counts_lines_and_events_and_resets_on_blank_lines() {
        let big = vec![b'a'; MAX_SSE_LINE_BYTES / 2];
        let mut line = b"data: ".to_vec();
        line.extend_from_slice(&big);
        // two half-cap data lines in two events (LF, CRLF, CR blank lines): fine
        for sep in [&b"\n\n"[..], b"\r\n\r\n", b"\r\r"] {
            assert!(feed(&[&line, sep, &line, sep]).is_ok());
        }
        // a CRLF split across reads is one line end, not a blank line
        assert!(matches!(
            feed(&[&line, b"\r", b"\n", &line, b"\n", &line, b"\n"]),
            Err(BodyReadError::LineTooLong)
        ));
        // comments do not add to the event but are bounded as lines
        assert!(feed(&[b":", &big, b"\n:", &big, b"\n:", &big, b"\n\n"]).is_ok());
        let long = vec![b'x'; MAX_SSE_LINE_BYTES];
        assert!(feed(&[&long, b"\n"]).is_ok());
        assert!(matches!(
            feed(&[&long, b"x"]),
            Err(BodyReadError::LineTooLong)
        ));
        assert!(matches!(
            feed(&[b":", &long]),
            Err(BodyReadError::LineTooLong)
        ));
    }
}
