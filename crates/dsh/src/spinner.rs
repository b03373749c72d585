//! The "model is thinking" spinner of a terminal: one stderr line, `⠋ thinking 1.2s`, redrawn
//! every 100 ms from the moment a model request is sent until its first chunk arrives
//! (docs/tools.md, "What the terminal shows").
//!
//! Only when stderr is a terminal ([`Spinner::for_stderr`]); on a pipe or file the spinner is
//! inert and writes nothing, so scripts never see carriage returns or escape sequences.
//! Writers that share the terminal call [`Spinner::clear`] before writing, so a line never
//! lands on top of a spinner frame.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The frames, one per tick.
const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// Time between two frames.
const TICK: Duration = Duration::from_millis(100);

#[derive(Default)]
struct State {
    /// Spinning since then (`None`: stopped).
    since: Option<Instant>,
    /// A frame is on the screen.
    shown: bool,
    /// The ticking thread should end.
    quit: bool,
    /// Frames drawn since the start (selects the frame character).
    ticks: usize,
}

/// A spinner on stderr; inert unless stderr is a terminal. Cloning shares it; the ticking
/// thread ends when the last clone is dropped. The default is inert.
#[derive(Clone, Default)]
pub struct Spinner {
    inner: Option<Arc<Shared>>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// The text of one frame: `<frame> thinking <seconds, one decimal>s`.
pub(crate) fn frame_text(ticks: usize, elapsed: Duration) -> String {
    format!(
        "{} thinking {:.1}s",
        FRAMES[ticks % FRAMES.len()],
        elapsed.as_secs_f64()
    )
}

/// `text` cut to fit a terminal of `width` columns without wrapping: at most `width - 1`
/// characters (the spinner's characters are one column each), so a redraw after `\r` always
/// overwrites the whole frame; `None` (no width known) leaves it whole.
pub(crate) fn fit(text: &str, width: Option<usize>) -> String {
    match width {
        Some(w) => text.chars().take(w.saturating_sub(1)).collect(),
        None => text.to_owned(),
    }
}

fn draw(st: &mut State) {
    let Some(since) = st.since else { return };
    let frame = fit(
        &frame_text(st.ticks, since.elapsed()),
        crate::approval_prompt::terminal_width(),
    );
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K{frame}");
    let _ = err.flush();
    st.ticks += 1;
    st.shown = true;
}

fn erase(st: &mut State) {
    if st.shown {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
        st.shown = false;
    }
}

impl Spinner {
    /// A spinner that draws only when stderr is a terminal.
    pub fn for_stderr() -> Self {
        if std::io::stderr().is_terminal() {
            Self::enabled()
        } else {
            Self::inert()
        }
    }

    /// A spinner that never draws.
    pub fn inert() -> Self {
        Self { inner: None }
    }

    fn enabled() -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::spawn(move || {
            loop {
                let Some(shared) = weak.upgrade() else { return };
                let st = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                let (mut st, _) = shared
                    .wake
                    .wait_timeout(st, TICK)
                    .unwrap_or_else(PoisonError::into_inner);
                if st.quit {
                    erase(&mut st);
                    return;
                }
                draw(&mut st);
            }
        });
        Self {
            inner: Some(shared),
        }
    }

    /// Starts spinning (draws the first frame now); a no-op while already spinning.
    pub fn start(&self) {
        if let Some(s) = &self.inner {
            let mut st = s.state.lock().unwrap_or_else(PoisonError::into_inner);
            if st.since.is_none() {
                st.since = Some(Instant::now());
                st.ticks = 0;
                draw(&mut st);
            }
        }
    }

    /// Stops spinning and erases the frame, if one is shown.
    pub fn clear(&self) {
        if let Some(s) = &self.inner {
            let mut st = s.state.lock().unwrap_or_else(PoisonError::into_inner);
            st.since = None;
            erase(&mut st);
        }
    }

    /// Runs `f` with the spinner stopped and erased, holding it so no frame is drawn meanwhile.
    pub fn quiet<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.inner {
            Some(s) => {
                let mut st = s.state.lock().unwrap_or_else(PoisonError::into_inner);
                st.since = None;
                erase(&mut st);
                f()
            }
            None => f(),
        }
    }

    /// Ends the ticking thread (erasing a shown frame).
    pub fn stop(&self) {
        if let Some(s) = &self.inner {
            let mut st = s.state.lock().unwrap_or_else(PoisonError::into_inner);
            st.quit = true;
            st.since = None;
            erase(&mut st);
            s.wake.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_show_the_elapsed_seconds() {
        assert_eq!(
            frame_text(0, Duration::from_millis(1230)),
            "⠋ thinking 1.2s"
        );
        assert_eq!(frame_text(11, Duration::from_millis(40)), "⠙ thinking 0.0s");
    }

    #[test]
    fn a_frame_fits_a_narrow_terminal() {
        assert_eq!(fit("⠋ thinking 12.3s", Some(12)), "⠋ thinking ");
        assert_eq!(fit("⠋ thinking 1.2s", Some(80)), "⠋ thinking 1.2s");
        assert_eq!(fit("⠋ thinking 1.2s", None), "⠋ thinking 1.2s");
        assert_eq!(fit("⠋ thinking 1.2s", Some(0)), "");
    }

    #[test]
    fn an_inert_spinner_does_nothing() {
        let s = Spinner::inert();
        s.start();
        s.clear();
        assert_eq!(s.quiet(|| 7), 7);
        s.stop();
    }
}
