//! Bash-family bug cases (BC-18, BC-19, BC-20, BC-22; see `docs/tools.md`) and the basic
//! contract of the executor: exit codes, signals, closed stdin, lossy UTF-8, output caps,
//! process-group cleanup, timeouts, cancellation and escaped processes.
//!
//! Time bounds are generous "did not hang" limits only; no test asserts a duration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
use std::path::Path;
use std::time::{Duration, Instant};

use dsh_tool_shell::proc::{group_members, pid_alive};
use dsh_tool_shell::{
    JobService, JobStatus, ShellConfig, ShellExecRequest, ShellExecutor, ShellRunResult,
    render_result, start_bash_job,
};
use tokio_util::sync::CancellationToken;

/// Generous bound for "the call did not hang".
const HANG: Duration = Duration::from_secs(30);

fn executor(dir: &Path) -> ShellExecutor {
    ShellExecutor::new(ShellConfig {
        cwd: Some(dir.to_path_buf()),
        ..ShellConfig::default()
    })
}

async fn run(dir: &Path, command: &str, timeout_ms: Option<f64>) -> ShellRunResult {
    let ex = executor(dir);
    let spec = ex
        .resolve(ShellExecRequest {
            command: command.into(),
            timeout_ms,
            ..Default::default()
        })
        .unwrap();
    tokio::time::timeout(HANG, ex.run(&spec, CancellationToken::new()))
        .await
        .expect("hung")
        .unwrap()
}

