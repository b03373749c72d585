//! The process executor with real processes: a child runs in a session of its own (no
//! controlling terminal), with stdin `/dev/null` and exactly the environment it was given, and a
//! timeout terminates its whole group.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

use std::collections::BTreeMap;
use std::time::Duration;

use dsh_process::{ProcessSpec, run};
use tokio_util::sync::CancellationToken;

fn bash(command: &str, env: BTreeMap<String, String>) -> ProcessSpec {
    ProcessSpec {
        program: "bash".into(),
        args: vec!["-c".into(), command.into()],
        workdir: std::env::temp_dir(),
        env,
        timeout_ms: Some(20_000),
        stdout_max_bytes: 64_000,
        stderr_max_bytes: 64_000,
        kill_grace_ms: 500,
        drain_grace_ms: 500,
        output_files: None,
    }
}

fn path_only() -> BTreeMap<String, String> {
    BTreeMap::from([("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())])
}

/// `/proc/<pid>/stat` fields 5..=7 of the shell: process group, session, controlling tty.
#[tokio::test]
async fn the_child_leads_a_new_session_without_a_terminal() {
    let r = run(
        &bash(
            r#"read -r stat < /proc/$$/stat; set -- ${stat##*) }; echo "$$ $3 $4 $5""#,
            path_only(),
        ),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(r.outcome.exit_code, Some(0), "{r:?}");
    let fields: Vec<u64> = r
        .stdout
        .text
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    let [pid, pgrp, session, tty] = fields[..] else {
        panic!("{:?}", r.stdout.text)
    };
    assert_eq!(pgrp, pid, "process group");
    assert_eq!(session, pid, "session");
    assert_eq!(tty, 0, "controlling terminal");
    // Opening the terminal fails at once instead of prompting.
    let r = run(
        &bash("exec 3</dev/tty", path_only()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(r.outcome.exit_code, Some(1));
    assert!(
        dsh_process::wanted_terminal(true, &r.stdout.text, &r.stderr.text),
        "{r:?}"
    );
}

#[tokio::test]
async fn stdin_is_empty_and_the_environment_is_exactly_the_given_one() {
    let env = BTreeMap::from([
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("ONLY".to_owned(), "this".to_owned()),
    ]);
    let r = run(
        &bash(r#"cat; echo "[${ONLY}] [${HOME-unset}]""#, env),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(r.stdout.text, "[this] [unset]\n");
}

#[tokio::test]
async fn a_timeout_terminates_the_whole_group() {
    let mut spec = bash("sleep 30 & echo $!; wait", path_only());
    spec.timeout_ms = Some(300);
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        run(&spec, CancellationToken::new()),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(r.outcome.timed_out);
    let sleeper: u32 = r.stdout.text.trim().parse().unwrap();
    assert!(!dsh_process::proc::pid_alive(sleeper));
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error() {
    let mut spec = bash("true", path_only());
    spec.program = "dsh-no-such-program".into();
    let e = run(&spec, CancellationToken::new()).await.unwrap_err();
    assert_eq!(dsh_kernel::ErrorCode::code(&e), "PROCESS_SPAWN_FAILED");
    match e {
        dsh_process::ProcessError::Spawn(io) => {
            assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
}

/// A stream beyond its cap is whole in its output file, written as it arrived; the other,
/// small stream gets no file; the counts are exact.
#[tokio::test]
async fn an_overflowing_stream_is_whole_in_its_output_file() {
    let tmp = tempfile::tempdir().unwrap();
    let mut spec = bash(
        "head -c 1000000 /dev/zero | tr '\\0' a; echo; echo END; echo small >&2",
        path_only(),
    );
    spec.output_files = Some(dsh_process::OutputFiles {
        dir: tmp.path().join("spill"),
        name: "bash".into(),
        max_bytes: 64 * 1024 * 1024,
    });
    let r = run(&spec, CancellationToken::new()).await.unwrap();
    assert_eq!(r.stdout.total_bytes, 1_000_005);
    assert_eq!(r.stdout.omitted_bytes, 1_000_005 - 64_000);
    assert_eq!(r.stdout.output_file_bytes, Some(1_000_005));
    let path = r.stdout.output_file.clone().unwrap();
    let mut want = vec![b'a'; 1_000_000];
    want.extend_from_slice(b"\nEND\n");
    assert_eq!(std::fs::read(&path).unwrap(), want);
    assert_eq!(r.stderr.text, "small\n");
    assert_eq!(
        (r.stderr.output_file, r.stderr.output_file_bytes),
        (None, None)
    );
    assert_eq!(
        std::fs::read_dir(tmp.path().join("spill")).unwrap().count(),
        1
    );
}

/// `run_with_stdin`: the child reads the bytes and then end-of-file (a `cat` that would wait
/// for more input ends), and a child that ignores its stdin and outlives the timeout is still
/// killed with its group.
#[tokio::test]
async fn stdin_is_written_then_closed() {
    let r = dsh_process::run_with_stdin(
        &bash("cat; echo \"[eof]\"", path_only()),
        b"{\"a\":1}\n".to_vec(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(r.outcome.exit_code, Some(0), "{r:?}");
    assert_eq!(r.stdout.text, "{\"a\":1}\n[eof]\n");

    let mut spec = bash("sleep 30", path_only());
    spec.timeout_ms = Some(300);
    let r = dsh_process::run_with_stdin(&spec, vec![b'x'; 1 << 20], CancellationToken::new())
        .await
        .unwrap();
    assert!(r.outcome.timed_out, "{r:?}");
    assert_eq!(r.outcome.signal.as_deref(), Some("SIGTERM"));
}
