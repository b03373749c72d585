//! Recognising a command that failed because it wanted a terminal. Children run without one
//! ([`crate::spawn`]), so a password prompt, a credential prompt or a full-screen program fails
//! at once instead of stalling; [`wanted_terminal`] recognises the usual messages, so the caller
//! can tell the model why ([`NO_TERMINAL_NOTE`]). Behaviour notes: `docs/tools.md` ("Process
//! executor").

/// Lower-case fragments of the messages programs print when they need a terminal and have none:
/// opening `/dev/tty` (`bash: /dev/tty: No such device or address`, ssh's `read_passphrase:
/// can't open /dev/tty`), git with prompts disabled (`could not read Username for …: terminal
/// prompts disabled`), terminal ioctls on a pipe (`Inappropriate ioctl for device`), and the
/// usual "not a terminal" refusals (sudo, docker, curses programs).
pub const TERMINAL_MARKERS: &[&str] = &[
    "/dev/tty",
    "could not read username",
    "could not read password",
    "terminal prompts disabled",
    "inappropriate ioctl for device",
    "a terminal is required",
    "not a terminal",
    "not a tty",
    "no tty present",
    "error opening terminal",
    // vim and other full-screen programs started directly
    "is not from a terminal",
    "is not to a terminal",
    // git ran the non-interactive editor (`GIT_EDITOR=true`) for a commit message
    "aborting commit due to empty commit message",
];

/// The note a tool result carries when [`wanted_terminal`] is true (one line).
pub const NO_TERMINAL_NOTE: &str = "[no terminal: this command runs without a terminal and with stdin from /dev/null, so it cannot prompt for passwords, credentials or editor input; run it non-interactively (pass input by flags, files or environment, use batch/--yes options)]";

/// True when a command that failed (`failed`: non-zero exit or killed) printed, in `stdout` or
/// `stderr`, one of the [`TERMINAL_MARKERS`] (case-insensitive). A command that succeeded never
/// counts, whatever it printed.
pub fn wanted_terminal(failed: bool, stdout: &str, stderr: &str) -> bool {
    if !failed {
        return false;
    }
    let hit = |text: &str| {
        let lower = text.to_lowercase();
        TERMINAL_MARKERS.iter().any(|m| lower.contains(m))
    };
    hit(stderr) || hit(stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_terminal_failures_only_when_the_command_failed() {
        let cases = [
            "bash: /dev/tty: No such device or address",
            "fatal: could not read Username for 'https://example.invalid': terminal prompts disabled",
            "stty: 'standard input': Inappropriate ioctl for device",
            "sudo: a terminal is required to read the password; either use the -S option",
            "the input device is not a TTY",
            "Error opening terminal: dumb.",
            "Vim: Warning: Output is not to a terminal",
            "Vim: Warning: Input is not from a terminal",
            "Aborting commit due to empty commit message.",
        ];
        for c in cases {
            assert!(wanted_terminal(true, "", c), "{c}");
            assert!(wanted_terminal(true, c, ""), "{c}");
            assert!(!wanted_terminal(false, "", c), "{c}");
        }
        assert!(!wanted_terminal(true, "", "error: file not found"));
    }
}
