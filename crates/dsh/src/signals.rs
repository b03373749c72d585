//! The signals that stop a running `dsh` from outside: SIGTERM (a supervisor) and SIGHUP (the
//! terminal closed, an SSH connection dropped). Both cancel the running turn like Ctrl-C, so the
//! tools' process groups are killed, the log closes the turn and the session is saved, instead of
//! dying with the running command orphaned (README, "Exit codes").

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Which stop signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGTERM.
    Terminate,
    /// SIGHUP.
    Hangup,
}

/// Listens for SIGTERM and SIGHUP (installed for the life of the value; while it lives, neither
/// signal kills the process).
pub(crate) struct StopSignals {
    term: Signal,
    hup: Signal,
}

impl StopSignals {
    /// Installs the handlers.
    ///
    /// # Errors
    /// The OS refused a handler (the message names the signal).
    pub(crate) fn install() -> anyhow::Result<Self> {
        let term = signal(SignalKind::terminate())
            .map_err(|e| anyhow::anyhow!("installing the SIGTERM handler: {e}"))?;
        let hup = signal(SignalKind::hangup())
            .map_err(|e| anyhow::anyhow!("installing the SIGHUP handler: {e}"))?;
        Ok(Self { term, hup })
    }

    /// The next stop signal (pends forever once both streams have closed).
    pub(crate) async fn recv(&mut self) -> Stop {
        tokio::select! {
            Some(()) = self.term.recv() => Stop::Terminate,
            Some(()) = self.hup.recv() => Stop::Hangup,
            else => std::future::pending().await,
        }
    }
}