/// Polls (up to a generous bound) until `pid` no longer exists or is a zombie.
async fn gone(pid: u32) -> bool {
    let end = Instant::now() + Duration::from_secs(15);
    while Instant::now() < end {
        if !pid_alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

async fn read_pid(path: &Path) -> u32 {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && let Ok(p) = s.trim().parse()
        {
            return p;
        }
        assert!(
            Instant::now() < end,
            "pid file {} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_exact_result() {
    let d = tempfile::tempdir().unwrap();
    let r = run(d.path(), "echo hi; echo err >&2", None).await;
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        serde_json::json!({
            "exitCode": 0, "signal": null, "timedOut": false, "aborted": false, "timeoutMs": 120000,
            "stdout": {"text": "hi\n", "truncated": false, "totalBytes": 3, "totalLines": 1, "omittedBytes": 0, "invalidUtf8": false},
            "stderr": {"text": "err\n", "truncated": false, "totalBytes": 4, "totalLines": 1, "omittedBytes": 0, "invalidUtf8": false},
            "leftoverPids": []
        })
    );
    assert_eq!(render_result(&r), "hi\n[stderr]\nerr\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_code_and_signal_reported_exactly() {
    let d = tempfile::tempdir().unwrap();
    let r = run(d.path(), "exit 3", None).await;
    assert_eq!((r.exit_code, r.signal.as_deref()), (Some(3), None));
    assert_eq!(render_result(&r), "(no output)\n[exit code: 3]");
    let r = run(d.path(), "kill -TERM $$", None).await;
    assert_eq!((r.exit_code, r.signal.as_deref()), (None, Some("SIGTERM")));
    assert_eq!(
        render_result(&r),
        "(no output)\n[killed by signal: SIGTERM]"
    );
    let r = run(d.path(), "echo x; kill -KILL $$", None).await;
    assert_eq!((r.exit_code, r.signal.as_deref()), (None, Some("SIGKILL")));
    assert_eq!(render_result(&r), "x\n[killed by signal: SIGKILL]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_closed() {
    let d = tempfile::tempdir().unwrap();
    let r = run(d.path(), "read x; echo got:$x", None).await;
    assert_eq!(r.stdout.text, "got:\n");
    assert_eq!(r.exit_code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_is_scrubbed_and_terminal_is_dumb() {
    let d = tempfile::tempdir().unwrap();
    let ex = executor(d.path());
    let mut req = ShellExecRequest {
        command: "echo $TERM $PAGER $NO_COLOR $DSH_X $EXTRA".into(),
        ..Default::default()
    };
    req.env.insert("EXTRA".into(), "e".into());
    req.dsh_env.insert("DSH_X".into(), "managed".into());
    let spec = ex.resolve(req).unwrap();
    assert!(
        spec.env
            .keys()
            .all(|k| !dsh_tool_shell::env::is_sensitive_name(k))
    );
    assert!(spec.env.contains_key("PATH"));
    let r = ex.run(&spec, CancellationToken::new()).await.unwrap();
    assert_eq!(r.stdout.text, "dumb cat 1 managed e\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_utf8_output_is_flagged_and_decoded_lossily() {
    let d = tempfile::tempdir().unwrap();
    let r = run(d.path(), r"printf 'a\377b\n'", None).await;
    assert_eq!(r.stdout.text, "a\u{FFFD}b\n");
    assert!(r.stdout.invalid_utf8);
    assert_eq!(
        render_result(&r),
        "a\u{FFFD}b\n[output contained invalid UTF-8; decoded lossily]"
    );
}

/// BC-20: a 10 MB single line is cut by bytes to exactly the cap (64 000 = 32 000 head + 32 000 tail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabyte_single_line_is_capped() {
    let d = tempfile::tempdir().unwrap();
    let r = run(d.path(), "head -c 10485760 /dev/zero | tr '\\0' a", None).await;
    let half = "a".repeat(32_000);
    let expected = format!(
        "{half}\n[... output truncated: 10421760 bytes omitted; total 10485760 bytes, 1 line; kept the first 32000 and last 32000 bytes ...]\n{half}"
    );
    assert_eq!(r.stdout.text, expected);
    assert_eq!(
        (
            r.stdout.truncated,
            r.stdout.total_bytes,
            r.stdout.total_lines,
            r.stdout.omitted_bytes
        ),
        (true, 10_485_760, 1, 10_421_760)
    );
}

/// BC-20: head and tail both survive; the tail keeps FINAL_ERROR (stderr) and exit code 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flood_keeps_head_tail_and_exit_code() {
    let d = tempfile::tempdir().unwrap();
    let r = run(
        d.path(),
        r#"for i in $(seq 1 200000); do echo "line $i"; done; echo FINAL_ERROR >&2; exit 3"#,
        None,
    )
    .await;
    let total: u64 = (1..=200_000u64)
        .map(|n| 6 + n.to_string().len() as u64)
        .sum();
    assert_eq!(
        (r.stdout.total_bytes, r.stdout.total_lines),
        (total, 200_000)
    );
    assert!(r.stdout.text.starts_with("line 1\nline 2\n"));
    assert!(r.stdout.text.ends_with("line 199999\nline 200000\n"));
    assert!(r.stdout.text.contains(&format!(
        "[... output truncated: {} bytes omitted; total {total} bytes, 200000 lines;",
        r.stdout.omitted_bytes
    )));
    assert_eq!(r.stderr.text, "FINAL_ERROR\n");
    assert!(render_result(&r).ends_with("[stderr]\nFINAL_ERROR\n[exit code: 3]"));
}

/// BC-19: `sleep 1000 &` then exit — the call returns and nothing of the group survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_member_killed_when_call_ends() {
    let d = tempfile::tempdir().unwrap();
    let r = run(d.path(), "sleep 1000 & echo $!", None).await;
    let pid: u32 = r.stdout.text.trim().parse().unwrap();
    assert_eq!((r.exit_code, r.leftover_pids.clone()), (Some(0), vec![]));
    assert!(gone(pid).await, "sleep {pid} survived the call");
    let r = run(d.path(), "sleep 120 & echo started", None).await;
    assert_eq!(r.stdout.text, "started\n");
}

/// BC-19: a redirected, intentionally detached server is still a group member and is terminated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirected_background_server_is_terminated() {
    let d = tempfile::tempdir().unwrap();
    let r = run(d.path(), "sleep 1000 > server.log 2>&1 & echo $!", None).await;
    let pid: u32 = r.stdout.text.trim().parse().unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert!(gone(pid).await);
}

/// BC-18 (1): timeout with a looping child holding the pipes — the group dies, the call returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_group() {
    let d = tempfile::tempdir().unwrap();
    let r = run(
        d.path(),
        "(while true; do echo child; sleep 1; done) & echo $! > bg.pid; echo $$ > sh.pid; exec sleep 1000",
        Some(2000.0),
    )
    .await;
    assert!(r.timed_out && !r.aborted);
    assert_eq!(
        (r.exit_code, r.signal.as_deref(), r.timeout_ms),
        (None, Some("SIGTERM"), 2000)
    );
    assert!(r.stdout.text.starts_with("child\n"));
    assert!(render_result(&r).ends_with("[timed out after 2000ms]\n[killed by signal: SIGTERM]"));
    assert!(gone(read_pid(&d.path().join("bg.pid")).await).await);
    let sh = read_pid(&d.path().join("sh.pid")).await;
    assert!(gone(sh).await);
    assert_eq!(group_members(sh), Vec::<u32>::new());
    assert!(r.leftover_pids.is_empty());
}

/// BC-19: a pipeline is killed completely on timeout (no member of the group survives).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_killed_completely_on_timeout() {
    let d = tempfile::tempdir().unwrap();
    let r = run(
        d.path(),
        "echo $$ > sh.pid; yes needle | grep needle | head -c 100000000000 > /dev/null",
        Some(1000.0),
    )
    .await;
    assert!(r.timed_out);
    let sh = read_pid(&d.path().join("sh.pid")).await;
    assert!(gone(sh).await);
    assert_eq!(group_members(sh), Vec::<u32>::new());
}

/// Dropping a run mid-way (a caller that does not drain) still kills the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_run_kills_the_group() {
    let d = tempfile::tempdir().unwrap();
    let ex = executor(d.path());
    let spec = ex
        .resolve(ShellExecRequest {
            command: "echo $$ > sh.pid; sleep 1000 & wait".into(),
            ..Default::default()
        })
        .unwrap();
    let fut = ex.run(&spec, CancellationToken::new());
    let _ = tokio::time::timeout(Duration::from_millis(1500), fut).await;
    let sh = read_pid(&d.path().join("sh.pid")).await;
    let end = Instant::now() + Duration::from_secs(15);
    while !group_members(sh).is_empty() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(group_members(sh), Vec::<u32>::new());
}

