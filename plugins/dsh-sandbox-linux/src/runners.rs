//! [`BwrapRunner`] and [`LandlockRunner`]: their probes, profiles, denial signatures and
//! runner-failure rules (`docs/upstream/sandbox.md`, "Runners").

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_sandbox::{
    ConfineOptions, ConfinedArgv, Enforcement, RunnerFailureRule, SandboxMode, SandboxPolicy,
    SandboxRunner, bwrap_profile,
};

use crate::HELPER_NAME;
use crate::helper::{PARTIAL_NOTICE, PROBE_FULL, PROBE_PARTIAL};

/// Runs `program args` with stdin `/dev/null` and waits at most `timeout_ms`: `Ok(stdout)` on
/// exit 0; `Err` with the spawn error, the timeout, or the exit status and first stderr line.
///
/// # Errors
/// A one-line reason, as above.
pub fn probe_with_timeout(
    program: &Path,
    args: &[OsString],
    timeout_ms: u64,
) -> Result<String, String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| dsh_sandbox::spawn_failure_detail(program, &e))?;
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("probe timed out after {timeout_ms} ms"));
            }
            Err(e) => return Err(format!("probe wait failed: {e}")),
        }
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    if status.success() {
        Ok(out)
    } else {
        let line = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        Err(format!("probe failed ({status}): {}", line.trim()))
    }
}

/// Bubblewrap: probe `bwrap <read-only profile> -- true`; profile `--ro-bind / / --dev /dev
/// --unshare-pid --proc /proc --die-with-parent` (+ `--unshare-net` without network, +
/// `--bind <root> <root>` per writable root); full enforcement; denial signature `read-only
/// file system`; runner failure: a non-zero exit with a `bwrap: ` line.
#[derive(Debug, Clone)]
pub struct BwrapRunner {
    /// The bwrap executable.
    pub program: PathBuf,
    /// `[sandbox] network`.
    pub network: bool,
    /// Probe timeout (ms).
    pub probe_timeout_ms: u64,
}

impl SandboxRunner for BwrapRunner {
    fn name(&self) -> &str {
        "bwrap"
    }

    fn probe(&self) -> Result<Enforcement, String> {
        let policy = SandboxPolicy::new(SandboxMode::ReadOnly, Path::new("/"));
        let mut args = bwrap_profile(
            &policy,
            &ConfineOptions {
                network: self.network,
                writable_roots: Vec::new(),
            },
        );
        args.push("--".into());
        args.push("true".into());
        probe_with_timeout(&self.program, &args, self.probe_timeout_ms)?;
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
            denial_signatures: vec!["read-only file system".into()],
            runner_failure_rules: vec![RunnerFailureRule {
                allowed_exit_codes: None,
                fatal_signatures: vec!["bwrap: ".into()],
                informational_lines: Vec::new(),
            }],
        })
    }
}

/// The default helper path: `dsh-landlock-run` next to the running executable, else one
/// directory up (a test executable in `target/<profile>/deps/`).
pub fn default_helper_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let next = dir.join(HELPER_NAME);
    if next.is_file() {
        return next;
    }
    match dir.parent() {
        Some(up) if up.join(HELPER_NAME).is_file() => up.join(HELPER_NAME),
        _ => next,
    }
}

/// Landlock through the helper: probe `<helper> --probe` (`landlock: fully enforced` ⇒ full,
/// `landlock: partially enforced (older ABI)` ⇒ partial, anything else unusable); profile
/// `[--no-network] --ro / --rw /dev/null` (+ `--rw <root>` per writable root) `--` argv; denial
/// signature `permission denied`; runner failure: exit 125 with a `landlock-run: ` line, the
/// partial-enforcement notice excluded.
#[derive(Debug, Clone)]
pub struct LandlockRunner {
    /// The helper executable.
    pub helper: PathBuf,
    /// `[sandbox] network`.
    pub network: bool,
    /// Probe timeout (ms).
    pub probe_timeout_ms: u64,
}

impl LandlockRunner {
    fn net_args(&self) -> Vec<OsString> {
        if self.network {
            Vec::new()
        } else {
            vec!["--no-network".into()]
        }
    }
}

impl SandboxRunner for LandlockRunner {
    fn name(&self) -> &str {
        "landlock"
    }

    fn probe(&self) -> Result<Enforcement, String> {
        let mut args = self.net_args();
        args.push("--probe".into());
        let out = probe_with_timeout(&self.helper, &args, self.probe_timeout_ms)?;
        match out.trim() {
            PROBE_FULL => Ok(Enforcement::Full),
            PROBE_PARTIAL => Ok(Enforcement::Partial),
            other => Err(format!("unexpected probe answer {other:?}")),
        }
    }

    fn confine(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
        options: &ConfineOptions,
        enforcement: Enforcement,
    ) -> Result<ConfinedArgv, String> {
        let mut out = vec![self.helper.clone().into_os_string()];
        if !options.network {
            out.push("--no-network".into());
        }
        for a in ["--ro", "/", "--rw", "/dev/null"] {
            out.push(a.into());
        }
        if policy.mode == SandboxMode::WorkspaceWrite {
            for r in &options.writable_roots {
                out.push("--rw".into());
                out.push(r.clone().into());
            }
        }
        out.push("--".into());
        out.extend(argv.iter().cloned());
        Ok(ConfinedArgv {
            runner: self.name().to_owned(),
            argv: out,
            enforcement,
            denial_signatures: vec!["permission denied".into()],
            runner_failure_rules: vec![RunnerFailureRule {
                allowed_exit_codes: Some(vec![125]),
                fatal_signatures: vec!["landlock-run: ".into()],
                informational_lines: vec![PARTIAL_NOTICE.into()],
            }],
        })
    }
}
