//! Running one command hook through the process executor (`dsh-process`): `bash -c <command>`
//! in the session's working directory, in a new session and process group of its own (killed as
//! a whole on timeout and cancellation), with the scrubbed non-interactive environment, the
//! payload on stdin (closed at once), a timeout (the hook's own, else 10 minutes) and bounded
//! output. Hooks are the user's own code and run outside any OS sandbox. See
//! docs/upstream/hooks.md ("Execution").

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use dsh_process::{ProcessSpec, env};
use tokio_util::sync::CancellationToken;

/// The timeout of a hook without one of its own: 10 minutes (upstream `defaultTimeoutMs`).
pub const DEFAULT_TIMEOUT_MS: u64 = 600_000;
/// Most bytes read of each of stdout and stderr: 16 MiB. Output beyond it is not decoded
/// ([`HookRun::stdout_truncated`]; the bridge says so, and a PreToolUse hook's call is denied).
pub const OUTPUT_MAX_BYTES: usize = 16 << 20;
/// SIGTERM → SIGKILL grace of a timed-out or cancelled hook (ms).
pub const KILL_GRACE_MS: u64 = 1_000;
/// How long the output of an exited hook is drained before escaped writers are given up on
/// (ms): a grandchild holding stdout does not hold the call.
pub const DRAIN_GRACE_MS: u64 = 500;

/// What to run.
#[derive(Debug, Clone)]
pub struct HookRunSpec {
    /// The command line (`bash -c`).
    pub command: String,
    /// Working directory (absolute, existing).
    pub workdir: PathBuf,
    /// Timeout in ms.
    pub timeout_ms: u64,
    /// Extra environment entries (e.g. `CLAUDE_PROJECT_DIR`), over the scrubbed ambient one.
    pub env: BTreeMap<String, String>,
    /// The stdin bytes.
    pub stdin: Vec<u8>,
}

/// How one run went.
#[derive(Debug, Clone, PartialEq)]
pub struct HookRun {
    /// Exit code (`None`: killed by a signal, timed out, cancelled, or could not start).
    pub exit_code: Option<i32>,
    /// Captured stdout.
    pub stdout: String,
    /// stdout exceeded [`OUTPUT_MAX_BYTES`] (`stdout` then holds only its head and tail).
    pub stdout_truncated: bool,
    /// Captured stderr (for a hook that could not start: the reason).
    pub stderr: String,
    /// The timeout fired (the process group was killed).
    pub timed_out: bool,
    /// The turn's cancel signal fired (the process group was killed).
    pub cancelled: bool,
    /// Wall time, milliseconds (fractional).
    pub duration_ms: f64,
}

/// Runs `spec` to completion (exit, timeout or `cancel`). Never fails: a hook that cannot be
/// started is a run without an exit code whose stderr says why.
pub async fn run_hook(spec: &HookRunSpec, cancel: CancellationToken) -> HookRun {
    let started = Instant::now();
    let process = ProcessSpec {
        program: "bash".into(),
        args: vec!["-c".into(), spec.command.clone().into()],
        workdir: spec.workdir.clone(),
        env: env::child_env(env::scrubbed_ambient(), &spec.env, &BTreeMap::new()),
        timeout_ms: Some(spec.timeout_ms),
        stdout_max_bytes: OUTPUT_MAX_BYTES,
        stderr_max_bytes: OUTPUT_MAX_BYTES,
        kill_grace_ms: KILL_GRACE_MS,
        drain_grace_ms: DRAIN_GRACE_MS,
        output_files: None,
    };
    let result = dsh_process::run_with_stdin(&process, spec.stdin.clone(), cancel).await;
    let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok(r) => HookRun {
            exit_code: r.outcome.exit_code,
            stdout_truncated: r.stdout.truncated,
            stdout: r.stdout.text,
            stderr: r.stderr.text,
            timed_out: r.outcome.timed_out,
            cancelled: r.outcome.aborted,
            duration_ms,
        },
        Err(e) => HookRun {
            exit_code: None,
            stdout: String::new(),
            stdout_truncated: false,
            stderr: e.to_string(),
            timed_out: false,
            cancelled: false,
            duration_ms,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &str, timeout_ms: u64) -> HookRunSpec {
        HookRunSpec {
            command: command.into(),
            workdir: std::env::temp_dir(),
            timeout_ms,
            env: BTreeMap::from([("CLAUDE_PROJECT_DIR".to_owned(), "/proj".to_owned())]),
            stdin: b"{\"x\":1}\n".to_vec(),
        }
    }

    #[tokio::test]
    async fn payload_on_stdin_env_and_exit_code() {
        let r = run_hook(
            &spec(
                "cat; echo \"dir=$CLAUDE_PROJECT_DIR\"; echo err >&2; exit 3",
                20_000,
            ),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(r.exit_code, Some(3));
        assert_eq!(r.stdout, "{\"x\":1}\ndir=/proj\n");
        assert_eq!(r.stderr, "err\n");
        assert!(!r.timed_out && !r.cancelled);
    }

    #[tokio::test]
    async fn a_hook_past_its_timeout_is_killed() {
        let r = run_hook(&spec("sleep 30", 200), CancellationToken::new()).await;
        assert!(r.timed_out, "{r:?}");
        assert_eq!(r.exit_code, None);
        // A hang guard, not a performance assertion.
        assert!(r.duration_ms < 15_000.0, "{r:?}");
    }
}