/// BC-20: `seq 1 5000000` (about 38 MB) streams through a bounded collector with exact totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seq_flood_is_counted_exactly() {
    let d = tempfile::tempdir().unwrap();
    let r = run(d.path(), "seq 1 5000000", None).await;
    let total: u64 = (1..=5_000_000u64)
        .map(|n| n.to_string().len() as u64 + 1)
        .sum();
    assert_eq!(
        (r.stdout.total_bytes, r.stdout.total_lines),
        (total, 5_000_000)
    );
    assert_eq!(r.stdout.omitted_bytes, total - 64_000);
    assert!(r.stdout.text.starts_with("1\n2\n3\n"));
    assert!(r.stdout.text.ends_with("4999999\n5000000\n"));
}

/// BC-18 (2): a FIFO writer in the background and `cat` in the foreground.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_with_fifo() {
    let d = tempfile::tempdir().unwrap();
    let r = run(
        d.path(),
        "mkfifo p; (while true; do echo x; sleep 1; done) > p & echo $! > bg.pid; cat p",
        Some(2000.0),
    )
    .await;
    assert!(r.timed_out);
    assert!(r.stdout.text.starts_with("x\n"));
    assert!(gone(read_pid(&d.path().join("bg.pid")).await).await);
}

/// A command that ignores SIGTERM is SIGKILLed after the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ignoring_group_is_sigkilled() {
    let d = tempfile::tempdir().unwrap();
    let r = run(
        d.path(),
        "trap '' TERM; sleep 1000 & echo $! > bg.pid; wait",
        Some(1000.0),
    )
    .await;
    assert!(r.timed_out);
    assert_eq!(r.signal.as_deref(), Some("SIGKILL"));
    assert!(gone(read_pid(&d.path().join("bg.pid")).await).await);
}

/// BC-18 (3): a grandchild in its own session keeps the pipes; the call still returns after
/// timeout + grace and reports that pid (which it does not kill).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escaped_setsid_process_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let r = run(
        d.path(),
        "sh -c 'setsid sleep 1000 & echo $! > esc.pid'; sleep 1000",
        Some(2000.0),
    )
    .await;
    assert!(started.elapsed() < HANG);
    let esc = read_pid(&d.path().join("esc.pid")).await;
    assert!(r.timed_out);
    assert_eq!(r.leftover_pids, vec![esc]);
    assert!(render_result(&r).contains(&format!(
        "[still running after the call: pid {esc} (left the process group and kept the output pipe open; not killed)]"
    )));
    assert!(pid_alive(esc));
    dsh_tool_shell::proc::signal_pid(esc, rustix::process::Signal::KILL);
    assert!(gone(esc).await);
}

/// BC-22: cancelling a running call returns promptly and kills the whole group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_the_group() {
    for cmd in [
        "sh -c 'echo $$ > cancel.pid; exec sleep 600'",
        "sh -c 'echo $$ > cancel.pid; sleep 600 & sleep 600'",
    ] {
        let d = tempfile::tempdir().unwrap();
        let ex = executor(d.path());
        let spec = ex
            .resolve(ShellExecRequest {
                command: cmd.into(),
                ..Default::default()
            })
            .unwrap();
        let cancel = CancellationToken::new();
        let task = {
            let (ex, spec, cancel) = (ex.clone(), spec.clone(), cancel.clone());
            tokio::spawn(async move { ex.run(&spec, cancel).await })
        };
        let pid = read_pid(&d.path().join("cancel.pid")).await;
        cancel.cancel();
        let r = tokio::time::timeout(HANG, task)
            .await
            .expect("hung")
            .unwrap()
            .unwrap();
        assert!(r.aborted && !r.timed_out);
        assert_eq!(r.signal.as_deref(), Some("SIGTERM"));
        assert!(gone(pid).await);
    }
}

