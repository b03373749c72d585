//! The runner contract ([`SandboxRunner`]), what confining returns ([`ConfinedArgv`]), how a
//! finished confined run is classified ([`classify`]), and the configured-command runner
//! ([`CommandRunner`], `[sandbox] runner_command`). Behaviour: `docs/upstream/sandbox.md`
//! ("Runners", "Classifying a run").

use std::ffi::OsString;
use std::fmt::Debug;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{SandboxMode, SandboxPolicy, writable_roots};

/// How completely a runner enforces the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    /// Every file access the policy names is enforced.
    Full,
    /// Only part of it (an older Landlock ABI); reported, never hidden.
    Partial,
}

impl Enforcement {
    /// `full` or `partial`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Partial => "partial",
        }
    }
}

/// One rule telling a runner's own failure from the command's: the run exited non-zero (and
/// with one of `allowed_exit_codes` when given); after dropping the stderr lines equal
/// (case-insensitively) to an `informational_lines` entry, one remaining line contains
/// (case-insensitively) a `fatal_signatures` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunnerFailureRule {
    /// Exit codes the rule applies to; `None` = any non-zero exit.
    pub allowed_exit_codes: Option<Vec<i32>>,
    /// Substrings of a fatal line.
    pub fatal_signatures: Vec<String>,
    /// Whole lines that are notices, not failures.
    pub informational_lines: Vec<String>,
}

/// A confined command line and how to read its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfinedArgv {
    /// The runner's name (`bwrap`, `landlock`, `command`, …).
    pub runner: String,
    /// The argv to spawn directly (runner first, the original argv last).
    pub argv: Vec<OsString>,
    /// How completely the policy is enforced.
    pub enforcement: Enforcement,
    /// Case-insensitive stderr substrings that, with a non-zero exit, mean the sandbox denied
    /// an access.
    pub denial_signatures: Vec<String>,
    /// Rules for the runner's own failure (checked before the denial signatures).
    pub runner_failure_rules: Vec<RunnerFailureRule>,
}

/// What confining needs beyond the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfineOptions {
    /// Whether the confined command keeps the network (`[sandbox] network`).
    pub network: bool,
    /// [`writable_roots`] of the policy.
    pub writable_roots: Vec<PathBuf>,
}

/// An OS mechanism that confines a command line. Implementations live in plugins
/// (`dsh-sandbox-linux`) and are registered with [`crate::SandboxService::add_runner`].
pub trait SandboxRunner: Send + Sync + Debug {
    /// A short stable name (`bwrap`, `landlock`).
    fn name(&self) -> &str;

    /// A functional probe (blocking; each runner bounds its own time): `Ok` with the
    /// enforcement it would give, or `Err` with why it cannot be used.
    ///
    /// # Errors
    /// A one-line reason (missing binary, probe exit status and stderr, timeout).
    fn probe(&self) -> Result<Enforcement, String>;

    /// Confines `argv` under `policy` (never `danger-full-access`).
    ///
    /// # Errors
    /// A one-line reason the command cannot be confined (becomes `SANDBOX_UNAVAILABLE`).
    fn confine(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
        options: &ConfineOptions,
        enforcement: Enforcement,
    ) -> Result<ConfinedArgv, String>;
}

/// The verdict on a finished confined run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunVerdict {
    /// The runner itself failed (the matched stderr line): the command did not run as asked.
    RunnerFailed(String),
    /// The sandbox denied an access (the matched denial signature).
    Denied(String),
    /// A normal outcome of the command.
    Normal,
}

/// Classifies a finished run of `confined`: runner-failure rules first, then the denial
/// signatures; a zero exit (or a signal death: `exit_code` `None`) is never a denial.
pub fn classify(confined: &ConfinedArgv, exit_code: Option<i32>, stderr: &str) -> RunVerdict {
    let Some(code) = exit_code.filter(|c| *c != 0) else {
        return RunVerdict::Normal;
    };
    for rule in &confined.runner_failure_rules {
        if rule
            .allowed_exit_codes
            .as_ref()
            .is_some_and(|codes| !codes.contains(&code))
        {
            continue;
        }
        for line in stderr.lines() {
            let lower = line.trim().to_lowercase();
            if rule
                .informational_lines
                .iter()
                .any(|i| i.to_lowercase() == lower)
            {
                continue;
            }
            if rule
                .fatal_signatures
                .iter()
                .any(|s| lower.contains(&s.to_lowercase()))
            {
                return RunVerdict::RunnerFailed(line.trim().to_owned());
            }
        }
    }
    let lower = stderr.to_lowercase();
    for sig in &confined.denial_signatures {
        if lower.contains(&sig.to_lowercase()) {
            return RunVerdict::Denied(sig.clone());
        }
    }
    RunVerdict::Normal
}