/// Background jobs: output is read incrementally, kill terminates the group, status is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_job_read_and_kill() {
    let d = tempfile::tempdir().unwrap();
    let ex = executor(d.path());
    let jobs = JobService::default();
    let spec = ex
        .resolve(ShellExecRequest {
            command: "echo one; echo $$ > job.pid; sleep 1000".into(),
            ..Default::default()
        })
        .unwrap();
    let id = start_bash_job(&ex, &jobs, &spec, None).unwrap();
    assert_eq!(id, "bash-1");
    let pid = read_pid(&d.path().join("job.pid")).await;
    // The pipe reader may lag the pid file: accumulate reads until the first line arrives.
    let mut text = String::new();
    let end = Instant::now() + HANG;
    while text.is_empty() && Instant::now() < end {
        let (t, snap) = jobs.read(&id, None).unwrap();
        assert_eq!(snap.status, JobStatus::Running);
        text.push_str(&t);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(text, "one\n");
    assert_eq!(jobs.read(&id, None).unwrap().0, "");
    assert!(jobs.kill(&id, None, Some("done")).unwrap());
    let snap = jobs
        .wait(&id, HANG, None, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (snap.status, snap.detail.as_deref()),
        (JobStatus::Killed, Some("signal: SIGTERM"))
    );
    assert_eq!(
        dsh_tool_shell::status_line(&snap),
        "[status: killed, signal: SIGTERM]"
    );
    assert!(gone(pid).await);
    assert!(!jobs.kill(&id, None, None).unwrap());
    let spec = ex
        .resolve(ShellExecRequest {
            command: "echo two; exit 4".into(),
            ..Default::default()
        })
        .unwrap();
    let id = start_bash_job(&ex, &jobs, &spec, None).unwrap();
    assert_eq!(id, "bash-2");
    let snap = jobs
        .wait(&id, HANG, None, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (snap.status, snap.detail.as_deref()),
        (JobStatus::Completed, Some("exit code: 4"))
    );
    assert_eq!(jobs.read(&id, None).unwrap().0, "two\n");
    assert_eq!(jobs.read(&id, None).unwrap().0, "");
}

/// Jobs owned by an agent scope are fenced from other agents and die with the scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_owner_fence_and_disposal() {
    let d = tempfile::tempdir().unwrap();
    let ex = executor(d.path());
    let jobs = JobService::default();
    let kernel = dsh_kernel::Kernel::new();
    let key = dsh_kernel::ScopeKey::new("agent-a");
    let agent = kernel.root().tagged(key.clone(), "agent-a").unwrap();
    let other = dsh_kernel::ScopeKey::new("agent-b");
    let spec = ex
        .resolve(ShellExecRequest {
            command: "echo $$ > own.pid; sleep 1000".into(),
            ..Default::default()
        })
        .unwrap();
    let id = start_bash_job(&ex, &jobs, &spec, Some(agent.clone())).unwrap();
    let pid = read_pid(&d.path().join("own.pid")).await;
    assert_eq!(
        jobs.get(&id, Some(&other)).unwrap_err().code(),
        "JOB_ACCESS_DENIED"
    );
    assert_eq!(jobs.get(&id, None).unwrap_err().code(), "JOB_ACCESS_DENIED");
    assert_eq!(jobs.list(Some(&other)), vec![]);
    assert_eq!(jobs.list(Some(&key)).len(), 1);
    tokio::time::timeout(HANG, agent.dispose())
        .await
        .expect("dispose hung");
    assert_eq!(jobs.get(&id, Some(&key)).unwrap().status, JobStatus::Killed);
    assert!(gone(pid).await);
    assert_eq!(
        jobs.get("bash-99", None).unwrap_err().code(),
        "JOB_NOT_FOUND"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_validates_and_caps() {
    let d = tempfile::tempdir().unwrap();
    let ex = executor(d.path());
    let e = ex
        .resolve(ShellExecRequest {
            command: "  ".into(),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(e.code(), "SHELL_INVALID_REQUEST");
    let e = ex
        .resolve(ShellExecRequest {
            command: "x".into(),
            timeout_ms: Some(0.0),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(e.code(), "SHELL_INVALID_REQUEST");
    let s = ex
        .resolve(ShellExecRequest {
            command: "x".into(),
            timeout_ms: Some(9e9),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(s.timeout_ms, 600_000);
    let e = ex
        .resolve(ShellExecRequest {
            command: "x".into(),
            workdir: Some("nope".into()),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(e.code(), "SHELL_BAD_WORKDIR");
}