/// The bubblewrap-style profile arguments for `policy` (before `--`): `--ro-bind / / --dev
/// /dev --unshare-pid --proc /proc --die-with-parent`, `--unshare-net` without network, then
/// `--bind <root> <root>` for each writable root (the host's `/tmp` among them).
pub fn bwrap_profile(policy: &SandboxPolicy, options: &ConfineOptions) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--unshare-pid",
        "--proc",
        "/proc",
        "--die-with-parent",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    if !options.network {
        a.push("--unshare-net".into());
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        for r in &options.writable_roots {
            a.push("--bind".into());
            a.push(r.clone().into());
            a.push(r.clone().into());
        }
    }
    a
}

/// `[sandbox] runner_command`: a configured runner that replaces selection (no probe), gets
/// [`bwrap_profile`] arguments then `--` and the argv, is asserted `full`, and whose stderr
/// lines containing one of `failure_signatures` are its own failures.
#[derive(Debug, Clone)]
pub struct CommandRunner {
    /// The runner executable.
    pub program: PathBuf,
    /// Its fatal stderr signatures (`[sandbox] runner_failure_signatures`).
    pub failure_signatures: Vec<String>,
}

impl SandboxRunner for CommandRunner {
    fn name(&self) -> &str {
        "command"
    }

    fn probe(&self) -> Result<Enforcement, String> {
        Ok(Enforcement::Full)
    }

    fn confine(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
        options: &ConfineOptions,
        _enforcement: Enforcement,
    ) -> Result<ConfinedArgv, String> {
        let mut out = vec![self.program.clone().into_os_string()];
        out.extend(bwrap_profile(policy, options));
        out.push("--".into());
        out.extend(argv.iter().cloned());
        Ok(ConfinedArgv {
            runner: self.name().to_owned(),
            argv: out,
            enforcement: Enforcement::Full,
            denial_signatures: vec!["read-only file system".into(), "permission denied".into()],
            runner_failure_rules: vec![RunnerFailureRule {
                allowed_exit_codes: None,
                fatal_signatures: self.failure_signatures.clone(),
                informational_lines: Vec::new(),
            }],
        })
    }
}

/// `writable_roots` and `network` as [`ConfineOptions`]; a root that does not exist (a
/// `$TMPDIR` naming a missing folder) is left out, so it cannot make every runner fail.
pub fn confine_options(policy: &SandboxPolicy, network: bool) -> ConfineOptions {
    ConfineOptions {
        network,
        writable_roots: writable_roots(policy)
            .into_iter()
            .filter(|r| r.exists())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confined() -> ConfinedArgv {
        ConfinedArgv {
            runner: "landlock".into(),
            argv: vec![],
            enforcement: Enforcement::Partial,
            denial_signatures: vec!["permission denied".into()],
            runner_failure_rules: vec![RunnerFailureRule {
                allowed_exit_codes: Some(vec![125]),
                fatal_signatures: vec!["landlock-run: ".into()],
                informational_lines: vec![
                    "landlock-run: partial enforcement (older Landlock ABI)".into(),
                ],
            }],
        }
    }

    #[test]
    fn informational_line_is_not_a_failure() {
        let c = confined();
        let notice = "landlock-run: partial enforcement (older Landlock ABI)\n";
        assert_eq!(classify(&c, Some(125), notice), RunVerdict::Normal);
        assert_eq!(classify(&c, Some(1), notice), RunVerdict::Normal);
        assert_eq!(
            classify(&c, Some(125), "landlock-run: cannot open /x\n"),
            RunVerdict::RunnerFailed("landlock-run: cannot open /x".into())
        );
        // a child exiting 1 with a fatal-looking line is not the runner (exit gate)
        assert_eq!(
            classify(&c, Some(1), "landlock-run: cannot open /x\n"),
            RunVerdict::Normal
        );
        assert_eq!(
            classify(&c, Some(1), "touch: x: Permission denied\n"),
            RunVerdict::Denied("permission denied".into())
        );
        assert_eq!(
            classify(&c, Some(0), "Permission denied"),
            RunVerdict::Normal
        );
    }
}
